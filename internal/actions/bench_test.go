package actions_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
)

var sinkMode actions.ModeResolution

// BenchmarkResolveMode measures the cascade on the invoke hot path against
// its floor: one lookup of a prebuilt key in a map of the same size
// (benchreport prints each case as a ratio to baseline).
func BenchmarkResolveMode(b *testing.B) {
	const src = "connector:7d3c2a4e-0000-4000-8000-000000000001"
	org := map[string]string{}
	auto := map[string]string{}
	for i := range 50 {
		org[actions.ModeKey(src, "tool_"+strings.Repeat("x", i%7)+string(rune('a'+i%26)))] = "allow"
		auto[actions.ModeKey("linear", "action_"+string(rune('a'+i%26)))] = "deny"
	}
	org[actions.ModeKey(src, "search_docs")] = "allow"
	auto[actions.ModeKey("linear", "create_issue")] = "allow"
	prebuilt := actions.ModeKey(src, "search_docs")
	b.Run("baseline", func(b *testing.B) {
		var v string
		for b.Loop() {
			v = org[prebuilt]
		}
		sinkMode.DeniedReason = v
	})
	cases := map[string]actions.ModeInput{
		"automation_override": {SourceID: "linear", ActionID: "create_issue", Risk: actions.RiskWrite, AutomationModes: auto, OrgModes: org},
		"org_default":         {SourceID: src, ActionID: "search_docs", Risk: actions.RiskRead, AutomationModes: auto, OrgModes: org},
		"inferred_default":    {SourceID: "sentry", ActionID: "get_issue", Risk: actions.RiskRead, AutomationModes: auto, OrgModes: org},
		"drifted_connector":   {SourceID: src, ActionID: "search_docs", Risk: actions.RiskRead, AutomationModes: auto, OrgModes: org, Drifted: true},
	}
	for _, name := range []string{"automation_override", "org_default", "inferred_default", "drifted_connector"} {
		in := cases[name]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				sinkMode = actions.ResolveMode(in)
			}
		})
	}
}

// BenchmarkShapeResult measures shaping a typical 40 KB result to 10 KB
// against json.Valid over the same bytes (the cheapest full pass).
func BenchmarkShapeResult(b *testing.B) {
	items := make([]map[string]any, 200)
	for i := range items {
		items[i] = map[string]any{"id": i, "title": strings.Repeat("issue title ", 10), "access_token": "t", "labels": []string{"bug", "p1"}}
	}
	raw, _ := json.Marshal(map[string]any{"issues": items, "total": 200})
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			json.Valid(raw)
		}
	})
	b.Run("shape", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			actions.ShapeResult(raw, actions.DefaultMaxResultBytes)
		}
	})
	// An organization's redactor: 50 secret values, two literal and two
	// regex patterns, plus a call's own secrets (what an invocation uses).
	var vals []string
	for i := range 50 {
		vals = append(vals, fmt.Sprintf("org-secret-%02d-%s", i, strings.Repeat("k", 24)))
	}
	org, err := actions.NewOrgRedactor(vals, []actions.Pattern{{Pattern: "intranet.corp"}, {Pattern: "Project Falcon"},
		{Pattern: `(?i)\bcust-[0-9]{6}\b`, Regex: true}, {Pattern: `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, Regex: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("shape_org_50_secrets", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			actions.ShapeResultWith(raw, actions.DefaultMaxResultBytes, org.With("call-secret-value", "integration-token-value"))
		}
	})
	// The worst the pattern limits allow: four expressions of ~100
	// instructions that keep every thread alive.
	worst, err := actions.NewOrgRedactor(vals, []actions.Pattern{{Pattern: `.{96}x`, Regex: true}, {Pattern: `.{96}y`, Regex: true},
		{Pattern: `.{96}z`, Regex: true}, {Pattern: `.{96}w`, Regex: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("shape_org_worst_patterns", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			actions.ShapeResultWith(raw, actions.DefaultMaxResultBytes, worst)
		}
	})
}
