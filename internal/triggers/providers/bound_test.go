package providers_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/enrich"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// withFields decodes a fixture, applies edit to it and encodes it again.
func withFields(t testing.TB, file string, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(fixture(t, file), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bounded checks the projection's invariants on an event and returns the
// JSON of its context.
func bounded(t testing.TB, ev runs.Event) []byte {
	t.Helper()
	b, err := json.Marshal(ev.Context)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > providers.MaxContextBytes {
		t.Fatalf("context is %d bytes, over %d", len(b), providers.MaxContextBytes)
	}
	if len(ev.Title) > providers.MaxTitleBytes || len(ev.URL) > providers.MaxURLBytes || len(ev.DedupKey) > providers.MaxDedupKeyBytes ||
		len(ev.ExternalID) > providers.MaxExternalIDBytes || len(ev.EventType) > providers.MaxEventTypeBytes ||
		len(ev.ProviderEventType) > providers.MaxEventTypeBytes {
		t.Fatalf("event fields over their limits: title %d url %d dedup %d external %d types %d/%d", len(ev.Title), len(ev.URL),
			len(ev.DedupKey), len(ev.ExternalID), len(ev.EventType), len(ev.ProviderEventType))
	}
	for _, s := range []string{ev.Title, ev.URL, ev.DedupKey, ev.ExternalID, ev.EventType, ev.ProviderEventType} {
		if !utf8.ValidString(s) {
			t.Fatalf("invalid UTF-8 in %q", s)
		}
	}
	return b
}

// A 626 KB GitHub issue body: stored once (description), cut to
// 16 KiB with a marker; the enrichment summary is what it was before.
func TestBoundGitHubIssueBody(t *testing.T) {
	line := "Stack trace line: at Widget.save (src/editor/save.ts:12:20) — ünïcode ✓\n"
	body := strings.Repeat(line, 626_000/len(line))
	payload := withFields(t, "github/issues_opened.json", func(m map[string]any) { m["issue"].(map[string]any)["body"] = body })
	if len(payload) < 626_000 {
		t.Fatalf("payload is %d bytes", len(payload))
	}
	ev := parseOne(t, providers.Webhook{Provider: "github", Headers: gh("issues", "d-big"), Body: payload, ReceivedAt: received})
	raw := bounded(t, ev)
	if len(raw) > 20<<10 {
		t.Fatalf("context is %d bytes; the body should be stored once, cut to 16 KiB", len(raw))
	}
	g := get(ev.Context, "github").(map[string]any)
	for _, k := range []string{"issue_body", "pr_body", "description"} {
		if _, ok := g[k]; ok {
			t.Errorf("github.%s stored beside the description", k)
		}
	}
	desc := ev.Context["description"].(string)
	keep, mark, ok := strings.Cut(desc, "…[truncated ")
	if !ok || len(desc) > providers.MaxDescriptionBytes || !strings.HasPrefix(body, keep) || !utf8.ValidString(desc) {
		t.Fatalf("description %d bytes, marker %v", len(desc), ok)
	}
	if want := fmt.Sprintf("%d bytes]", len(body)-len(keep)); mark != want {
		t.Fatalf("marker %q, want %q", mark, want)
	}
	if ev.Context[providers.TruncatedKey] != true {
		t.Fatal("truncated not set")
	}
	// Filters and enrichment see what they saw before.
	if ok, why := providers.Matches("github", map[string]any{"events": []any{"issues"}, "labels": []any{"bug"}}, ev); !ok {
		t.Fatalf("filter: %s", why)
	}
	p, err := enrich.Build(enrich.Input{Provider: ev.Provider, Title: ev.Title, Context: ev.Context})
	if err != nil {
		t.Fatal(err)
	}
	if want := []rune(body)[:10000]; p.Summary.Description == nil || *p.Summary.Description != strings.TrimSpace(string(want)) {
		t.Fatal("enrichment description changed")
	}
}

func TestBoundPullRequestAndCheckRun(t *testing.T) {
	body := strings.Repeat("x", 100<<10)
	pr := withFields(t, "github/pull_request_opened.json", func(m map[string]any) { m["pull_request"].(map[string]any)["body"] = body })
	ev := parseOne(t, providers.Webhook{Provider: "github", Headers: gh("pull_request", "d1"), Body: pr, ReceivedAt: received})
	bounded(t, ev)
	if _, ok := get(ev.Context, "github").(map[string]any)["pr_body"]; ok {
		t.Error("pr_body stored")
	}
	if d := ev.Context["description"].(string); len(d) > providers.MaxDescriptionBytes || !strings.HasPrefix(d, "xxxx") {
		t.Errorf("description %d bytes", len(d))
	}
	cr := withFields(t, "github/check_run_completed.json", func(m map[string]any) {
		m["check_run"].(map[string]any)["output"].(map[string]any)["summary"] = body
	})
	ev = parseOne(t, providers.Webhook{Provider: "github", Headers: gh("check_run", "d2"), Body: cr, ReceivedAt: received})
	bounded(t, ev)
	if _, ok := get(ev.Context, "github").(map[string]any)["error_details"]; ok {
		t.Error("the check summary is stored twice")
	}
}

// A push of 300 commits with long messages: 100 commits (with their
// subjects), commits_total, the messages once in the description.
func TestBoundPushCommits(t *testing.T) {
	payload := withFields(t, "github/push.json", func(m map[string]any) {
		var commits []any
		for i := range 300 {
			commits = append(commits, map[string]any{"id": fmt.Sprintf("%040d", i), "message": fmt.Sprintf("Commit %d\n\n%s", i, strings.Repeat("details ", 1000)),
				"author": map[string]any{"name": "octocat"}, "added": []any{fmt.Sprintf("src/f%d.go", i)}, "modified": []any{}, "removed": []any{}})
		}
		m["commits"] = commits
	})
	ev := parseOne(t, providers.Webhook{Provider: "github", Headers: gh("push", "d3"), Body: payload, ReceivedAt: received})
	bounded(t, ev)
	g := get(ev.Context, "github").(map[string]any)
	commits := g["commits"].([]any)
	if len(commits) != providers.MaxCommits || g["commits_total"] != int64(300) {
		t.Fatalf("%d commits, total %v", len(commits), g["commits_total"])
	}
	if msg := commits[7].(map[string]any)["message"]; msg != "Commit 7" {
		t.Fatalf("commit message %q, want its subject", msg)
	}
	if files := ev.Context["related_files"].([]string); len(files) != providers.MaxRelatedFiles || ev.Context["related_files_total"] != int64(300) {
		t.Fatalf("%d related files", len(files))
	}
	if ok, why := providers.Matches("github", map[string]any{"events": []any{"push"}, "branches": []any{"main"}}, ev); !ok {
		t.Fatal(why)
	}
}

// A custom payload up to 64 KiB is kept exactly (filters see what was
// sent); a larger one is cut, and the context stays within its limit
// whatever the payload's shape.
func TestBoundCustomPayload(t *testing.T) {
	small := fmt.Appendf(nil, `{"status":"failed","log":%q,"items":[%s1]}`, strings.Repeat("a", 40<<10), strings.Repeat("1,", 500))
	ev := parseOne(t, providers.Webhook{Provider: "custom", Body: small, ReceivedAt: received})
	var want map[string]any
	_ = json.Unmarshal(small, &want)
	if !reflect.DeepEqual(ev.Context["payload"], want) || ev.Context[providers.TruncatedKey] != nil {
		t.Fatal("a 40 KiB payload was changed")
	}

	deep := strings.Repeat(`{"d":`, 200) + "1" + strings.Repeat("}", 200)
	cases := map[string][]byte{
		"big strings":     fmt.Appendf(nil, `{"status":"failed","a":%q,"b":%q}`, strings.Repeat("x", 600<<10), strings.Repeat("y", 600<<10)),
		"escapes":         fmt.Appendf(nil, `{"status":"failed","html":%s,"ctl":%s}`, jsonText(strings.Repeat("<&>", 200<<10)), jsonText(strings.Repeat("\x01\"", 300<<10))),
		"many keys":       manyKeys(50_000),
		"long arrays":     fmt.Appendf(nil, `{"status":"failed","ids":[%s0],"objs":[%s{}]}`, strings.Repeat("123456789,", 100_000), strings.Repeat(`{"k":"vvvvvvvvvv"},`, 50_000)),
		"deep":            fmt.Appendf(nil, `{"status":"failed","deep":%s}`, deep),
		"unicode":         fmt.Appendf(nil, `{"status":"failed","u":%s}`, jsonText(strings.Repeat("\u2028✓ü", 200<<10))),
		"nested big list": fmt.Appendf(nil, `{"status":"failed","l":[[%q,%q],[%q]]}`, strings.Repeat("p", 300<<10), strings.Repeat("q", 300<<10), strings.Repeat("r", 300<<10)),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			ev := parseOne(t, providers.Webhook{Provider: "custom", Body: body, ReceivedAt: received})
			raw := bounded(t, ev)
			if ev.Context[providers.TruncatedKey] != true {
				t.Fatal("not marked truncated")
			}
			if len(raw) > providers.MaxPayloadBytes+4<<10 {
				t.Fatalf("context %d bytes: the payload should be cut to 64 KiB", len(raw))
			}
			// Scalars come first: the status survives whatever follows.
			if name != "many keys" && get(ev.Context, "payload", "status") != "failed" {
				t.Fatalf("status lost: %.300s", raw)
			}
			if ok, why := providers.Matches("custom", map[string]any{"conditions": []any{map[string]any{"path": "$.status", "exists": true}}}, ev); !ok && name != "many keys" {
				t.Fatal(why)
			}
		})
	}
}

