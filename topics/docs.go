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

<!-- Generated from topics/catalog.go, the consumer groups' descriptors (consumers/*/group.go) and schemas/avro by 'proliferate topics docs' (make docs). Do not edit. -->

Every record on an event topic is Avro. By default the value is in Avro
**single-object encoding**: the two bytes ` + "`C3 01`" + `, the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema's *Parsing Canonical Form*, then
the Avro binary body. Both follow the Avro specification exactly, so any Avro
library given the ` + "`.avsc`" + ` files in ` + "`schemas/avro/`" + ` finds the writer schema
by the fingerprint it computes itself (Java's
` + "`SchemaNormalization.parsingFingerprint64`" + `, avsc's ` + "`type.schema()`" + `, ...); the
fingerprint of every version is listed under [Schema fingerprints](#schema-fingerprints).
When the platform runs with ` + "`SCHEMA_REGISTRY_URL`" + `, values use the Confluent
wire format instead (` + "`00`" + `, 4-byte schema id, body) and the schemas are
registered under their full record name.

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
		name := "`" + t.Name + "`"
		if t.ContentBearing {
			name += " (content)"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n",
			name, t.Key, t.Partitions, t.Cleanup, FormatRetention(t.Retention), formatBytes(MaxRecordBytes(t.Name)),
			codeList(t.EventTypes, "(original records)"), strings.Join(t.Producers, ", "), orNone(t.Consumers))
	}
	b.WriteString(`
Topics marked **(content)** are content-bearing: their records hold prompts,
agent messages and tool input and output (code and prose), redacted of
secrets. Grant read access to them as to the repositories themselves.

A record (key, value and headers) never exceeds its topic's **max record** size:
producers check it before the transaction that produces the record commits, and
content that can be larger (raw webhook bodies) travels by reference to the
blob store.

Dead-letter topics keep the failed record's key, value and headers and add
` + "`dlq.error`, `dlq.permanent`, `dlq.attempts`, `dlq.group`, `dlq.source.topic`, `dlq.source.partition`, `dlq.source.offset`, `dlq.failed_at`" + `.
`)
	b.WriteString(`
## Consumer groups

Every group listed here runs in ` + "`proliferate dev`" + ` (and so ` + "`make run`" + `) and in
` + "`proliferate worker`" + ` given no group names. A group that **owns** tables is a
materializer: its tables are a pure function of its topics, and
` + "`proliferate replay --group NAME --from-beginning`" + ` rebuilds them.

| group | consumes | owns | what it does |
| --- | --- | --- | --- |
`)
	for _, g := range Groups() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, codeList(g.Inputs, ""), codeList(g.Owns, "—"), g.Description)
	}
	if err := fingerprintSection(&b); err != nil {
		return "", err
	}
	for _, t := range All() {
		if t.DeadLetterOf != "" {
			continue
		}
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n\n- **Key:** %s\n- **Partitions:** %d, cleanup `%s`, retention %s\n- **Produced by:** %s\n- **Consumed by:** %s\n",
			t.Name, t.Description, t.Key, t.Partitions, t.Cleanup, FormatRetention(t.Retention),
			strings.Join(t.Producers, ", "), orNone(t.Consumers))
		if t.ContentBearing {
			b.WriteString("- **Content-bearing:** records hold prompts, agent messages and tool input and output (code and prose), redacted of secrets; grant read access as to the repositories themselves.\n")
		}
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

