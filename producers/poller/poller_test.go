package poller_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/triggers/pollgroups"
	"github.com/proliferate/proliferate/producers/poller"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const linearToken = "lin_oauth_live_token"

type world struct {
	pool   *pgxpool.Pool
	rdb    *redis.Client
	codec  *schemas.Codec
	svc    *integrations.Service
	nango  *fakes.Nango
	linear *fakeLinear
	logs   *testenv.LogBuffer
	org    string
	auto   string
	integ  string
	base   time.Time
}

// newWorld: an org with an automation and a Linear integration connected
// through (a fake) Nango, whose token the fake Linear API accepts.
func newWorld(t *testing.T, base string) *world {
	t.Helper()
	w := &world{pool: testenv.Postgres(t), rdb: testenv.Redis(t), logs: &testenv.LogBuffer{}, base: at(base)}
	var err error
	if w.codec, err = schemas.NewCodec(); err != nil {
		t.Fatal(err)
	}
	w.nango = fakes.NewNango(t, "nango-secret", map[string]string{"linear": "linear"}, nil)
	w.linear = newFakeLinear(t, linearToken)
	vars := map[string]string{"NANGO_URL": w.nango.URL, "NANGO_SECRET_KEY": "nango-secret", "LINEAR_API_URL": w.linear.URL}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(cfg.EncryptionKeys)
	if err != nil {
		t.Fatal(err)
	}
	if w.svc, err = integrations.New(integrations.Options{Cfg: cfg, Pool: w.pool, Redis: w.rdb, Box: box}); err != nil {
		t.Fatal(err)
	}
	w.org = runstest.Org(t, w.pool)
	// The poller scans every group: take this test's away afterwards.
	t.Cleanup(func() {
		if _, err := w.pool.Exec(context.Background(), `DELETE FROM organizations WHERE id = $1`, w.org); err != nil {
			t.Error(err)
		}
	})
	w.auto = runstest.Automation(t, w.pool, w.org)
	conn := "conn-" + uuid.NewString()
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: conn, ConfigKey: "linear", AccessToken: linearToken})
	if err := w.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key)
		VALUES ($1, 'nango', 'linear', $2, 'linear') RETURNING id::text`, w.org, conn).Scan(&w.integ); err != nil {
		t.Fatal(err)
	}
	return w
}

func at(s string) time.Time {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return v
}

// trigger creates a Linear polling trigger, attaches it to its poll group
// (created at the world's base time) and returns the trigger and group ids.
func (w *world) trigger(t *testing.T, cfg map[string]any) (string, string) {
	t.Helper()
	ctx := context.Background()
	id := runstest.NewTrigger(t, w.pool, runstest.Trigger{OrgID: w.org, AutomationID: w.auto, Type: "polling", Provider: "linear",
		IntegrationID: w.integ, Config: cfg})
	var group string
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if err := pollgroups.Attach(ctx, tx, id); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE trigger_poll_groups g SET created_at = $2, next_poll_at = $2
			FROM triggers t WHERE t.id = $1 AND g.id = t.poll_group_id AND g.last_polled_at IS NULL AND g.cursor IS NULL
			RETURNING g.id::text`, id, w.base).Scan(&group)
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, group
}

func (w *world) poller(opts ...func(*poller.Deps)) *poller.Poller {
	d := poller.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Tokens: w.svc, LinearAPIURL: w.linear.URL,
		Log: slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Tick: 5 * time.Millisecond}
	for _, o := range opts {
		o(&d)
	}
	return poller.New(d)
}

func pageSize(n int) func(*poller.Deps) {
	return func(d *poller.Deps) {
		d.Sources = map[string]poller.Source{"linear": &poller.Linear{URL: d.LinearAPIURL, PageSize: n}}
	}
}

func (w *world) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w *world) runs(t *testing.T, trig string) int {
	t.Helper()
	return w.count(t, `SELECT count(*) FROM automation_runs WHERE trigger_id = $1`, trig)
}

type groupRow struct {
	cursor       map[string]any
	nextPollAt   time.Time
	lastPolledAt *time.Time
	failures     int
	lastError    *string
}