func jsonText(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

func manyKeys(n int) []byte {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"key_%06d":"value value value %d",`, i, i)
	}
	b.WriteString(`"zz":0}`)
	return []byte(b.String())
}

func TestBoundOtherProviders(t *testing.T) {
	big := strings.Repeat("Ünicode & <html> ", 40_000)
	t.Run("linear", func(t *testing.T) {
		body := withFields(t, "linear/issue_create.json", func(m map[string]any) { m["data"].(map[string]any)["description"] = big })
		ev := parseOne(t, providers.Webhook{Provider: "linear", Body: body, ReceivedAt: received})
		bounded(t, ev)
		if _, ok := get(ev.Context, "linear").(map[string]any)["description"]; ok {
			t.Error("linear.description stored beside the description")
		}
		if d := ev.Context["description"].(string); len(d) > providers.MaxDescriptionBytes || !strings.HasPrefix(big, strings.Split(d, "…[truncated")[0]) {
			t.Errorf("description %d bytes", len(d))
		}
		// The poller's builder is bounded too.
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		pev, err := providers.LinearIssueEvent(m["data"].(map[string]any), "create", received)
		if err != nil {
			t.Fatal(err)
		}
		bounded(t, pev)
		if len(pev.Context["description"].(string)) > providers.MaxDescriptionBytes {
			t.Error("poller event not bounded")
		}
	})
	t.Run("sentry", func(t *testing.T) {
		body := withFields(t, "sentry/event_alert.json", func(m map[string]any) {
			ev := m["data"].(map[string]any)["event"].(map[string]any)
			vals := ev["exception"].(map[string]any)["values"].([]any)
			exc := vals[len(vals)-1].(map[string]any)
			var frames []any
			for i := range 300 {
				frames = append(frames, map[string]any{"filename": fmt.Sprintf("src/%d/%s.ts", i, strings.Repeat("f", 500)), "function": big[:3000],
					"lineno": i, "in_app": true, "pre_context": []any{big[:5000], big[:5000]}, "context_line": big[:5000]})
			}
			exc["stacktrace"] = map[string]any{"frames": frames}
			ev["title"] = big
		})
		ev := parseOne(t, providers.Webhook{Provider: "sentry", Headers: map[string]string{"sentry-hook-resource": "event_alert"}, Body: body, ReceivedAt: received})
		bounded(t, ev)
		if st := get(ev.Context, "sentry", "stack_trace").(string); len(st) > providers.MaxStackTraceBytes {
			t.Errorf("stack trace %d bytes", len(st))
		}
	})
	t.Run("posthog", func(t *testing.T) {
		body := withFields(t, "posthog/flat_form.json", func(m map[string]any) {
			props := m["properties"].(map[string]any)
			for i := range 20_000 {
				props[fmt.Sprintf("p%05d", i)] = big[:100]
			}
			m["event"] = strings.Repeat("e", 5000)
			m["uuid"] = ""
			m["distinct_id"] = strings.Repeat("u", 5000)
			m["properties"].(map[string]any)["$current_url"] = "https://app.acme.dev/" + strings.Repeat("q", 5000)
		})
		ev := parseOne(t, providers.Webhook{Provider: "posthog", Body: body, ReceivedAt: received})
		raw := bounded(t, ev)
		if ev.URL != "" {
			t.Errorf("a %d-byte URL kept", len(ev.URL))
		}
		if len(raw) > 3*providers.MaxPayloadBytes {
			t.Errorf("context %d bytes", len(raw))
		}
		// Two long identifiers differing only past the limit stay distinct.
		other := withFields(t, "posthog/flat_form.json", func(m map[string]any) {
			m["event"] = strings.Repeat("e", 4999) + "f"
			m["uuid"] = ""
			m["distinct_id"] = strings.Repeat("u", 5000)
		})
		ev2 := parseOne(t, providers.Webhook{Provider: "posthog", Body: other, ReceivedAt: received})
		if ev.DedupKey == ev2.DedupKey || ev.ProviderEventType == ev2.ProviderEventType {
			t.Error("long identifiers collide after bounding")
		}
	})
}
