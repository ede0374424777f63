package topics

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/proliferate/proliferate/schemas"
)

// FormatRetention renders a retention for people.
func FormatRetention(d time.Duration) string {
	switch {
	case d == Forever:
		return "forever"
	case d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	default:
		return d.String()
	}
}

// Markdown renders docs/topics.md from the catalog and the schemas. A test
// fails when the committed file differs; regenerate with `make docs`.
func Markdown() (string, error) {
	var b strings.Builder
	b.WriteString(`# Kafka topics

<!-- Generated from topics/catalog.go and schemas/avro by 'proliferate topics docs' (make docs). Do not edit. -->

Every record on an event topic is Avro. By default the value is in Avro
**single-object encoding**: the two bytes ` + "`C3 01`" + `, the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema's canonical form, then the Avro
binary body. Any Avro library can decode it given the ` + "`.avsc`" + ` files in
` + "`schemas/avro/`" + `. When the platform runs with ` + "`SCHEMA_REGISTRY_URL`" + `, values
use the Confluent wire format instead (` + "`00`" + `, 4-byte schema id, body) and the
schemas are registered under their full record name.

Every event record carries the headers ` + "`event_type`" + `, ` + "`event_id`" + ` and
` + "`content-type`" + `, and every schema starts with the same envelope fields
(` + "`event_id`, `event_type`, `occurred_at`, `org_id`, `trace_id`, `correlation_id`" + `)
followed by a ` + "`payload`" + ` record.

Delivery is at least once: a consumer may see a record twice (after a crash or a
producer retry). Deduplicate on ` + "`event_id`" + `, or on the idempotency key the
payload documents.

Schemas evolve only backward compatibly: new fields have defaults; nothing is
renamed or removed in place. Each version stays in ` + "`schemas/avro/`" + ` as
` + "`<event_type>.v<N>.avsc`" + `.

## Summary

| topic | key | partitions | cleanup | retention | max record | event types | produced by | consumed by |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
`)
	for _, t := range All() {
		fmt.Fprintf(&b, "| `%s` | %s | %d | %s | %s | %s | %s | %s | %s |\n",
			t.Name, t.Key, t.Partitions, t.Cleanup, FormatRetention(t.Retention), formatBytes(MaxRecordBytes(t.Name)),
			codeList(t.EventTypes, "(original records)"), strings.Join(t.Producers, ", "), orNone(t.Consumers))
	}
	b.WriteString(`
A record (key, value and headers) never exceeds its topic's **max record** size:
producers check it before the transaction that produces the record commits, and
content that can be larger (raw webhook bodies) travels by reference to the
blob store.

Dead-letter topics keep the failed record's key, value and headers and add
` + "`dlq.error`, `dlq.permanent`, `dlq.attempts`, `dlq.group`, `dlq.source.topic`, `dlq.source.partition`, `dlq.source.offset`, `dlq.failed_at`" + `.
`)
	for _, t := range All() {
		if t.DeadLetterOf != "" {
			continue
		}
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n\n- **Key:** %s\n- **Partitions:** %d, cleanup `%s`, retention %s\n- **Produced by:** %s\n- **Consumed by:** %s\n",
			t.Name, t.Description, t.Key, t.Partitions, t.Cleanup, FormatRetention(t.Retention),
			strings.Join(t.Producers, ", "), orNone(t.Consumers))
		for _, et := range t.EventTypes {
			text, file, err := schemas.Latest(et)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "\n### Event `%s` (`schemas/avro/%s`)\n\n| field | type | description |\n| --- | --- | --- |\n", et, file)
			if err := fieldRows(&b, text); err != nil {
				return "", fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	return b.String(), nil
}

func codeList(xs []string, empty string) string {
	if len(xs) == 0 {
		return empty
	}
	return "`" + strings.Join(xs, "`, `") + "`"
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "analytics (any reader)"
	}
	return strings.Join(xs, ", ") + ", analytics"
}

// avroField is the part of an .avsc field the docs show.
type avroField struct {
	Name    string          `json:"name"`
	Type    json.RawMessage `json:"type"`
	Doc     string          `json:"doc"`
	Default json.RawMessage `json:"default"`
}

func fieldRows(b *strings.Builder, schemaText string) error {
	var rec struct {
		Fields []avroField `json:"fields"`
	}
	if err := json.Unmarshal([]byte(schemaText), &rec); err != nil {
		return err
	}
	return rows(b, "", rec.Fields)
}

func rows(b *strings.Builder, prefix string, fields []avroField) error {
	for _, f := range fields {
		typ, nested, err := describeType(f.Type)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		doc := strings.ReplaceAll(f.Doc, "|", `\|`)
		if len(f.Default) > 0 {
			doc += fmt.Sprintf(" (default `%s`)", f.Default)
		}
		fmt.Fprintf(b, "| `%s%s` | %s | %s |\n", prefix, f.Name, typ, strings.TrimSpace(doc))
		if nested != nil {
			if err := rows(b, prefix+f.Name+".", nested); err != nil {
				return err
			}
		}
	}
	return nil
}

// describeType renders an Avro type; for a record it also returns its fields.
func describeType(raw json.RawMessage) (string, []avroField, error) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		return name, nil, nil
	}
	var union []json.RawMessage
	if json.Unmarshal(raw, &union) == nil {
		var parts []string
		var nested []avroField
		optional := false
		for _, u := range union {
			s, n, err := describeType(u)
			if err != nil {
				return "", nil, err
			}
			if s == "null" {
				optional = true
				continue
			}
			parts = append(parts, s)
			if n != nil {
				nested = n
			}
		}
		s := strings.Join(parts, " \\| ")
		if optional {
			s += " (nullable)"
		}
		return s, nested, nil
	}
	var obj struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		LogicalType string          `json:"logicalType"`
		Items       json.RawMessage `json:"items"`
		Values      json.RawMessage `json:"values"`
		Symbols     []string        `json:"symbols"`
		Fields      []avroField     `json:"fields"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", nil, err
	}
	switch obj.Type {
	case "record":
		return "record " + obj.Name, obj.Fields, nil
	case "array":
		s, n, err := describeType(obj.Items)
		return "array<" + s + ">", n, err
	case "map":
		s, n, err := describeType(obj.Values)
		return "map<" + s + ">", n, err
	case "enum":
		return "enum " + strings.Join(obj.Symbols, " \\| "), nil, nil
	default:
		if obj.LogicalType != "" {
			return obj.Type + " (" + obj.LogicalType + ")", nil, nil
		}
		return obj.Type, nil, nil
	}
}

// formatBytes renders a size limit in KiB.
func formatBytes(n int) string {
	return fmt.Sprintf("%d KiB", n>>10)
}
