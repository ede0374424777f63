package litellm_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm/litellmfake"
	"github.com/proliferate/proliferate/internal/testenv"
)

func newIssuer(t *testing.T, fake *litellmfake.Server, billingEnabled bool, logs *testenv.LogBuffer) *litellm.Issuer {
	t.Helper()
	lg := slog.Default()
	if logs != nil {
		lg = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	iss, err := litellm.NewIssuer(litellm.IssuerDeps{
		Client:         newClient(t, fake),
		Pool:           testenv.Postgres(t),
		PublicURL:      "https://llm.example.com/v1/",
		KeyDuration:    24 * time.Hour,
		BillingEnabled: billingEnabled,
		Logger:         lg,
	})
	if err != nil {
		t.Fatalf("new issuer: %v", err)
	}
	return iss
}

func TestIssueCreatesTeamOnceAndScopesKeyToOrgAndSession(t *testing.T) {
	pool := testenv.Postgres(t)
	fake := litellmfake.New(t, masterKey)
	logs := &testenv.LogBuffer{}
	iss := newIssuer(t, fake, true, logs)
	ctx := context.Background()
	org := newOrg(t, pool, billing.StateActive, 100) // 100 credits = $1 of credits = $0.333333 of model spend
	s1, s2 := newSession(t, pool, org, "starting"), newSession(t, pool, org, "starting")

	before := time.Now()
	k1, err := iss.Issue(ctx, org, s1)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	if _, err := iss.Issue(ctx, org, s2); err != nil {
		t.Fatalf("second issue: %v", err)
	}

	if n := len(fake.Calls("/team/new")); n != 1 {
		t.Fatalf("/team/new called %d times, want once", n)
	}
	if tm, ok := fake.Teams()[org]; !ok || tm.TeamID != org {
		t.Fatalf("team %s not created: %+v", org, fake.Teams())
	}
	if k1.BaseURL != "https://llm.example.com/v1" {
		t.Fatalf("base URL %q", k1.BaseURL)
	}
	wantBudget := int64(333_333)
	if k1.MaxBudgetUSDMicros != wantBudget {
		t.Fatalf("budget %d micros, want %d", k1.MaxBudgetUSDMicros, wantBudget)
	}
	if d := k1.ExpiresAt.Sub(before.Add(24 * time.Hour)); d < -time.Second || d > time.Minute {
		t.Fatalf("expires at %s, want about 24 h after %s", k1.ExpiresAt, before)
	}
	var stored *litellmfake.Key
	for _, k := range fake.Keys() {
		if k.Key == k1.Value {
			stored = &k
		}
	}
	if stored == nil {
		t.Fatal("issued key not stored in LiteLLM")
	}
	if stored.TeamID != org || stored.UserID != s1 || stored.KeyAlias != s1 || stored.Duration != "24h" {
		t.Fatalf("key scoped team=%s user=%s alias=%s duration=%s", stored.TeamID, stored.UserID, stored.KeyAlias, stored.Duration)
	}
	if stored.MaxBudget == nil || *stored.MaxBudget != 0.333333 {
		t.Fatalf("max_budget %v, want 0.333333", stored.MaxBudget)
	}
	// Neither the master key nor a virtual key is ever logged.
	if out := logs.String(); strings.Contains(out, masterKey) || strings.Contains(out, k1.Value) {
		t.Fatalf("a key was logged:\n%s", out)
	}
}

func TestIssueAgainReplacesTheSessionsKey(t *testing.T) {
	pool := testenv.Postgres(t)
	fake := litellmfake.New(t, masterKey)
	iss := newIssuer(t, fake, true, nil)
	org := newOrg(t, pool, billing.StateTrial, 1000)
	s := newSession(t, pool, org, "running")
	k1, err := iss.Issue(context.Background(), org, s)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	k2, err := iss.Issue(context.Background(), org, s) // LiteLLM refuses a duplicate alias: replaced
	if err != nil {
		t.Fatalf("re-issue: %v", err)
	}
	var aliases []string
	for _, k := range fake.Keys() {
		if k.KeyAlias == s {
			aliases = append(aliases, k.Key)
		}
	}
	if len(aliases) != 1 || aliases[0] != k2.Value || k1.Value == k2.Value {
		t.Fatalf("session keys %v, want only the new one", aliases)
	}
}

func TestIssueWithoutCredits(t *testing.T) {
	pool := testenv.Postgres(t)
	fake := litellmfake.New(t, masterKey)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		state   string
		credits int64
	}{
		{"zero balance", billing.StateActive, 0},
		{"negative balance", billing.StateGrace, -5},
		{"exhausted", billing.StateExhausted, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			org := newOrg(t, pool, tc.state, tc.credits)
			gen := len(fake.Calls("/key/generate"))
			_, err := newIssuer(t, fake, true, nil).Issue(ctx, org, newSession(t, pool, org, "starting"))
			if !errors.Is(err, llmkeys.ErrNoCredits) {
				t.Fatalf("issue: %v, want ErrNoCredits", err)
			}
			if n := len(fake.Calls("/key/generate")); n != gen {
				t.Fatal("a key was generated for an organization without credits")
			}
		})
	}

	t.Run("billing disabled: no budget", func(t *testing.T) {
		org := newOrg(t, pool, billing.StateUnconfigured, 0)
		k, err := newIssuer(t, fake, false, nil).Issue(ctx, org, newSession(t, pool, org, "starting"))
		if err != nil {
			t.Fatalf("issue: %v", err)
		}
		if k.MaxBudgetUSDMicros != 0 {
			t.Fatalf("budget %d with billing disabled", k.MaxBudgetUSDMicros)
		}
		calls := fake.Calls("/key/generate")
		if _, ok := calls[len(calls)-1].Body["max_budget"]; ok {
			t.Fatal("max_budget sent with billing disabled")
		}
	})
}

