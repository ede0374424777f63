package providers_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// fuzzParse checks the parser's contract on arbitrary input: it never
// panics, every error is a *ParseError, and every event is complete and
// storable (a dedup key, the provider, a JSON context) and can be matched.
func fuzzParse(f *testing.F, provider, dir string, headerName string, headerValues ...string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, h := range append(headerValues, "") {
			f.Add(b, h)
		}
	}
	for _, junk := range []string{"", "{}", "null", "[]", `{"a":`, `{"event":{}}`, `{"data":{"issue":{"id":1}}}`, "\xff\xfe"} {
		f.Add([]byte(junk), "")
	}
	f.Fuzz(func(t *testing.T, body []byte, hv string) {
		w := providers.Webhook{Provider: provider, Body: body, ReceivedAt: time.Unix(1714641000, 0), Headers: map[string]string{}}
		if headerName != "" {
			w.Headers[headerName] = hv
		}
		evs, err := providers.Parse(w)
		if err != nil {
			var pe *providers.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			if len(evs) != 0 {
				t.Fatal("events with an error")
			}
		}
		for _, ev := range evs {
			if ev.DedupKey == "" || ev.Provider == "" || ev.EventType == "" || ev.OccurredAt.IsZero() {
				t.Fatalf("incomplete event %+v", ev)
			}
			if _, err := json.Marshal(ev.Context); err != nil {
				t.Fatalf("context: %v", err)
			}
			bounded(t, ev) // within the projection's limits
			providers.Matches(ev.Provider, map[string]any{}, ev)
		}
		_, _ = providers.LifecycleOf(w)
		providers.RoutingOf(w)
		if providers.FallbackDedupKey(w) == "" {
			t.Fatal("no fallback dedup key")
		}
	})
}

func FuzzParseGitHub(f *testing.F) {
	fuzzParse(f, "github", "github", "x-github-event", "issues", "pull_request", "push", "check_suite", "check_run", "workflow_run", "installation", "ping")
}

func FuzzParseLinear(f *testing.F) { fuzzParse(f, "linear", "linear", "linear-delivery", "d-1") }

func FuzzParseSentry(f *testing.F) {
	fuzzParse(f, "sentry", "sentry", "sentry-hook-resource", "issue", "event_alert", "error", "installation")
}

func FuzzParsePostHog(f *testing.F) { fuzzParse(f, "posthog", "posthog", "") }

func FuzzParseCustom(f *testing.F) { fuzzParse(f, "custom", "custom", "idempotency-key", "k-1") }

func FuzzParseNango(f *testing.F) { fuzzParse(f, "nango", "nango", "x-github-event", "issues") }

// FuzzCustomConditions: any config either has problems or can be matched
// without panicking.
func FuzzCustomConditions(f *testing.F) {
	f.Add(`$.a.b[0].c`, `{"a":{"b":[{"c":1}]}}`, `1`)
	f.Add(`$["x y"][2]`, `{"x y":[0,1,2]}`, `2`)
	f.Add(`$.`, `{}`, `null`)
	f.Fuzz(func(t *testing.T, path, payload, value string) {
		var v any
		if json.Unmarshal([]byte(value), &v) != nil {
			return
		}
		cfg := map[string]any{"conditions": []any{map[string]any{"path": path, "equals": v}}}
		if len(providers.ValidateConfig("custom", cfg)) > 0 {
			return
		}
		evs, err := providers.Parse(providers.Webhook{Provider: "custom", Body: []byte(payload), ReceivedAt: time.Unix(0, 0)})
		if err != nil {
			return
		}
		providers.Matches("custom", cfg, evs[0])
	})
}