// fingerprintSection documents the fingerprints of every schema version and
// shows how a reader outside Go decodes a record.
func fingerprintSection(b *strings.Builder) error {
	files, err := schemas.SchemaFiles()
	if err != nil {
		return err
	}
	b.WriteString(`
## Schema fingerprints

A single-object record names its writer schema only by the CRC-64-AVRO
fingerprint of the schema's Parsing Canonical Form, as the Avro specification
defines both: the canonical form keeps only ` + "`name`, `type`, `fields`, `symbols`,\n`items`, `values` and `size`" + ` (with full names), so ` + "`doc`" + `, defaults, aliases and
logical types do not change it (` + "`{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}`" + `
is ` + "`\"long\"`" + `). A reader computes the fingerprints from the ` + "`.avsc`" + ` files itself;
this table is for checking. The fingerprint is shown as a 64-bit hex number; in
the record its 8 bytes are little-endian (` + "`C3 01 87 02 0d 07 ...`" + ` for
` + "`984856a8070d0287`" + `).

Records written by releases before the fingerprints followed the
specification carry a **legacy fingerprint** instead, which other Avro
libraries cannot compute (it came from goavro's non-standard canonical form,
which keeps ` + "`{\"type\":\"long\"}`" + ` for logical types). Proliferate's consumers
read both; only the spec fingerprint is written. To read such older records
elsewhere, also map the legacy fingerprints below to their schemas.

| schema file | fingerprint | legacy fingerprint (still read, never written) |
| --- | --- | --- |
`)
	for _, f := range files {
		fmt.Fprintf(b, "| `schemas/avro/%s` | `%016x` | `%016x` |\n", f.File, f.Fingerprint, f.LegacyFingerprint)
	}
	b.WriteString(`
Decoding a record in Node.js with [avsc](https://www.npmjs.com/package/avsc)
(` + "`npm install avsc`" + `): read the fingerprint, find the schema with that
fingerprint, decode the body with it. avsc's ` + "`type.schema()`" + ` is the Parsing
Canonical Form; Node's crypto has no CRC-64-AVRO, so it is computed here (the
specification gives the algorithm). Proliferate's tests decode a record of
every event type this way.

` + "```js" + `
const fs = require('fs');
const avro = require('avsc');

// CRC-64-AVRO, the Avro specification's 64-bit fingerprint.
const EMPTY = 0xc15d213aa4d7a795n;
const TABLE = Array.from({length: 256}, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n));
  return fp;
});
const crc64 = (text) => [...Buffer.from(text, 'utf8')]
  .reduce((fp, b) => (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(b)) & 0xffn)], EMPTY);

// Every schema version, keyed by the fingerprint of its canonical form.
const schemas = new Map();
for (const file of fs.readdirSync('schemas/avro')) {
  const type = avro.Type.forSchema(JSON.parse(fs.readFileSync('schemas/avro/' + file, 'utf8')));
  schemas.set(crc64(JSON.stringify(type.schema())), type);
}

// value: a Kafka record value (Buffer) in single-object encoding.
function decode(value) {
  if (value[0] !== 0xc3 || value[1] !== 0x01) throw new Error('not single-object encoded');
  const type = schemas.get(value.readBigUInt64LE(2));
  if (!type) throw new Error('unknown schema fingerprint ' + value.readBigUInt64LE(2).toString(16));
  return type.fromBuffer(value.subarray(10)); // the event: envelope fields and payload
}
` + "```" + `

avsc's default ` + "`long`" + ` refuses values beyond 2^53; pass a custom long type
(avsc's ` + "`LongType.__with`" + `, for example with BigInt) to
` + "`Type.forSchema`" + ` to read every 64-bit value exactly. Confluent-framed records
(` + "`00`" + ` and a schema id) are read through the schema registry instead.
## Reading a topic

` + "`proliferate topics tail TOPIC [--from-beginning] [--json]`" + ` prints a topic's
records decoded, with their headers: new records until interrupted, or all of
them with ` + "`--from-beginning`" + `. With ` + "`--json`" + ` each record is one JSON line
(` + "`{topic, partition, offset, timestamp, key, headers, event}`" + `, the event with its
Avro field names; a record that does not decode keeps its bytes as
` + "`value_base64`" + ` with a ` + "`decode_error`" + `). It joins no consumer group and commits
nothing, so it can run beside the platform's groups:

` + "```sh" + `
proliferate topics tail sessions.transcript --from-beginning --json | jq -c '.event.payload | {kind, text}'
` + "```" + `

Any Kafka client reads the topics too. With [kcat](https://github.com/edenhill/kcat)
(Debian package ` + "`kcat`" + `), keys and headers are text and values binary Avro:

` + "```sh" + `
# one line per record: where it is, its key and headers
kcat -b localhost:9092 -C -t sessions.transcript -o beginning -e -f '%t[%p]@%o key=%k %h\n'
# the raw value of one record, for the Avro decoder above
kcat -b localhost:9092 -C -t sessions.transcript -o beginning -c 1 -e -f '%s' > record.bin
` + "```" + `

and ` + "`decode(fs.readFileSync('record.bin'))`" + ` with the avsc code above prints the event. With
` + "`SCHEMA_REGISTRY_URL`" + ` set (Confluent framing) kcat decodes values itself:
` + "`kcat -b localhost:9092 -C -t sessions.transcript -s value=avro -r http://registry:8081`" + `.
`)
	return nil
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
