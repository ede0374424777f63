package triggerprocessor_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's world: an org with an automation, the handler, and
// helpers to build records and read what the handler wrote.
type env struct {
	t       testing.TB
	pool    *pgxpool.Pool
	codec   *schemas.Codec
	handler consumers.Handler
	org     string
	auto    string
	// installation and conn are unique per test, substituted into fixtures
	// for their fixed installation id and connection ids.
	installation int64
	conn         string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Options{Cfg: &config.Config{}, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pool: pool, codec: codec, org: runstest.Org(t, pool),
		installation: 10_000_000 + rand.Int64N(89_999_999), conn: "conn-" + uuid.NewString()}
	e.auto = runstest.Automation(t, pool, e.org)
	e.handler = triggerprocessor.Handler(triggerprocessor.Deps{Pool: pool, Codec: codec, Integrations: svc})
	return e
}

func (e *env) fixture(name string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "triggers", "providers", "testdata", name))
	if err != nil {
		e.t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("51234567"), []byte(strconv.FormatInt(e.installation, 10)))
	for _, c := range []string{"conn-gh-1", "conn-linear-1", "conn-sentry-1"} {
		b = bytes.ReplaceAll(b, []byte(c), []byte(e.conn))
	}
	return b
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) scalar(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// githubApp registers the test's GitHub App installation in the org.
func (e *env) githubApp() string {
	var id string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, github_installation_id)
		VALUES ($1, 'github-app', 'github', 'github-app-' || $2::bigint::text, $2::bigint) RETURNING id::text`, e.org, e.installation).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// nango registers the test's Nango connection for a provider in the org.
func (e *env) nango(provider string) string {
	var id string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key)
		VALUES ($1, 'nango', $2, $3, $2) RETURNING id::text`, e.org, provider, e.conn).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) trigger(provider, integrationID string, config map[string]any) string {
	return runstest.NewTrigger(e.t, e.pool, runstest.Trigger{OrgID: e.org, AutomationID: e.auto, Provider: provider, IntegrationID: integrationID, Config: config})
}

type record struct {
	provider, route      string
	headers              map[string]string
	body                 []byte
	delivery             string
	integrationID        string
	triggerID            string
	orgID                string // envelope org (direct routes)
	providerEventTypeHdr string
}

