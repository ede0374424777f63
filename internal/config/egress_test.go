package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox/egress"
)

// The egress defaults are what a production operator would choose: the
// allowlist, holding the git host and the package registries (the same
// list as the provider's own default).
func TestEgressDefaults(t *testing.T) {
	cfg, err := LoadFrom(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SandboxEgress != egress.ModeAllowlist || !slices.Equal(cfg.SandboxEgressAllow, egress.DefaultAllow) {
		t.Fatalf("SANDBOX_EGRESS=%q SANDBOX_EGRESS_ALLOW=%q, want allowlist and %q", cfg.SandboxEgress, cfg.SandboxEgressAllow, egress.DefaultAllow)
	}
	cfg, err = LoadFrom(env(map[string]string{"SANDBOX_EGRESS": "open", "SANDBOX_EGRESS_ALLOW": "mirror.internal:8443, *.corp.example"}))
	if err != nil || cfg.SandboxEgress != "open" || !slices.Equal(cfg.SandboxEgressAllow, []string{"mirror.internal:8443", "*.corp.example"}) {
		t.Fatalf("%+v %v", cfg, err)
	}
	for vars, want := range map[[2]string]string{
		{"SANDBOX_EGRESS", "proxy"}:               "must be one of none, allowlist, open",
		{"SANDBOX_EGRESS_ALLOW", "github.com:0"}:  "port out of range",
		{"SANDBOX_EGRESS_ALLOW", "*.10.0.0.1"}:    "wildcard needs a host name",
		{"SANDBOX_EGRESS_ALLOW", "exa mple.com"}:  "invalid host name",
		{"SANDBOX_EGRESS_ALLOW", "user@host:443"}: "invalid host name",
	} {
		_, err := LoadFrom(env(map[string]string{vars[0]: vars[1]}))
		var cerr *Error
		if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0].Var != vars[0] || !strings.Contains(cerr.Problems[0].Message, want) {
			t.Errorf("%s=%s: %v, want …%s…", vars[0], vars[1], err, want)
		}
	}
}