func TestRevokeSessionDeletesByAliasAndToleratesMissingKeys(t *testing.T) {
	pool := testenv.Postgres(t)
	fake := litellmfake.New(t, masterKey)
	iss := newIssuer(t, fake, true, nil)
	ctx := context.Background()
	org := newOrg(t, pool, billing.StateActive, 500)
	s := newSession(t, pool, org, "running")
	if _, err := iss.Issue(ctx, org, s); err != nil {
		t.Fatalf("issue: %v", err)
	}
	if err := iss.RevokeSession(ctx, s, "paused"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	calls := fake.Calls("/key/delete")
	if len(calls) != 1 || !slices.Equal(toStrings(calls[0].Body["key_aliases"]), []string{s}) {
		t.Fatalf("/key/delete calls %+v, want key_aliases [%s]", calls, s)
	}
	for _, k := range fake.Keys() {
		if k.KeyAlias == s {
			t.Fatal("key still live after revocation")
		}
	}
	// Nothing left to delete: LiteLLM answers 404, which is success.
	if err := iss.RevokeSession(ctx, s, "stopped"); err != nil {
		t.Fatalf("revoke of a revoked key: %v", err)
	}
	// A real failure is reported.
	fake.FailNext("/key/delete", http.StatusBadRequest)
	if err := iss.RevokeSession(ctx, s, "stopped"); err == nil || !strings.Contains(err.Error(), "/key/delete") {
		t.Fatalf("revoke with a 400: %v", err)
	}
}

func TestRevokeOrgDeletesKeysOfSessionsNotStopped(t *testing.T) {
	pool := testenv.Postgres(t)
	fake := litellmfake.New(t, masterKey)
	iss := newIssuer(t, fake, true, nil)
	ctx := context.Background()
	org, other := newOrg(t, pool, billing.StateActive, 500), newOrg(t, pool, billing.StateActive, 500)
	running, paused, stopped := newSession(t, pool, org, "running"), newSession(t, pool, org, "paused"), newSession(t, pool, org, "stopped")
	otherSession := newSession(t, pool, other, "running")
	for _, s := range []struct{ org, id string }{{org, running}, {org, paused}, {org, stopped}, {other, otherSession}} {
		fake.AddKey(litellmfake.Key{TeamID: s.org, UserID: s.id, KeyAlias: s.id})
	}
	if err := iss.RevokeOrg(ctx, org, "credit_limit"); err != nil {
		t.Fatalf("revoke org: %v", err)
	}
	calls := fake.Calls("/key/delete")
	if len(calls) != 1 {
		t.Fatalf("%d /key/delete calls", len(calls))
	}
	got := toStrings(calls[0].Body["key_aliases"])
	slices.Sort(got)
	want := []string{running, paused}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("deleted aliases %v, want %v (not the stopped session, not another org)", got, want)
	}
	var live []string
	for _, k := range fake.Keys() {
		live = append(live, k.KeyAlias)
	}
	slices.Sort(live)
	want = []string{stopped, otherSession}
	slices.Sort(want)
	if !slices.Equal(live, want) {
		t.Fatalf("live keys %v, want %v", live, want)
	}
}

func toStrings(v any) []string {
	var out []string
	xs, _ := v.([]any)
	for _, x := range xs {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