func (e *env) message(r record) *consumers.Message {
	wr := &schemas.WebhookReceived{Provider: r.provider, Route: r.route, Method: "POST", RequestPath: "/webhooks/" + r.provider,
		ContentType: "application/json", Headers: r.headers, Body: r.body, SignatureVerified: true,
		ReceivedAt: time.Date(2024, 5, 2, 9, 15, 0, 0, time.UTC)}
	if wr.Headers == nil {
		wr.Headers = map[string]string{}
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	wr.DeliveryID, wr.IntegrationID, wr.TriggerID = opt(r.delivery), opt(r.integrationID), opt(r.triggerID)
	wr.ProviderEventType = opt(r.providerEventTypeHdr)
	return &consumers.Message{Event: schemas.New(r.orgID, wr), Attempt: 1}
}

func (e *env) handle(m *consumers.Message) {
	e.t.Helper()
	if err := e.handler(context.Background(), m); err != nil {
		e.t.Fatalf("handler: %v", err)
	}
}

type eventRow struct {
	Status, SkipReason, Error, ProviderEventType, NormalizedType, DedupKey, WebhookEventID, Title string
	Context                                                                                       map[string]any
	Runs                                                                                          int
}

func (e *env) events(triggerID string) []eventRow {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT te.status, COALESCE(te.skip_reason, ''), COALESCE(te.error_message, ''),
			te.provider_event_type, te.normalized_event_type, te.dedup_key, COALESCE(te.webhook_event_id, ''), te.title, te.parsed_context,
			(SELECT count(*) FROM automation_runs r WHERE r.trigger_event_id = te.id AND r.status = 'queued')
		FROM trigger_events te WHERE te.trigger_id = $1 ORDER BY te.created_at`, triggerID)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []eventRow
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.Status, &r.SkipReason, &r.Error, &r.ProviderEventType, &r.NormalizedType, &r.DedupKey, &r.WebhookEventID,
			&r.Title, &r.Context, &r.Runs); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// one asserts the trigger has exactly one event and returns it.
func (e *env) one(triggerID string) eventRow {
	e.t.Helper()
	evs := e.events(triggerID)
	if len(evs) != 1 {
		e.t.Fatalf("trigger %s has %d events, want 1: %+v", triggerID, len(evs), evs)
	}
	return evs[0]
}

func gh(event string) map[string]string {
	return map[string]string{"x-github-event": event}
}

// Every provider's fixtures, through their real routes, queue one run with
// the normalized event, attributed to the webhook event.
func TestFixturesQueueRuns(t *testing.T) {
	type route func(e *env) (rec record, trigger string)
	type fixtureCase struct {
		name, file string
		headers    map[string]string
		route      route
		wantType   string
	}
	githubApp := func(e *env) (record, string) {
		return record{provider: "github", route: schemas.WebhookRouteDirect, delivery: uuid.NewString()}, e.trigger("github", e.githubApp(), nil)
	}
	direct := func(provider string) route {
		return func(e *env) (record, string) {
			integ := e.nango(provider)
			return record{provider: provider, route: schemas.WebhookRouteDirect, integrationID: integ}, e.trigger(provider, integ, nil)
		}
	}
	byOrg := func(e *env) (record, string) {
		return record{provider: "posthog", route: schemas.WebhookRouteDirect, orgID: e.org}, e.trigger("posthog", "", nil)
	}
	viaNango := func(provider string, config map[string]any) route {
		return func(e *env) (record, string) {
			return record{provider: provider, route: schemas.WebhookRouteNango}, e.trigger(provider, e.nango(provider), config)
		}
	}
	cases := []fixtureCase{
		{"github issues", "github/issues_opened.json", gh("issues"), githubApp, "issues:opened"},
		{"github pull_request", "github/pull_request_opened.json", gh("pull_request"), githubApp, "pull_request:opened"},
		{"github push", "github/push.json", gh("push"), githubApp, "push"},
		{"github check_suite", "github/check_suite_completed.json", gh("check_suite"), githubApp, "check_suite:completed"},
		{"github check_run", "github/check_run_completed.json", gh("check_run"), githubApp, "check_run:completed"},
		{"github workflow_run", "github/workflow_run_completed.json", gh("workflow_run"), githubApp, "workflow_run:completed"},
		{"linear create", "linear/issue_create.json", map[string]string{"linear-delivery": "ld-1"}, direct("linear"), "Issue:create"},
		{"linear update", "linear/issue_update.json", nil, direct("linear"), "Issue:update"},
		{"sentry issue", "sentry/issue_created.json", map[string]string{"sentry-hook-resource": "issue"}, direct("sentry"), "issue:created"},
		{"sentry event alert", "sentry/event_alert.json", map[string]string{"sentry-hook-resource": "event_alert"}, direct("sentry"), "event_alert:triggered"},
		{"posthog flat form (org route)", "posthog/flat_form.json", nil, byOrg, "checkout_failed"},
		{"posthog destination form (org route)", "posthog/destination_form.json", nil, byOrg, "$exception"},
		{"custom webhook", "custom/deploy_finished.json", nil, func(e *env) (record, string) {
			tr := e.trigger("custom", "", map[string]any{"conditions": []any{map[string]any{"path": "$.status", "equals": "failed"}}})
			return record{provider: "custom", route: schemas.WebhookRouteTrigger, triggerID: tr}, tr
		}, "webhook:received"},
		{"nango forward github", "nango/forward_github_issue.json", nil, viaNango("github", map[string]any{"events": []any{"issues"}}), "issues:opened"},
		{"nango forward linear", "nango/forward_linear_issue.json", nil, viaNango("linear", map[string]any{"team_id": "ENG"}), "Issue:create"},
		{"nango forward sentry", "nango/forward_sentry_event_alert.json", nil, viaNango("sentry", map[string]any{"min_level": "error"}), "event_alert:triggered"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			rec, trig := tc.route(e)
			rec.headers, rec.body = tc.headers, e.fixture(tc.file)
			m := e.message(rec)
			e.handle(m)
			ev := e.one(trig)
			if ev.Status != "queued" || ev.Runs != 1 || ev.ProviderEventType != tc.wantType || ev.WebhookEventID != m.Event.EventID || ev.Title == "" {
				t.Fatalf("event %+v", ev)
			}
			if n := e.scalar(`SELECT count(*) FROM outbox WHERE topic = $1 AND key = $2`, topics.TriggersEvents, trig); n != 1 {
				t.Fatalf("%d triggers.events rows", n)
			}
			e.handle(m) // replay: nothing new
			if evs := e.events(trig); len(evs) != 1 || evs[0].Runs != 1 {
				t.Fatalf("after replay: %+v", evs)
			}
		})
	}
}

// Filter mismatches and disabled triggers or automations are recorded as
// skipped, with the reason, and queue nothing.
func TestSkippedWithReason(t *testing.T) {
	e := newEnv(t)
	integ := e.githubApp()
	mismatch := e.trigger("github", integ, map[string]any{"events": []any{"pull_request"}})
	disabled := runstest.NewTrigger(t, e.pool, runstest.Trigger{OrgID: e.org, AutomationID: e.auto, Provider: "github", IntegrationID: integ, Disabled: true})
	offAuto := runstest.Automation(t, e.pool, e.org)
	e.exec(`UPDATE automations SET enabled = false WHERE id = $1`, offAuto)
	autoOff := runstest.NewTrigger(t, e.pool, runstest.Trigger{OrgID: e.org, AutomationID: offAuto, Provider: "github", IntegrationID: integ})
	matching := e.trigger("github", integ, map[string]any{"events": []any{"issues"}, "labels": []any{"bug"}})

	e.handle(e.message(record{provider: "github", route: "direct", headers: gh("issues"), delivery: "del-skip", body: e.fixture("github/issues_opened.json")}))

	for trig, want := range map[string]string{mismatch: "filter_mismatch", disabled: "trigger_disabled", autoOff: "automation_disabled"} {
		ev := e.one(trig)
		if ev.Status != "skipped" || ev.SkipReason != want || ev.Runs != 0 {
			t.Errorf("%s: %+v", want, ev)
		}
	}
	if d, _ := e.one(mismatch).Context["skip_detail"].(string); !strings.Contains(d, `event "issues" is not one of events`) {
		t.Errorf("skip detail %q", d)
	}
	if ev := e.one(matching); ev.Status != "queued" || ev.Runs != 1 {
		t.Errorf("matching: %+v", ev)
	}
}

// Two triggers matching one event make two runs.
func TestTwoTriggersTwoRuns(t *testing.T) {
	e := newEnv(t)
	integ := e.nango("linear")
	a := e.trigger("linear", integ, map[string]any{"states": []any{"Todo"}})
	other := runstest.Automation(t, e.pool, e.org)
	b := runstest.NewTrigger(t, e.pool, runstest.Trigger{OrgID: e.org, AutomationID: other, Provider: "linear", IntegrationID: integ,
		Config: map[string]any{"labels": []any{"bug"}, "actions": []any{"create"}}})
	e.handle(e.message(record{provider: "linear", route: "direct", integrationID: integ, body: e.fixture("linear/issue_create.json")}))
	if e.one(a).Runs != 1 || e.one(b).Runs != 1 {
		t.Fatal("want a run per trigger")
	}
	if n := e.scalar(`SELECT count(*) FROM automation_runs WHERE trigger_id = ANY($1::uuid[])`, []string{a, b}); n != 2 {
		t.Fatalf("%d runs", n)
	}
}

// The same delivery sent twice, and as 20 distinct records at once (ingest
// retries produce new event ids), yields one run.
func TestSameDeliveryOneRun(t *testing.T) {
	e := newEnv(t)
	trig := e.trigger("github", e.githubApp(), nil)
	body := e.fixture("github/push.json")
	rec := record{provider: "github", route: "direct", headers: gh("push"), delivery: "72d3162e-0001", body: body}
	e.handle(e.message(rec))
	e.handle(e.message(rec))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() { errs <- e.handler(context.Background(), e.message(rec)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ev := e.one(trig); ev.Runs != 1 || ev.DedupKey != "github:delivery:72d3162e-0001" {
		t.Fatalf("%+v", ev)
	}
	if n := e.scalar(`SELECT count(*) FROM outbox WHERE topic = $1 AND key = $2`, topics.TriggersEvents, trig); n != 1 {
		t.Fatalf("%d triggers.events rows", n)
	}

	// Custom webhooks have no delivery id: the same body within five minutes
	// is the same event.
	custom := e.trigger("custom", "", nil)
	crec := record{provider: "custom", route: "trigger", triggerID: custom, body: []byte(`{"hello":"world"}`)}
	var wg2 sync.WaitGroup
	for range 20 {
		wg2.Go(func() {
			if err := e.handler(context.Background(), e.message(crec)); err != nil {
				t.Error(err)
			}
		})
	}
	wg2.Wait()
	if ev := e.one(custom); ev.Runs != 1 {
		t.Fatalf("%+v", ev)
	}
}

// A payload that cannot be parsed is a failed event per candidate trigger,
// with the error; no run; the handler returns nil (nothing to retry), and a
// replay adds nothing.
func TestParseFailureRecordsFailedEvent(t *testing.T) {
	e := newEnv(t)
	trig := e.trigger("custom", "", nil)
	m := e.message(record{provider: "custom", route: "trigger", triggerID: trig, body: []byte(`{"truncated": `)})
	e.handle(m)
	e.handle(m)
	ev := e.one(trig)
	if ev.Status != "failed" || ev.Runs != 0 || !strings.Contains(ev.Error, "invalid JSON") || ev.NormalizedType != "parse_failed" {
		t.Fatalf("%+v", ev)
	}

	integ := e.githubApp()
	a, b := e.trigger("github", integ, nil), e.trigger("github", integ, nil)
	body := []byte(fmt.Sprintf(`{"action":"opened","installation":{"id":%d},"repository":{"full_name":"acme/widgets"}}`, e.installation))
	e.handle(e.message(record{provider: "github", route: "direct", headers: gh("issues"), delivery: "bad-1", body: body}))
	for _, tr := range []string{a, b} {
		if ev := e.one(tr); ev.Status != "failed" || !strings.Contains(ev.Error, "issues event without a issue object") || ev.DedupKey != "failed:github:delivery:bad-1" {
			t.Fatalf("%+v", ev)
		}
	}
}

// Records that reach no trigger write nothing: unknown installation, unknown
// trigger, a trigger of another org, lifecycle-free events.
func TestNoCandidates(t *testing.T) {
	e := newEnv(t)
	trig := e.trigger("custom", "", nil)
	otherOrg := runstest.Org(t, e.pool)
	before := e.scalar(`SELECT count(*) FROM trigger_events`)
	for _, r := range []record{
		{provider: "github", route: "direct", headers: gh("issues"), delivery: "x", body: e.fixture("github/issues_opened.json")}, // no integration
		{provider: "custom", route: "trigger", triggerID: uuid.NewString(), body: []byte(`{}`)},
		{provider: "custom", route: "trigger", triggerID: "not-a-uuid", body: []byte(`{}`)},
		{provider: "custom", route: "trigger", triggerID: trig, orgID: otherOrg, body: []byte(`{}`)},
		{provider: "posthog", route: "direct", body: e.fixture("posthog/flat_form.json")}, // no identity
		{provider: "linear", route: "direct", integrationID: "garbage", body: e.fixture("linear/issue_create.json")},
	} {
		e.handle(e.message(r))
	}
	if after := e.scalar(`SELECT count(*) FROM trigger_events`); after != before {
		t.Fatalf("%d events written", after-before)
	}
}

// GitHub App installation suspend, unsuspend and delete update the
// integration's status and start nothing.
func TestInstallationLifecycle(t *testing.T) {
	e := newEnv(t)
	integ := e.githubApp()
	trig := e.trigger("github", integ, nil)
	status := func() string {
		var s string
		if err := e.pool.QueryRow(context.Background(), `SELECT status FROM integrations WHERE id = $1`, integ).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, step := range []struct{ file, want string }{
		{"installation_suspend.json", "suspended"},
		{"installation_suspend.json", "suspended"}, // replay
		{"installation_unsuspend.json", "active"},
		{"installation_deleted.json", "deleted"},
		{"installation_suspend.json", "deleted"}, // refused transition: dropped, not retried
	} {
		e.handle(e.message(record{provider: "github", route: "direct", headers: gh("installation"), delivery: uuid.NewString(), body: e.fixture("github/" + step.file)}))
		if got := status(); got != step.want {
			t.Fatalf("after %s: %s, want %s", step.file, got, step.want)
		}
	}
	if len(e.events(trig)) != 0 {
		t.Fatal("lifecycle webhook recorded trigger events")
	}
}

func TestNangoAuthLifecycle(t *testing.T) {
	e := newEnv(t)
	integ := e.nango("linear")
	e.handle(e.message(record{provider: "linear", route: "nango", body: e.fixture("nango/auth_refresh_failed.json")}))
	var status, reason string
	if err := e.pool.QueryRow(context.Background(), `SELECT status, status_reason FROM integrations WHERE id = $1`, integ).Scan(&status, &reason); err != nil {
		t.Fatal(err)
	}
	if status != "expired" || !strings.Contains(reason, "invalid_grant") {
		t.Fatalf("%s %q", status, reason)
	}
	e.handle(e.message(record{provider: "linear", route: "nango", body: e.fixture("nango/auth_creation.json")}))
	if err := e.pool.QueryRow(context.Background(), `SELECT status FROM integrations WHERE id = $1`, integ).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "active" {
		t.Fatal(status)
	}
}

// Infrastructure errors are returned (the runner retries them); they are not
// marked permanent.
func TestDatabaseDownIsRetried(t *testing.T) {
	e := newEnv(t)
	trig := e.trigger("custom", "", nil)
	pool, err := pgxpool.New(context.Background(), testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	h := triggerprocessor.Handler(triggerprocessor.Deps{Pool: pool, Codec: e.codec})
	err = h(context.Background(), e.message(record{provider: "custom", route: "trigger", triggerID: trig, body: []byte(`{}`)}))
	if err == nil || consumers.IsPermanent(err) {
		t.Fatalf("error %v", err)
	}
	// A record of another type is permanent (dead-lettered).
	bad := &consumers.Message{Event: schemas.New(e.org, &schemas.TriggerEvent{})}
	if err := e.handler(context.Background(), bad); !consumers.IsPermanent(err) {
		t.Fatalf("wrong event type: %v", err)
	}
	if err := e.handler(context.Background(), &consumers.Message{}); !consumers.IsPermanent(err) {
		t.Fatalf("undecoded: %v", err)
	}
}
