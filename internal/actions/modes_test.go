package actions_test

import (
	"fmt"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
)

// stored is one level of the cascade: absent, or a stored value.
type stored struct {
	present bool
	value   string
}

func (s stored) String() string {
	if !s.present {
		return "absent"
	}
	return fmt.Sprintf("%q", s.value)
}

// levels covers every state a stored mode can be in: absent, each valid
// mode, and unknown values (garbage, empty, wrong case).
var levels = []stored{
	{}, {true, "allow"}, {true, "require_approval"}, {true, "deny"},
	{true, "bogus"}, {true, ""}, {true, "ALLOW"},
}

// strictness orders modes: a higher number is stricter.
var strictness = map[actions.Mode]int{actions.ModeAllow: 0, actions.ModeRequireApproval: 1, actions.ModeDeny: 2}

// TestResolveModeMatrix runs every combination of automation override ×
// org default × risk × drift × source kind against the cascade as the spec
// states it, and checks the invariants that matter for safety.
func TestResolveModeMatrix(t *testing.T) {
	risks := []actions.RiskLevel{actions.RiskRead, actions.RiskWrite, actions.RiskDanger}
	inferred := map[actions.RiskLevel]actions.Mode{
		actions.RiskRead: actions.ModeAllow, actions.RiskWrite: actions.ModeRequireApproval, actions.RiskDanger: actions.ModeDeny,
	}
	sources := []string{"linear", "connector:7d3c2a4e-0000-4000-8000-000000000001"}
	n := 0
	for _, auto := range levels {
		for _, org := range levels {
			for _, risk := range risks {
				for _, src := range sources {
					for _, drifted := range []bool{false, true} {
						n++
						in := actions.ModeInput{SourceID: src, ActionID: "create_issue", Risk: risk, Drifted: drifted,
							AutomationModes: map[string]string{"other:create_issue": "allow"},
							OrgModes:        map[string]string{src + ":other_action": "deny"}}
						key := actions.ModeKey(src, "create_issue")
						if auto.present {
							in.AutomationModes[key] = auto.value
						}
						if org.present {
							in.OrgModes[key] = org.value
						}
						got := actions.ResolveMode(in)

						// The spec, stated independently of the implementation.
						var want actions.ModeResolution
						var base string
						switch {
						case auto.present:
							base, want.Source = auto.value, actions.ModeSourceAutomation
						case org.present:
							base, want.Source = org.value, actions.ModeSourceOrg
						default:
							base, want.Source = string(inferred[risk]), actions.ModeSourceInferred
						}
						isConnector := src != "linear"
						want.Drifted = drifted && isConnector
						switch base {
						case "allow", "require_approval", "deny":
							want.Mode = actions.Mode(base)
						default:
							want.Mode, want.DeniedReason = actions.ModeDeny, "unknown_mode:"+base
						}
						if want.Drifted && want.Mode == actions.ModeAllow {
							want.Mode = actions.ModeRequireApproval
						}
						if want.Mode == actions.ModeDeny && want.DeniedReason == "" {
							want.DeniedReason = "policy"
						}
						name := fmt.Sprintf("auto=%v/org=%v/risk=%s/%s/drifted=%v", auto, org, risk, src, drifted)
						if got != want {
							t.Errorf("%s: got %+v, want %+v", name, got, want)
						}

						// Drift never relaxes a mode, and only connectors drift.
						in.Drifted = false
						undrifted := actions.ResolveMode(in)
						if strictness[got.Mode] < strictness[undrifted.Mode] {
							t.Errorf("%s: drift relaxed %s to %s", name, undrifted.Mode, got.Mode)
						}
						if !isConnector && got.Mode != undrifted.Mode {
							t.Errorf("%s: drift changed a provider source's mode", name)
						}
						if drifted && isConnector && got.Mode == actions.ModeAllow {
							t.Errorf("%s: a drifted connector tool was allowed", name)
						}
					}
				}
			}
		}
	}
	if n != 7*7*3*2*2 {
		t.Fatalf("ran %d cases", n)
	}
}

