package integrations_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/testenv"
)

type world struct {
	svc   *integrations.Service
	pool  *pgxpool.Pool
	gh    *fakes.GitHub
	nango *fakes.Nango
	clock *fakes.Clock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	key, _ := keys(t)
	w := &world{pool: testenv.Postgres(t), clock: fakes.NewClock(t0)}
	w.gh = fakes.NewGitHub(t, "4242", &key.PublicKey, w.clock.Now)
	w.nango = fakes.NewNango(t, "nango-secret", map[string]string{"sentry": "sentry", "linear": "linear", "github": "github"}, w.clock.Now)
	vars := map[string]string{
		"GITHUB_APP_ID": "4242", "GITHUB_APP_PRIVATE_KEY": pkcs1PEM(key), "GITHUB_API_URL": w.gh.URL,
		"NANGO_URL": w.nango.URL, "NANGO_SECRET_KEY": "nango-secret",
	}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(cfg.EncryptionKeys)
	if err != nil {
		t.Fatal(err)
	}
	w.svc, err = integrations.New(integrations.Options{Cfg: cfg, Pool: w.pool, Redis: testenv.Redis(t), Box: box, Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

var (
	seq     int
	instSeq atomic.Int64
)

// inst returns an installation id unique in this test binary's database
// (tests of the package share it, also across -count runs).
func inst() int64 { return 1_000_000 + time.Now().UnixNano()%1_000_000_000*100 + instSeq.Add(1) }

// org creates an organization with an owner; it returns both ids.
func (w *world) org(t *testing.T) (orgID, userID string) {
	t.Helper()
	seq++
	err := w.pool.QueryRow(context.Background(), `WITH u AS (INSERT INTO users (email) VALUES ($1) RETURNING id),
		o AS (INSERT INTO organizations (name, slug) VALUES ('Org', $2) RETURNING id),
		m AS (INSERT INTO members (org_id, user_id, role) SELECT o.id, u.id, 'owner' FROM o, u)
		SELECT o.id::text, u.id::text FROM o, u`,
		fmt.Sprintf("svc%d-%d@example.com", seq, time.Now().UnixNano()), fmt.Sprintf("svc-org-%d-%d", seq, time.Now().UnixNano())).Scan(&orgID, &userID)
	if err != nil {
		t.Fatal(err)
	}
	return orgID, userID
}

func (w *world) githubIntegration(t *testing.T, orgID, userID string, inst int64) integrations.Integration {
	t.Helper()
	var id string
	err := w.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		github_installation_id, created_by) VALUES ($1, 'github-app', 'github', $2, $3, $4) RETURNING id::text`,
		orgID, fmt.Sprintf("github-app-%d", inst), inst, userID).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	it, err := w.svc.Lookup(context.Background(), orgID, id)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

func (w *world) nangoIntegration(t *testing.T, orgID, userID, preset, connID string) integrations.Integration {
	t.Helper()
	var id string
	err := w.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		provider_config_key, created_by) VALUES ($1, 'nango', $2, $3, $2, $4) RETURNING id::text`,
		orgID, preset, connID, userID).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	it, err := w.svc.Lookup(context.Background(), orgID, id)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

func (w *world) status(t *testing.T, id string) (integrations.Status, string) {
	t.Helper()
	var s integrations.Status
	var reason string
	if err := w.pool.QueryRow(context.Background(), `SELECT status, status_reason FROM integrations WHERE id = $1`, id).Scan(&s, &reason); err != nil {
		t.Fatal(err)
	}
	return s, reason
}

func (w *world) countStatus(t *testing.T, orgID, status string) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM integrations WHERE org_id = $1 AND status = $2`, orgID, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGetTokenResolvesBothProviders(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	id501 := inst()
	w.gh.AddInstallation(fakes.GitHubInstallation{ID: id501, Login: "acme"})
	gh := w.githubIntegration(t, orgID, userID, id501)
	tok, err := w.svc.GetToken(ctx, gh)
	if err != nil || tok.Value != w.gh.Issued()[0] {
		t.Fatalf("github token %v", err)
	}
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: "conn-lin", ConfigKey: "linear", AccessToken: "lin_live"})
	lin := w.nangoIntegration(t, orgID, userID, "linear", "conn-lin")
	tok, err = w.svc.TokenFor(ctx, orgID, lin.ID)
	if err != nil || tok.Value != "lin_live" {
		t.Fatalf("nango token %q %v", tok.Value, err)
	}
	// Another org cannot resolve it by id.
	otherOrg, _ := w.org(t)
	if _, err := w.svc.TokenFor(ctx, otherOrg, lin.ID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("cross-org TokenFor: %v", err)
	}
	res := w.svc.ResolveTokens(ctx, []integrations.Integration{gh, lin})
	if res[0].Err != nil || res[1].Err != nil || res[1].Token.Value != "lin_live" ||
		res[1].EnvVar != "LINEAR_ACCESS_TOKEN_"+lin.ID[:8] {
		t.Fatalf("resolve tokens: %+v", res)
	}
}

func TestGetTokenRecordsWhatTheProviderSays(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	id601, id602 := inst(), inst()
	w.gh.AddInstallation(fakes.GitHubInstallation{ID: id601, Login: "gone"})
	w.gh.AddInstallation(fakes.GitHubInstallation{ID: id602, Login: "paused", Suspended: true})
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: "refresh-fails", ConfigKey: "sentry", AccessToken: "x", RefreshFails: true})
	gone := w.githubIntegration(t, orgID, userID, id601)
	w.gh.RemoveInstallation(id601)
	cases := []struct {
		it         integrations.Integration
		wantErr    error
		wantStatus integrations.Status
	}{
		{gone, integrations.ErrUpstreamNotFound, integrations.StatusDeleted},
		{w.githubIntegration(t, orgID, userID, id602), integrations.ErrSuspended, integrations.StatusSuspended},
		{w.nangoIntegration(t, orgID, userID, "sentry", "no-such-conn"), integrations.ErrUpstreamNotFound, integrations.StatusRevoked},
		{w.nangoIntegration(t, orgID, userID, "sentry", "refresh-fails"), integrations.ErrReauthRequired, integrations.StatusExpired},
	}
	for _, tc := range cases {
		_, err := w.svc.GetToken(ctx, tc.it)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%s: got %v, want %v", tc.it.ConnectionID, err, tc.wantErr)
		}
		if st, reason := w.status(t, tc.it.ID); st != tc.wantStatus || reason == "" {
			t.Fatalf("%s: status %s (%q), want %s", tc.it.ConnectionID, st, reason, tc.wantStatus)
		}
		// Later calls with the current record fail fast without calling out.
		fresh, _ := w.svc.Lookup(ctx, orgID, tc.it.ID)
		if _, err := w.svc.GetToken(ctx, fresh); !errors.Is(err, integrations.ErrInactive) {
			t.Fatalf("%s: inactive integration gave %v", tc.it.ConnectionID, err)
		}
	}
	// An outage changes no status.
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: "fine", ConfigKey: "sentry", AccessToken: "y"})
	fine := w.nangoIntegration(t, orgID, userID, "sentry", "fine")
	w.nango.Fail(500)
	if _, err := w.svc.GetToken(ctx, fine); !errors.Is(err, integrations.ErrUpstreamUnavailable) {
		t.Fatal(err)
	}
	w.nango.Fail(0)
	if st, _ := w.status(t, fine.ID); st != integrations.StatusActive {
		t.Fatalf("outage changed status to %s", st)
	}
}

func TestGetTokenForUserPrefersTheirOwnConnection(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: "org-gh", ConfigKey: "github", AccessToken: "org_token"})
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: "user-gh", ConfigKey: "github", AccessToken: "user_token"})
	it := w.nangoIntegration(t, orgID, userID, "github", "org-gh")
	if _, err := w.pool.Exec(ctx, `INSERT INTO user_connections (org_id, user_id, integration_id, connection_id, provider_config_key)
		VALUES ($1, $2, 'github', 'user-gh', 'github')`, orgID, userID); err != nil {
		t.Fatal(err)
	}
	tok, err := w.svc.GetToken(ctx, it, integrations.ForUser(userID))
	if err != nil || tok.Value != "user_token" {
		t.Fatalf("for user: %q %v", tok.Value, err)
	}
	_, other := w.org(t)
	if tok, _ := w.svc.GetToken(ctx, it, integrations.ForUser(other)); tok.Value != "org_token" {
		t.Fatalf("someone without a connection got %q", tok.Value)
	}
	// The user's connection breaks: marked expired, the org token is used.
	w.nango.Update("user-gh", "github", func(c *fakes.NangoConnection) { c.RefreshFails = true })
	if tok, err := w.svc.GetToken(ctx, it, integrations.ForUser(userID)); err != nil || tok.Value != "org_token" {
		t.Fatalf("fallback: %q %v", tok.Value, err)
	}
	var st string
	_ = w.pool.QueryRow(ctx, `SELECT status FROM user_connections WHERE connection_id = 'user-gh'`).Scan(&st)
	if st != "expired" {
		t.Fatalf("user connection status %s", st)
	}
}

func TestStatusTransitions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	otherOrg, _ := w.org(t)
	id701 := inst()
	it := w.githubIntegration(t, orgID, userID, id701)
	steps := []struct {
		to   integrations.Status
		want error
	}{
		{integrations.StatusSuspended, nil},
		{integrations.StatusSuspended, nil}, // idempotent
		{integrations.StatusExpired, integrations.ErrInvalidTransition},
		{integrations.StatusActive, nil},
		{integrations.StatusDeleted, nil},
		{integrations.StatusRevoked, integrations.ErrInvalidTransition},
		{integrations.Status("bogus"), integrations.ErrInvalidTransition},
		{integrations.StatusActive, nil},
	}
	for i, s := range steps {
		if err := w.svc.SetStatus(ctx, orgID, it.ID, s.to, "test"); !errors.Is(err, s.want) && (err != nil || s.want != nil) {
			t.Fatalf("step %d → %s: %v, want %v", i, s.to, err, s.want)
		}
	}
	if err := w.svc.SetStatus(ctx, otherOrg, it.ID, integrations.StatusRevoked, ""); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("other org changed status: %v", err)
	}
	if st, _ := w.status(t, it.ID); st != integrations.StatusActive {
		t.Fatalf("status %s", st)
	}
	// Installation events reach the live record of the installation; an
	// old, deleted record of another org stays deleted.
	if _, err := w.pool.Exec(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		github_installation_id, status) VALUES ($1, 'github-app', 'github', 'github-app-old', $2, 'deleted')`, otherOrg, id701); err != nil {
		t.Fatal(err)
	}
	for _, to := range []integrations.Status{integrations.StatusSuspended, integrations.StatusActive} {
		n, err := w.svc.SetStatusByInstallation(ctx, id701, to, "installation event")
		if err != nil || n != 1 {
			t.Fatalf("by installation → %s: %d %v", to, n, err)
		}
		if st, _ := w.status(t, it.ID); st != to {
			t.Fatalf("status %s", st)
		}
	}
	if n := w.countStatus(t, otherOrg, "deleted"); n != 1 {
		t.Fatal("an installation event revived a deleted record")
	}
	// A second live record of the installation is refused by the database,
	// and reviving the deleted one while another org holds it is a conflict.
	if _, err := w.pool.Exec(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		github_installation_id) VALUES ($1, 'github-app', 'github', 'github-app-again', $2)`, otherOrg, id701); err == nil {
		t.Fatal("two live records of one installation")
	}
	var deletedID string
	_ = w.pool.QueryRow(ctx, `SELECT id::text FROM integrations WHERE org_id = $1`, otherOrg).Scan(&deletedID)
	if err := w.svc.SetStatus(ctx, otherOrg, deletedID, integrations.StatusActive, ""); !errors.Is(err, integrations.ErrInstallationClaimed) {
		t.Fatalf("revive claimed installation: %v", err)
	}
	if !integrations.StatusActive.CanBecome(integrations.StatusExpired) || integrations.StatusDeleted.CanBecome(integrations.StatusSuspended) {
		t.Fatal("transition table")
	}
}

func TestAutomationAndSessionBindings(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgA, userA := w.org(t)
	orgB, userB := w.org(t)
	itA := w.githubIntegration(t, orgA, userA, inst())
	itB := w.githubIntegration(t, orgB, userB, inst())
	automation, session := runstest.Automation(t, w.pool, orgA), sessionstest.New(t, w.pool, orgA, sessionstest.Options{})
	for range 2 { // idempotent
		if err := w.svc.BindAutomation(ctx, orgA, automation, itA.ID); err != nil {
			t.Fatal(err)
		}
		if err := w.svc.BindSession(ctx, orgA, session, itA.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.svc.BindAutomation(ctx, orgA, automation, itB.ID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("bound another org's integration: %v", err)
	}
	if err := w.svc.BindSession(ctx, orgA, session, itB.ID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("bound another org's integration: %v", err)
	}
	// The composite foreign key refuses it even past the code.
	if _, err := w.pool.Exec(ctx, `INSERT INTO session_connections (org_id, session_id, integration_id) VALUES ($1, $2, $3)`,
		orgA, session, itB.ID); err == nil {
		t.Fatal("database accepted a cross-org session binding")
	}
	for name, list := range map[string]func(context.Context, string, string) ([]integrations.Integration, error){
		automation: w.svc.AutomationIntegrations, session: w.svc.SessionIntegrations,
	} {
		got, err := list(ctx, orgA, name)
		if err != nil || len(got) != 1 || got[0].ID != itA.ID {
			t.Fatalf("%s: %v %v", name, got, err)
		}
		if got, _ := list(ctx, orgB, name); len(got) != 0 {
			t.Fatalf("%s visible to another org", name)
		}
	}
	if err := w.svc.UnbindAutomation(ctx, orgB, automation, itA.ID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("other org unbound: %v", err)
	}
	if err := w.svc.UnbindAutomation(ctx, orgA, automation, itA.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.UnbindSession(ctx, orgA, session, itA.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.UnbindSession(ctx, orgA, session, itA.ID); !errors.Is(err, integrations.ErrBindingNotFound) {
		t.Fatalf("second unbind: %v", err)
	}
	// Deleting the integration cascades to its bindings.
	if err := w.svc.BindSession(ctx, orgA, session, itA.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Disconnect(ctx, orgA, userA, true, itA.ID); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = w.pool.QueryRow(ctx, `SELECT count(*) FROM session_connections WHERE integration_id = $1`, itA.ID).Scan(&n)
	if n != 0 {
		t.Fatal("bindings survived the integration")
	}
}

func TestValidateConnectorURL(t *testing.T) {
	base := integrations.Connector{Name: "x", Transport: "remote_http", Auth: integrations.ConnectorAuth{Type: "none"},
		RiskPolicy: integrations.RiskPolicy{DefaultMode: "allow"}}
	cases := []struct {
		url  string
		prod bool
		ok   bool
	}{
		{"https://mcp.example.com/mcp", true, true},
		{"https://mcp.example.com:8443/mcp", true, true},
		{"http://mcp.example.com/mcp", false, false},
		{"http://127.0.0.1:3000/mcp", false, true},
		{"http://localhost:3000/mcp", false, true},
		{"http://[::1]:3000/mcp", false, true},
		{"http://127.0.0.1:3000/mcp", true, false},
		{"https://127.0.0.1/mcp", true, false},
		{"https://10.1.2.3/mcp", true, false},
		{"https://169.254.169.254/latest", true, false},
		{"https://user:pass@mcp.example.com/", false, false},
		{"https://mcp.example.com/#frag", false, false},
		{"ftp://mcp.example.com/", false, false},
		{"mcp.example.com/mcp", false, false},
		{"https://mcp.example.com:99999/", false, false},
	}
	for _, tc := range cases {
		c := base
		c.URL = tc.url
		fe := integrations.ValidateConnector(c, tc.prod)
		if (len(fe) == 0) != tc.ok {
			t.Errorf("%s (prod=%v): %v", tc.url, tc.prod, fe)
		}
		for _, f := range fe {
			if f.Field != "url" {
				t.Errorf("%s: unexpected field %s", tc.url, f.Field)
			}
		}
	}
}

// A bind racing a disconnect never leaves a bound repo flagged orphaned, and
// neither deadlocks.
func TestBindRacingDisconnectKeepsOrphanFlagsRight(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	for i := range 15 {
		x := w.githubIntegration(t, orgID, userID, inst())
		y := w.githubIntegration(t, orgID, userID, inst())
		var repoID string
		if err := w.pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id::text`,
			orgID, fmt.Sprintf("acme/race-%d-%d", i, time.Now().UnixNano())).Scan(&repoID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := w.svc.BindRepo(ctx, orgID, userID, x.ID, repoID); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		go func() { _, err := w.svc.Disconnect(ctx, orgID, userID, true, x.ID); errs <- err }()
		go func() { _, _, err := w.svc.BindRepo(ctx, orgID, userID, y.ID, repoID); errs <- err }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		var orphaned bool
		if err := w.pool.QueryRow(ctx, `SELECT is_orphaned FROM repos WHERE id = $1`, repoID).Scan(&orphaned); err != nil {
			t.Fatal(err)
		}
		if orphaned {
			t.Fatalf("round %d: repo bound to y is flagged orphaned", i)
		}
	}
}