func (w *world) group(t *testing.T, id string) groupRow {
	t.Helper()
	var g groupRow
	var cursor []byte
	if err := w.pool.QueryRow(context.Background(), `SELECT cursor, next_poll_at, last_polled_at, consecutive_failures, last_error
		FROM trigger_poll_groups WHERE id = $1`, id).Scan(&cursor, &g.nextPollAt, &g.lastPolledAt, &g.failures, &g.lastError); err != nil {
		t.Fatal(err)
	}
	if cursor != nil {
		if err := json.Unmarshal(cursor, &g.cursor); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func runOnce(t *testing.T, p *poller.Poller, now time.Time) poller.Result {
	t.Helper()
	res, err := p.RunOnce(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// A poll walks every page of changed issues, fans the events out to both
// triggers of the group (each with its own filters), and moves the cursor;
// the next poll sees only what changed since.
func TestPollPaginatesAndFansOut(t *testing.T) {
	w := newWorld(t, "2030-01-01T00:00:00Z")
	all, g := w.trigger(t, nil)
	eng, g2 := w.trigger(t, map[string]any{"team_id": "ENG"})
	if g != g2 {
		t.Fatal("two triggers of one integration are in different groups")
	}
	b := w.base
	w.linear.put(issueSpec{id: "issue-1", title: "Old", team: "ENG", created: b.Add(-2 * time.Hour), updated: b.Add(-time.Hour)})
	w.linear.put(issueSpec{id: "issue-2", title: "Edited", team: "OPS", created: b.Add(-time.Hour), updated: b.Add(time.Minute)})
	w.linear.put(issueSpec{id: "issue-3", title: "New", team: "ENG", created: b.Add(2 * time.Minute), updated: b.Add(2 * time.Minute)})
	w.linear.put(issueSpec{id: "issue-4", title: "Newer", team: "OPS", created: b.Add(3 * time.Minute), updated: b.Add(5 * time.Minute)})
	w.linear.put(issueSpec{id: "issue-5", title: "Moved", team: "ENG", created: b.Add(-24 * time.Hour), updated: b.Add(4 * time.Minute)})

	p := w.poller(pageSize(2))
	now := b.Add(10 * time.Minute)
	res := runOnce(t, p, now)
	if res.Polled != 1 || res.Pages != 2 || res.Events != 4 || res.Queued != 6 || res.Skipped != 2 {
		t.Fatalf("result %+v", res)
	}
	calls := w.linear.Calls()
	if len(calls) != 2 || calls[0].After != "" || calls[1].After != b64("issue-5") || calls[0].First != 2 ||
		calls[0].UpdatedAfter != "2030-01-01T00:00:00Z" || calls[1].UpdatedAfter != calls[0].UpdatedAfter {
		t.Fatalf("calls %+v", calls)
	}
	if n := w.runs(t, all); n != 4 {
		t.Fatalf("unfiltered trigger: %d runs; want 4", n)
	}
	if n := w.runs(t, eng); n != 2 {
		t.Fatalf("ENG trigger: %d runs; want 2", n)
	}
	if n := w.count(t, `SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND status = 'skipped' AND skip_reason = 'filter_mismatch'`, eng); n != 2 {
		t.Fatalf("ENG trigger: %d filter_mismatch events; want 2", n)
	}
	// Created since the watermark: create; otherwise update (keyed by updatedAt).
	keys := map[string]string{}
	rows, _ := w.pool.Query(context.Background(), `SELECT external_event_id, dedup_key || ' ' || normalized_event_type FROM trigger_events WHERE trigger_id = $1`, all)
	for rows.Next() {
		var id, k string
		_ = rows.Scan(&id, &k)
		keys[id] = k
	}
	rows.Close()
	if keys["issue-3"] != "linear:issue-3:create issue_created" || keys["issue-4"] != "linear:issue-4:create issue_created" ||
		keys["issue-2"] != "linear:issue-2:update:2030-01-01T00:01:00.000Z issue_updated" || keys["issue-1"] != "" {
		t.Fatalf("keys %v", keys)
	}
	// Polled runs are attributed to the poll group and the integration.
	if n := w.count(t, `SELECT count(*) FROM outbox WHERE topic = 'triggers.events' AND key = $1`, all); n != 4 {
		t.Fatalf("%d triggers.events rows", n)
	}
	gr := w.group(t, g)
	if gr.cursor["updated_after"] != "2030-01-01T00:05:00Z" || gr.cursor["page_after"] != nil ||
		len(gr.cursor["seen_ids"].([]any)) != 1 || gr.cursor["seen_ids"].([]any)[0] != "issue-4" ||
		!gr.nextPollAt.Equal(now.Add(time.Minute)) || !gr.lastPolledAt.Equal(now) || gr.failures != 0 {
		t.Fatalf("group after poll: %+v", gr)
	}

	// Not due again before the interval.
	if res := runOnce(t, p, now.Add(59*time.Second)); res.Polled != 0 || len(w.linear.Calls()) != 2 {
		t.Fatalf("polled before the interval: %+v", res)
	}
	// issue-2 is edited again; issue-4 (at the watermark) comes back and is
	// passed over.
	w.linear.put(issueSpec{id: "issue-2", title: "Edited twice", team: "ENG", created: b.Add(-time.Hour), updated: b.Add(8 * time.Minute)})
	res = runOnce(t, p, now.Add(time.Minute))
	if res.Events != 1 || res.Queued != 2 || res.Skipped != 0 {
		t.Fatalf("second poll %+v", res)
	}
	if calls := w.linear.Calls(); len(calls) != 3 || calls[2].UpdatedAfter != "2030-01-01T00:05:00Z" {
		t.Fatalf("calls %+v", calls)
	}
	if w.runs(t, all) != 5 || w.runs(t, eng) != 3 {
		t.Fatalf("runs after second poll: %d, %d", w.runs(t, all), w.runs(t, eng))
	}
	if gr := w.group(t, g); gr.cursor["updated_after"] != "2030-01-01T00:08:00Z" {
		t.Fatalf("cursor %v", gr.cursor)
	}
}

// HTTP 429 with Retry-After puts the next poll off by that long and is
// recorded on the group; the retry succeeds and clears the failure.
func TestRateLimitBacksOffThenSucceeds(t *testing.T) {
	w := newWorld(t, "2030-02-01T00:00:00Z")
	trig, g := w.trigger(t, nil)
	b := w.base
	w.linear.put(issueSpec{id: "issue-1", title: "New", team: "ENG", created: b.Add(time.Minute), updated: b.Add(time.Minute)})
	w.linear.rateLimit(limitReply{status: 429, retryAfter: "7"})
	p := w.poller()
	now := b.Add(2 * time.Minute)
	if res := runOnce(t, p, now); res.Failed != 1 || res.Queued != 0 {
		t.Fatalf("rate-limited poll %+v", res)
	}
	gr := w.group(t, g)
	if gr.failures != 1 || gr.lastError == nil || !strings.Contains(*gr.lastError, "rate limited (HTTP 429); retry after 7s") ||
		!gr.nextPollAt.Equal(now.Add(7*time.Second)) || gr.cursor != nil {
		t.Fatalf("group after 429: %+v", gr)
	}
	if res := runOnce(t, p, now.Add(6*time.Second)); res.Polled != 0 || len(w.linear.Calls()) != 1 {
		t.Fatalf("polled during the back-off: %+v", res)
	}
	if res := runOnce(t, p, now.Add(7*time.Second)); res.Queued != 1 {
		t.Fatalf("retry %+v", res)
	}
	gr = w.group(t, g)
	if gr.failures != 0 || gr.lastError != nil || w.runs(t, trig) != 1 {
		t.Fatalf("group after retry: %+v, %d runs", gr, w.runs(t, trig))
	}
	// Linear's GraphQL RATELIMITED error without Retry-After: exponential
	// back-off from the interval.
	w.linear.rateLimit(limitReply{status: 400}, limitReply{status: 400})
	now = gr.nextPollAt
	runOnce(t, p, now)
	if gr = w.group(t, g); gr.failures != 1 || !gr.nextPollAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("first failure: %+v", gr)
	}
	now = gr.nextPollAt
	runOnce(t, p, now)
	if gr = w.group(t, g); gr.failures != 2 || !gr.nextPollAt.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("second failure: %+v", gr)
	}
	if !strings.Contains(w.logs.String(), "poll failed; backing off") || strings.Contains(w.logs.String(), linearToken) {
		t.Fatal("failures are logged, tokens never")
	}
}

// A rate limit in the middle of a multi-page poll keeps the pages already
// recorded; the retry continues from the next page, and every issue makes
// one run.
func TestRateLimitMidTraversalResumes(t *testing.T) {
	w := newWorld(t, "2030-03-01T00:00:00Z")
	trig, g := w.trigger(t, nil)
	b := w.base
	for i, id := range []string{"issue-1", "issue-2", "issue-3"} {
		w.linear.put(issueSpec{id: id, title: id, team: "ENG", created: b.Add(time.Duration(i+1) * time.Minute), updated: b.Add(time.Duration(i+1) * time.Minute)})
	}
	p := w.poller(pageSize(1))
	now := b.Add(10 * time.Minute)
	w.linear.rateLimitAt(2, limitReply{status: 429, retryAfter: "30"})
	if res := runOnce(t, p, now); res.Failed != 1 || res.Pages != 1 || res.Queued != 1 {
		t.Fatalf("interrupted poll %+v", res)
	}
	gr := w.group(t, g)
	if gr.cursor["page_after"] != b64("issue-3") || gr.cursor["max_seen"] != "2030-03-01T00:03:00Z" ||
		gr.cursor["updated_after"] != "2030-03-01T00:00:00Z" || gr.failures != 1 || !gr.nextPollAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("group after the interruption: %+v", gr)
	}
	if res := runOnce(t, p, now.Add(30*time.Second)); res.Failed != 0 || res.Pages != 2 || res.Queued != 2 {
		t.Fatalf("resumed poll %+v", res)
	}
	calls := w.linear.Calls()
	if len(calls) != 4 || calls[2].After != b64("issue-3") || calls[3].After != b64("issue-2") {
		t.Fatalf("calls %+v", calls)
	}
	if n := w.runs(t, trig); n != 3 {
		t.Fatalf("%d runs; want 3", n)
	}
	if gr := w.group(t, g); gr.cursor["updated_after"] != "2030-03-01T00:03:00Z" || gr.cursor["page_after"] != nil || gr.failures != 0 {
		t.Fatalf("group after resuming: %+v", gr)
	}
}

// More pages than one poll may fetch: the traversal continues at the next
// tick instead of waiting an interval.
func TestLongTraversalContinuesNextTick(t *testing.T) {
	w := newWorld(t, "2030-03-15T00:00:00Z")
	trig, g := w.trigger(t, nil)
	b := w.base
	for i := range 5 {
		id := "issue-" + string(rune('a'+i))
		w.linear.put(issueSpec{id: id, title: id, team: "ENG", created: b.Add(time.Duration(i+1) * time.Minute), updated: b.Add(time.Duration(i+1) * time.Minute)})
	}
	p := w.poller(pageSize(1), func(d *poller.Deps) { d.MaxPages = 3 })
	now := b.Add(10 * time.Minute)
	if res := runOnce(t, p, now); res.Pages != 3 || res.Queued != 3 {
		t.Fatalf("first poll %+v", res)
	}
	if gr := w.group(t, g); !gr.nextPollAt.Equal(now) || gr.cursor["page_after"] == nil {
		t.Fatalf("group %+v", gr)
	}
	if res := runOnce(t, p, now.Add(time.Second)); res.Pages != 2 || res.Queued != 2 {
		t.Fatalf("second poll %+v", res)
	}
	if gr := w.group(t, g); !gr.nextPollAt.Equal(now.Add(time.Second+time.Minute)) || gr.cursor["updated_after"] != "2030-03-15T00:05:00Z" {
		t.Fatalf("group %+v", gr)
	}
	if n := w.runs(t, trig); n != 5 {
		t.Fatalf("%d runs", n)
	}
}

// Several replicas running at the same instants poll each group once per
// interval (counted at the fake Linear API) and never queue a run twice.
func TestReplicasPollOncePerInterval(t *testing.T) {
	w := newWorld(t, "2030-04-01T00:00:00Z")
	trig, _ := w.trigger(t, nil)
	b := w.base
	replicas := []*poller.Poller{w.poller(), w.poller(), w.poller()}
	for k := 0; k <= 6; k++ {
		now := b.Add(time.Duration(k) * 30 * time.Second)
		id := "issue-" + string(rune('a'+k))
		w.linear.put(issueSpec{id: id, title: id, team: "ENG", created: now, updated: now})
		var wg sync.WaitGroup
		for _, p := range replicas {
			for range 2 {
				wg.Go(func() {
					if _, err := p.RunOnce(context.Background(), now); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		if want := k/2 + 1; len(w.linear.Calls()) != want {
			t.Fatalf("after %s: %d polls; want %d", now.Sub(b), len(w.linear.Calls()), want)
		}
	}
	// Polls at 0, 60, 120 and 180 s saw every issue updated up to them.
	if n := w.runs(t, trig); n != 7 {
		t.Fatalf("%d runs; want 7", n)
	}
	if n := w.count(t, `SELECT count(DISTINCT dedup_key) FROM trigger_events WHERE trigger_id = $1`, trig); n != 7 {
		t.Fatalf("%d distinct events", n)
	}
}

// While another replica holds the lock the group is not polled, and its
// lock is left alone.
func TestLockHeldElsewhere(t *testing.T) {
	w := newWorld(t, "2030-05-01T00:00:00Z")
	_, g := w.trigger(t, nil)
	ctx := context.Background()
	if err := w.rdb.Set(ctx, "poll:"+g, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	p := w.poller()
	if res := runOnce(t, p, w.base.Add(time.Minute)); res.Busy != 1 || res.Polled != 0 || len(w.linear.Calls()) != 0 {
		t.Fatalf("polled under another replica's lock: %+v", res)
	}
	if v, _ := w.rdb.Get(ctx, "poll:"+g).Result(); v != "someone-else" {
		t.Fatalf("lock now %q", v)
	}
	w.rdb.Del(ctx, "poll:"+g)
	if res := runOnce(t, p, w.base.Add(time.Minute)); res.Polled != 1 {
		t.Fatalf("not polled once free: %+v", res)
	}
	if n, _ := w.rdb.Exists(ctx, "poll:"+g).Result(); n != 0 {
		t.Fatal("lock not released after the poll")
	}
}

// A disabled automation records skipped events; a group whose triggers are
// all disabled is not polled and drops its cursor.
func TestDisabledAutomationAndTriggers(t *testing.T) {
	w := newWorld(t, "2030-06-01T00:00:00Z")
	ctx := context.Background()
	trig, g := w.trigger(t, nil)
	b := w.base
	w.linear.put(issueSpec{id: "issue-1", title: "one", team: "ENG", created: b.Add(time.Minute), updated: b.Add(time.Minute)})
	if _, err := w.pool.Exec(ctx, `UPDATE automations SET enabled = false WHERE id = $1`, w.auto); err != nil {
		t.Fatal(err)
	}
	p := w.poller()
	if res := runOnce(t, p, b.Add(2*time.Minute)); res.Skipped != 1 || res.Queued != 0 {
		t.Fatalf("result %+v", res)
	}
	if n := w.count(t, `SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND skip_reason = 'automation_disabled'`, trig); n != 1 {
		t.Fatalf("%d automation_disabled events", n)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE triggers SET enabled = false WHERE id = $1`, trig); err != nil {
		t.Fatal(err)
	}
	now := b.Add(4 * time.Minute)
	if res := runOnce(t, p, now); res.Disabled != 1 || res.Polled != 0 || len(w.linear.Calls()) != 1 {
		t.Fatalf("group of disabled triggers: %+v, %d calls", res, len(w.linear.Calls()))
	}
	if gr := w.group(t, g); gr.cursor != nil || !gr.lastPolledAt.Equal(now) || !gr.nextPollAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("group %+v", gr)
	}
}

// A token that cannot be resolved is a failure on the group; Linear is not
// called.
func TestTokenFailureIsRecorded(t *testing.T) {
	w := newWorld(t, "2030-07-01T00:00:00Z")
	_, g := w.trigger(t, nil)
	w.nango.Fail(503)
	p := w.poller()
	now := w.base.Add(time.Minute)
	if res := runOnce(t, p, now); res.Failed != 1 || len(w.linear.Calls()) != 0 {
		t.Fatalf("result %+v", res)
	}
	gr := w.group(t, g)
	if gr.failures != 1 || gr.lastError == nil || !strings.Contains(*gr.lastError, "integration token") || !gr.nextPollAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("group %+v", gr)
	}
	w.nango.Fail(0)
	if res := runOnce(t, p, now.Add(time.Minute)); res.Failed != 0 || res.Polled != 1 {
		t.Fatalf("after recovery %+v", res)
	}
}

// The Run loop polls with real short ticks and stops with its context.
func TestRunLoop(t *testing.T) {
	w := newWorld(t, "2030-08-01T00:00:00Z")
	trig, _ := w.trigger(t, nil)
	b := w.base
	w.linear.put(issueSpec{id: "issue-1", title: "one", team: "ENG", created: b.Add(time.Minute), updated: b.Add(time.Minute)})
	p := w.poller(func(d *poller.Deps) { d.Now = func() time.Time { return b.Add(2 * time.Minute) } })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "a polled run", func() bool { return w.runs(t, trig) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(w.linear.Calls()); n != 1 {
		t.Fatalf("%d polls at one instant; want 1", n)
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		interval time.Duration
		n        int
		retry    time.Duration
		want     time.Duration
	}{
		{time.Minute, 1, 0, time.Minute},
		{time.Minute, 2, 0, 2 * time.Minute},
		{time.Minute, 4, 0, 8 * time.Minute},
		{time.Minute, 20, 0, time.Hour},
		{2 * time.Hour, 3, 0, 2 * time.Hour},
		{time.Minute, 5, 7 * time.Second, 7 * time.Second},
		{time.Minute, 1, time.Millisecond, time.Second},
		{time.Minute, 1, 48 * time.Hour, time.Hour},
	}
	for _, c := range cases {
		if got := poller.Backoff(c.interval, c.n, c.retry); got != c.want {
			t.Fatalf("Backoff(%s, %d, %s) = %s; want %s", c.interval, c.n, c.retry, got, c.want)
		}
	}
}