// TestResolveModeSpecExamples pins the spec's own statements.
func TestResolveModeSpecExamples(t *testing.T) {
	const conn = "connector:abc"
	cases := []struct {
		name string
		in   actions.ModeInput
		want actions.ModeResolution
	}{
		{"read infers allow", actions.ModeInput{SourceID: "sentry", ActionID: "get_issue", Risk: actions.RiskRead},
			actions.ModeResolution{Mode: actions.ModeAllow, Source: actions.ModeSourceInferred}},
		{"write infers approval", actions.ModeInput{SourceID: "linear", ActionID: "create_issue", Risk: actions.RiskWrite},
			actions.ModeResolution{Mode: actions.ModeRequireApproval, Source: actions.ModeSourceInferred}},
		{"danger infers deny", actions.ModeInput{SourceID: conn, ActionID: "drop", Risk: actions.RiskDanger},
			actions.ModeResolution{Mode: actions.ModeDeny, Source: actions.ModeSourceInferred, DeniedReason: "policy"}},
		{"unknown risk asks", actions.ModeInput{SourceID: "x", ActionID: "y", Risk: "weird"},
			actions.ModeResolution{Mode: actions.ModeRequireApproval, Source: actions.ModeSourceInferred}},
		{"automation beats org", actions.ModeInput{SourceID: "linear", ActionID: "create_issue", Risk: actions.RiskWrite,
			AutomationModes: map[string]string{"linear:create_issue": "allow"}, OrgModes: map[string]string{"linear:create_issue": "deny"}},
			actions.ModeResolution{Mode: actions.ModeAllow, Source: actions.ModeSourceAutomation}},
		{"org beats risk", actions.ModeInput{SourceID: "sentry", ActionID: "get_issue", Risk: actions.RiskRead,
			OrgModes: map[string]string{"sentry:get_issue": "deny"}},
			actions.ModeResolution{Mode: actions.ModeDeny, Source: actions.ModeSourceOrg, DeniedReason: "policy"}},
		{"unknown automation mode denies even over org allow", actions.ModeInput{SourceID: "linear", ActionID: "a", Risk: actions.RiskRead,
			AutomationModes: map[string]string{"linear:a": "always"}, OrgModes: map[string]string{"linear:a": "allow"}},
			actions.ModeResolution{Mode: actions.ModeDeny, Source: actions.ModeSourceAutomation, DeniedReason: "unknown_mode:always"}},
		{"drifted allow asks", actions.ModeInput{SourceID: conn, ActionID: "search", Risk: actions.RiskRead, Drifted: true,
			OrgModes: map[string]string{conn + ":search": "allow"}},
			actions.ModeResolution{Mode: actions.ModeRequireApproval, Source: actions.ModeSourceOrg, Drifted: true}},
		{"drifted deny stays deny", actions.ModeInput{SourceID: conn, ActionID: "search", Risk: actions.RiskRead, Drifted: true,
			OrgModes: map[string]string{conn + ":search": "deny"}},
			actions.ModeResolution{Mode: actions.ModeDeny, Source: actions.ModeSourceOrg, Drifted: true, DeniedReason: "policy"}},
		{"drift on a provider source is ignored", actions.ModeInput{SourceID: "linear", ActionID: "list_issues", Risk: actions.RiskRead, Drifted: true},
			actions.ModeResolution{Mode: actions.ModeAllow, Source: actions.ModeSourceInferred}},
	}
	for _, c := range cases {
		if got := actions.ResolveMode(c.in); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestResolveModeDoesNotAllocate(t *testing.T) {
	in := actions.ModeInput{SourceID: "connector:7d3c2a4e-0000-4000-8000-000000000001", ActionID: "search_docs", Risk: actions.RiskRead,
		OrgModes: map[string]string{"connector:7d3c2a4e-0000-4000-8000-000000000001:search_docs": "allow"}, Drifted: true}
	if a := testing.AllocsPerRun(100, func() { actions.ResolveMode(in) }); a != 0 {
		t.Fatalf("ResolveMode allocates %v times per call", a)
	}
}

func TestValidMode(t *testing.T) {
	for _, m := range []string{"allow", "require_approval", "deny"} {
		if !actions.ValidMode(m) {
			t.Errorf("%s rejected", m)
		}
	}
	for _, m := range []string{"", "Allow", "approve", "deny "} {
		if actions.ValidMode(m) {
			t.Errorf("%q accepted", m)
		}
	}
}
