package sessions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/schemas/schemastest"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var codec = schemastest.Codec()

func newStore(t *testing.T) (*sessions.Store, *pgxpool.Pool, string) {
	t.Helper()
	pool := testenv.Postgres(t)
	return &sessions.Store{Pool: pool, Codec: codec}, pool, runstest.Org(t, pool)
}

func ptr[T any](v T) *T { return &v }

// sessionEvents decodes the session's events in the outbox, in order.
func sessionEvents(t *testing.T, pool *pgxpool.Pool, id string) []*schemas.SessionEvent {
	t.Helper()
	var out []*schemas.SessionEvent
	for _, e := range outboxEvents(t, pool, topics.SessionsEvents, id) {
		out = append(out, e.Payload.(*schemas.SessionEvent))
	}
	return out
}

func toolEvents(t *testing.T, pool *pgxpool.Pool, id string) []*schemas.ToolCall {
	t.Helper()
	var out []*schemas.ToolCall
	for _, e := range outboxEvents(t, pool, topics.ToolsCalls, id) {
		out = append(out, e.Payload.(*schemas.ToolCall))
	}
	return out
}

func outboxEvents(t *testing.T, pool *pgxpool.Pool, topic, key string) []*schemas.Event {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topic, key)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	var out []*schemas.Event
	for _, v := range vals {
		e, err := codec.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func kinds(evs []*schemas.SessionEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func configuration(t *testing.T, pool *pgxpool.Pool, org string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO configurations (org_id, name) VALUES ($1, 'cfg') RETURNING id::text`,
		org).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCreateWritesRowAndCreatedEvent(t *testing.T) {
	s, pool, org := newStore(t)
	cfg := configuration(t, pool, org)
	sess, created, err := s.Create(context.Background(), sessions.CreateInput{OrgID: org, ConfigurationID: &cfg,
		SessionType: sessions.TypeSetup, Title: "Set up", InitialPrompt: ptr("hi"), ClientMetadata: map[string]any{"ua": "x"}})
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if sess.Status != sessions.StatusStarting || sess.SessionType != "setup" || sess.ClientType != "web" ||
		sess.SandboxMode != "deferred" || sess.ModelID != sessions.DefaultModelID || *sess.ConfigurationID != cfg {
		t.Fatalf("unexpected session %+v", sess)
	}
	got, err := s.Get(context.Background(), org, sess.ID)
	if err != nil || got.ID != sess.ID || got.Title != "Set up" || *got.InitialPrompt != "hi" {
		t.Fatalf("get: %+v %v", got, err)
	}
	evs := sessionEvents(t, pool, sess.ID)
	if len(evs) != 1 || evs[0].Kind != schemas.SessionKindCreated || *evs[0].Status != "starting" ||
		*evs[0].ConfigurationID != cfg || *evs[0].SessionType != "setup" {
		t.Fatalf("events: %+v", evs)
	}
}

func TestCreateValidation(t *testing.T) {
	s, pool, org := newStore(t)
	other := runstest.Org(t, pool)
	foreignCfg := configuration(t, pool, other)
	ctx := context.Background()
	cases := map[string]struct {
		in   sessions.CreateInput
		want error
	}{
		"setup without configuration":  {sessions.CreateInput{OrgID: org, SessionType: "setup"}, sessions.ErrInvalid},
		"configuration of another org": {sessions.CreateInput{OrgID: org, ConfigurationID: &foreignCfg}, sessions.ErrConfigurationNotFound},
		"malformed configuration":      {sessions.CreateInput{OrgID: org, ConfigurationID: ptr("nope")}, sessions.ErrConfigurationNotFound},
		"unknown type":                 {sessions.CreateInput{OrgID: org, SessionType: "terminal"}, sessions.ErrInvalid},
		"unknown client":               {sessions.CreateInput{OrgID: org, ClientType: "fax"}, sessions.ErrInvalid},
		"unknown mode":                 {sessions.CreateInput{OrgID: org, SandboxMode: "eager"}, sessions.ErrInvalid},
		"long title":                   {sessions.CreateInput{OrgID: org, Title: string(make([]rune, 301))}, sessions.ErrInvalid},
		"automation of another org": {sessions.CreateInput{OrgID: org,
			AutomationID: ptr(runstest.Automation(t, pool, other))}, sessions.ErrInvalid},
	}
	for name, c := range cases {
		if _, _, err := s.Create(ctx, c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	if n := scalar(t, pool, `SELECT count(*) FROM sessions WHERE org_id = $1`, org); n != 0 {
		t.Fatalf("%d sessions written", n)
	}
}

func TestCreateIsIdempotentUnderConcurrency(t *testing.T) {
	s, pool, org := newStore(t)
	const n = 20
	var wg sync.WaitGroup
	ids := make([]string, n)
	var createdCount atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, created, err := s.Create(context.Background(), sessions.CreateInput{OrgID: org, IdempotencyKey: ptr("run:1:session")})
			if err != nil {
				t.Error(err)
				return
			}
			if created {
				createdCount.Add(1)
			}
			ids[i] = sess.ID
		}()
	}
	wg.Wait()
	if createdCount.Load() != 1 {
		t.Fatalf("%d creations reported", createdCount.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different ids: %v", ids)
		}
	}
	if c := scalar(t, pool, `SELECT count(*) FROM sessions WHERE org_id = $1`, org); c != 1 {
		t.Fatalf("%d rows", c)
	}
	if evs := sessionEvents(t, pool, ids[0]); len(evs) != 1 {
		t.Fatalf("%d created events", len(evs))
	}
	// The key is per organization.
	other := runstest.Org(t, pool)
	sess, created, err := s.Create(context.Background(), sessions.CreateInput{OrgID: other, IdempotencyKey: ptr("run:1:session")})
	if err != nil || !created || sess.ID == ids[0] {
		t.Fatalf("other org: %v %v", created, err)
	}
}

func TestConcurrentLimitIsExactUnderRace(t *testing.T) {
	s, pool, org := newStore(t)
	s.MaxConcurrent = 3
	// A paused and a stopped session do not count.
	sessionstest.New(t, pool, org, sessionstest.Options{Status: "paused"})
	sessionstest.New(t, pool, org, sessionstest.Options{Status: "stopped"})
	const n = 20
	var wg sync.WaitGroup
	var ok, limited atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := s.Create(context.Background(), sessions.CreateInput{OrgID: org})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, sessions.ErrLimit):
				limited.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 3 || limited.Load() != n-3 {
		t.Fatalf("created %d, limited %d", ok.Load(), limited.Load())
	}
	if c := scalar(t, pool, `SELECT count(*) FROM sessions WHERE org_id = $1 AND status IN ('starting', 'running')`, org); c != 3 {
		t.Fatalf("%d live sessions", c)
	}
	// Another org is not affected; ending a session frees a slot.
	if _, _, err := s.Create(context.Background(), sessions.CreateInput{OrgID: runstest.Org(t, pool)}); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(context.Background(), org, sessions.ListFilter{Status: "starting"}, sessions.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkStopped(context.Background(), list[0].ID, "user", "completed", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(context.Background(), sessions.CreateInput{OrgID: org}); err != nil {
		t.Fatalf("after a stop: %v", err)
	}
}

func TestLifecycleTransitionsAndEvents(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	sess, _, err := s.Create(ctx, sessions.CreateInput{OrgID: org})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID
	r, err := s.MarkRunning(ctx, id, sessions.Runtime{Provider: "local", SandboxID: "sb1", SandboxURL: "http://x", AgentSessionID: "oc1"})
	if err != nil || r.Status != "running" || *r.SandboxID != "sb1" || *r.CodingAgentSessionID != "oc1" {
		t.Fatalf("running: %+v %v", r, err)
	}
	// Same sandbox again: no event. Another sandbox: migrated.
	if _, err := s.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb1", SandboxURL: "http://x"}); err != nil {
		t.Fatal(err)
	}
	r, err = s.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb2", SandboxURL: "http://y"})
	if err != nil || *r.SandboxID != "sb2" || *r.CodingAgentSessionID != "oc1" {
		t.Fatalf("migrate: %+v %v", r, err)
	}
	p, err := s.MarkPaused(ctx, id, "inactivity", "snap1")
	if err != nil || p.Status != "paused" || *p.PauseReason != "inactivity" || *p.SnapshotID != "snap1" ||
		p.SandboxID != nil || p.PausedAt == nil {
		t.Fatalf("paused: %+v %v", p, err)
	}
	if _, err := s.MarkPaused(ctx, id, "", ""); err != nil { // no-op
		t.Fatal(err)
	}
	r, err = s.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb3"})
	if err != nil || r.PauseReason != nil || r.PausedAt != nil || *r.SnapshotID != "snap1" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	st, err := s.MarkStopped(ctx, id, "automation_complete", "succeeded", "done")
	if err != nil || st.Status != "stopped" || *st.Outcome != "succeeded" || *st.Summary != "done" || st.EndedAt == nil {
		t.Fatalf("stopped: %+v %v", st, err)
	}
	if _, err := s.MarkStopped(ctx, id, "again", "failed", ""); err != nil { // no-op, keeps the outcome
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"running": func() error { _, err := s.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "x"}); return err },
		"paused":  func() error { _, err := s.MarkPaused(ctx, id, "", ""); return err },
		"failed":  func() error { _, err := s.MarkFailed(ctx, id, "x"); return err },
	} {
		if err := f(); !errors.Is(err, sessions.ErrInvalidTransition) {
			t.Errorf("stopped → %s: %v", name, err)
		}
	}
	got, _ := s.Get(ctx, "", id)
	if *got.Outcome != "succeeded" {
		t.Fatalf("outcome overwritten: %v", *got.Outcome)
	}
	want := []string{"created", "running", "migrated", "paused", "running", "stopped"}
	evs := sessionEvents(t, pool, id)
	if !slices.Equal(kinds(evs), want) {
		t.Fatalf("events %v, want %v", kinds(evs), want)
	}
	if *evs[3].PauseReason != "inactivity" || *evs[3].SnapshotID != "snap1" || *evs[5].Outcome != "succeeded" || *evs[2].SandboxID != "sb2" {
		t.Fatalf("event fields: %+v %+v", evs[3], evs[5])
	}
	if _, err := s.MarkRunning(ctx, "00000000-0000-0000-0000-000000000000", sessions.Runtime{}); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := s.MarkFailed(ctx, "not-a-uuid", ""); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("malformed: %v", err)
	}
}

func TestConcurrentTerminalTransitionsEmitOnce(t *testing.T) {
	s, pool, org := newStore(t)
	id := sessionstest.New(t, pool, org, sessionstest.Options{Status: "running", SandboxID: "sb"})
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = s.MarkStopped(context.Background(), id, "x", "completed", "")
			} else {
				_, err = s.MarkFailed(context.Background(), id, "boom")
			}
			if err != nil && !errors.Is(err, sessions.ErrInvalidTransition) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if evs := sessionEvents(t, pool, id); len(evs) != 1 {
		t.Fatalf("%d terminal events: %v", len(evs), kinds(evs))
	}
}

func TestInitialPromptIsClaimedOnce(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	id := sessionstest.New(t, pool, org, sessionstest.Options{InitialPrompt: "fix the bug"})
	var wg sync.WaitGroup
	var claimed atomic.Int32
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, ok, err := s.ClaimInitialPrompt(ctx, id)
			if err != nil {
				t.Error(err)
			}
			if ok {
				claimed.Add(1)
				if p != "fix the bug" {
					t.Errorf("prompt %q", p)
				}
			}
		}()
	}
	wg.Wait()
	if claimed.Load() != 1 {
		t.Fatalf("claimed %d times", claimed.Load())
	}
	if err := s.ReleaseInitialPrompt(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.ClaimInitialPrompt(ctx, id); !ok {
		t.Fatal("not claimable after release")
	}
	empty := sessionstest.New(t, pool, org, sessionstest.Options{})
	if _, ok, err := s.ClaimInitialPrompt(ctx, empty); ok || err != nil {
		t.Fatalf("no prompt: %v %v", ok, err)
	}
	if _, _, err := s.ClaimInitialPrompt(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestFlushTelemetryIsAtomicAndDeduplicatesPRs(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	id := sessionstest.New(t, pool, org, sessionstest.Options{Status: "running"})
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := sessions.Telemetry{ToolCalls: 1, Messages: 2, ActiveSeconds: 3,
				PRURLs: []string{"https://github.com/a/b/pull/1", fmt.Sprintf("https://github.com/a/b/pull/%d", 10+i%3)}}
			if err := s.FlushTelemetry(ctx, id, d); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := s.FlushTelemetry(ctx, id, sessions.Telemetry{LatestTask: ptr("Running tests")}); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushTelemetry(ctx, id, sessions.Telemetry{}); err != nil { // zero delta: nothing
		t.Fatal(err)
	}
	got, err := s.Get(ctx, org, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.ToolCalls != n || got.MessagesExchanged != 2*n || got.ActiveSeconds != 3*n || *got.LatestTask != "Running tests" {
		t.Fatalf("counters %+v", got)
	}
	urls := slices.Clone(got.PRURLs)
	sort.Strings(urls)
	want := []string{"https://github.com/a/b/pull/1", "https://github.com/a/b/pull/10", "https://github.com/a/b/pull/11", "https://github.com/a/b/pull/12"}
	if !slices.Equal(urls, want) {
		t.Fatalf("pr_urls %v", got.PRURLs)
	}
	evs := sessionEvents(t, pool, id)
	if len(evs) != n+1 {
		t.Fatalf("%d telemetry events", len(evs))
	}
	var fresh []string
	var tools int64
	for _, e := range evs {
		if e.Kind != schemas.SessionKindTelemetry || e.Status != nil || e.Telemetry == nil {
			t.Fatalf("event %+v", e)
		}
		fresh = append(fresh, e.Telemetry.PRURLs...)
		tools += e.Telemetry.ToolCalls
	}
	sort.Strings(fresh)
	if !slices.Equal(fresh, want) || tools != n {
		t.Fatalf("event deltas: urls %v tools %d", fresh, tools)
	}
	if err := s.FlushTelemetry(ctx, "00000000-0000-0000-0000-000000000000", sessions.Telemetry{ToolCalls: 1}); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestTouchMarksSessionAndRun(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	auto := runstest.Automation(t, pool, org)
	trig := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto})
	var runID string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, codec, runs.Source{OrgID: org, TriggerID: trig, AutomationID: auto, TriggerType: "webhook",
			WebhookEventID: "wh"}, runs.Event{Provider: "github", EventType: "issue_opened", OccurredAt: time.Now(), DedupKey: "k",
			Title: "t", Context: map[string]any{}})
		runID = out.RunID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	id := sessionstest.New(t, pool, org, sessionstest.Options{RunID: runID, LastActivityAt: past})
	if _, err := pool.Exec(ctx, `UPDATE automation_runs SET session_id = $1, last_activity_at = $2 WHERE id = $3`, id, past, runID); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM sessions WHERE id = $1 AND last_activity_at > now() - interval '1 minute'`, id); n != 1 {
		t.Fatal("session not touched")
	}
	if n := scalar(t, pool, `SELECT count(*) FROM automation_runs WHERE id = $1 AND last_activity_at > now() - interval '1 minute'`, runID); n != 1 {
		t.Fatal("run not touched")
	}
	if err := s.Touch(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if err := s.RecordUserMessage(ctx, id, ptr("00000000-0000-0000-0000-0000000000aa")); err != nil {
		t.Fatal(err)
	}
	evs := sessionEvents(t, pool, id)
	if len(evs) != 1 || evs[0].Kind != schemas.SessionKindUserMessage || *evs[0].UserID != "00000000-0000-0000-0000-0000000000aa" ||
		*evs[0].RunID != runID {
		t.Fatalf("user message event %+v", evs)
	}
	// A telemetry flush (the agent working) is activity too.
	if _, err := pool.Exec(ctx, `UPDATE automation_runs SET last_activity_at = $1 WHERE id = $2`, past, runID); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushTelemetry(ctx, id, sessions.Telemetry{ActiveSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	if n := scalar(t, pool, `SELECT count(*) FROM automation_runs WHERE id = $1 AND last_activity_at > now() - interval '1 minute'`, runID); n != 1 {
		t.Fatal("a telemetry flush did not mark the run active")
	}
}

func TestToolInvocationsAreIdempotent(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	id := sessionstest.New(t, pool, org, sessionstest.Options{Status: "running"})
	in := json.RawMessage(`{"message":"snap"}`)
	var wg sync.WaitGroup
	var fresh atomic.Int32
	invs := make([]sessions.Invocation, 10)
	for i := range invs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv, f, err := s.BeginTool(ctx, id, "call-1", "save_snapshot", in)
			if err != nil {
				t.Error(err)
				return
			}
			if f {
				fresh.Add(1)
			} else if inv.Status != sessions.ToolExecuting {
				t.Errorf("status %s", inv.Status)
			}
			invs[i] = inv
		}()
	}
	wg.Wait()
	if fresh.Load() != 1 {
		t.Fatalf("%d fresh begins", fresh.Load())
	}
	inv := invs[0]
	if err := s.FinishTool(ctx, inv, json.RawMessage(`{"snapshot_id":"s1"}`), "", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishTool(ctx, inv, json.RawMessage(`{"snapshot_id":"s2"}`), "", time.Second); err != nil { // no-op
		t.Fatal(err)
	}
	again, f, err := s.BeginTool(ctx, id, "call-1", "save_snapshot", in)
	if err != nil || f || again.Status != sessions.ToolCompleted || string(again.Output) != `{"snapshot_id": "s1"}` {
		t.Fatalf("replay: %+v %v %v (%s)", again, f, err, again.Output)
	}
	var input string
	if err := pool.QueryRow(ctx, `SELECT input::text FROM session_tool_invocations WHERE session_id = $1`, id).Scan(&input); err != nil || input != `{"message": "snap"}` {
		t.Fatalf("input %q %v", input, err)
	}
	// A failed call replays its error.
	f2, _, _ := s.BeginTool(ctx, id, "call-2", "automation.complete", nil)
	if err := s.FinishTool(ctx, f2, nil, "run not running", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r, fr, _ := s.BeginTool(ctx, id, "call-2", "automation.complete", nil); fr || r.Status != sessions.ToolFailed || *r.Error != "run not running" {
		t.Fatalf("failed replay %+v", r)
	}
	// An executing call whose executor died is taken over after ToolStaleAfter.
	s3, _, _ := s.BeginTool(ctx, id, "call-3", "save_snapshot", nil)
	if _, f, _ := s.BeginTool(ctx, id, "call-3", "save_snapshot", nil); f {
		t.Fatal("in-flight call taken over")
	}
	if _, err := pool.Exec(ctx, `UPDATE session_tool_invocations SET started_at = now() - interval '11 minutes' WHERE id = $1`, s3.ID); err != nil {
		t.Fatal(err)
	}
	if taken, f, _ := s.BeginTool(ctx, id, "call-3", "save_snapshot", nil); !f || taken.ID != s3.ID {
		t.Fatalf("stale call not taken over: %v", f)
	}
	var statuses []string
	var cached int
	for _, e := range toolEvents(t, pool, id) {
		statuses = append(statuses, e.ToolCallID+":"+e.Status)
		if e.Cached {
			cached++
		}
		if e.ExecutedBy != "gateway" {
			t.Fatalf("executed_by %q", e.ExecutedBy)
		}
	}
	want := []string{"call-1:started", "call-1:completed", "call-1:completed", "call-2:started", "call-2:failed", "call-2:failed",
		"call-3:started", "call-3:started"}
	if !slices.Equal(statuses, want) || cached != 2 {
		t.Fatalf("tool events %v (cached %d)", statuses, cached)
	}
	if _, _, err := s.BeginTool(ctx, "00000000-0000-0000-0000-000000000000", "c", "x", nil); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	if _, _, err := s.BeginTool(ctx, id, "c", "x", json.RawMessage(`{bad`)); !errors.Is(err, sessions.ErrInvalid) {
		t.Fatalf("bad input: %v", err)
	}
}

func TestListGetRenameDeleteAreOrgScoped(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	other := runstest.Org(t, pool)
	foreign := sessionstest.New(t, pool, other, sessionstest.Options{})
	var ids []string
	for i := range 5 {
		st := "running"
		if i%2 == 0 {
			st = "paused"
		}
		ids = append(ids, sessionstest.New(t, pool, org, sessionstest.Options{Status: st, SessionType: "coding"}))
	}
	if _, err := s.Get(ctx, org, foreign); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("foreign get: %v", err)
	}
	if _, err := s.Rename(ctx, org, foreign, "x"); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("foreign rename: %v", err)
	}
	if err := s.Delete(ctx, org, foreign); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("foreign delete: %v", err)
	}
	// Pages of 2, newest first, all five, never the foreign one.
	var seen []string
	p := sessions.Page{Limit: 2}
	for {
		rows, err := s.List(ctx, org, sessions.ListFilter{}, p)
		if err != nil {
			t.Fatal(err)
		}
		more := len(rows) > 2
		if more {
			rows = rows[:2]
		}
		for _, r := range rows {
			seen = append(seen, r.ID)
		}
		if !more {
			break
		}
		last := rows[len(rows)-1]
		p = sessions.Page{Limit: 2, At: last.CreatedAt, ID: last.ID}
	}
	if len(seen) != 5 || slices.Contains(seen, foreign) {
		t.Fatalf("listed %v", seen)
	}
	paused, _ := s.List(ctx, org, sessions.ListFilter{Status: "paused"}, sessions.Page{Limit: 10})
	if len(paused) != 3 {
		t.Fatalf("%d paused", len(paused))
	}
	r, err := s.Rename(ctx, org, ids[0], "New name")
	if err != nil || r.Title != "New name" {
		t.Fatalf("rename %v", err)
	}
	if _, _, err := s.BeginTool(ctx, ids[0], "c1", "save_snapshot", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, org, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "", ids[0]); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatal("still there")
	}
	if n := scalar(t, pool, `SELECT count(*) FROM session_tool_invocations WHERE session_id = $1`, ids[0]); n != 0 {
		t.Fatal("invocations survive")
	}
	if evs := sessionEvents(t, pool, ids[0]); len(evs) != 1 || evs[0].Kind != "deleted" || *evs[0].Title != "New name" {
		t.Fatalf("delete events %v", kinds(evs))
	}
}

func TestDisplayStatus(t *testing.T) {
	now := time.Now()
	busy, idle := true, false
	cases := []struct {
		status, reason, outcome string
		busy                    *bool
		want                    string
	}{
		{"starting", "", "", nil, "active"},
		{"running", "", "", nil, "active"},
		{"running", "", "", &busy, "active"},
		{"running", "", "", &idle, "idle"},
		{"paused", "inactivity", "", nil, "idle"},
		{"paused", "", "", nil, "paused"},
		{"paused", "credit_limit", "", nil, "blocked"},
		{"paused", "payment_failed", "", nil, "blocked"},
		{"paused", "overage_cap", "", nil, "blocked"},
		{"paused", "orphaned", "", nil, "recovering"},
		{"stopped", "", "completed", nil, "completed"},
		{"stopped", "", "", nil, "completed"},
		{"stopped", "", "failed", nil, "failed"},
		{"failed", "", "", nil, "failed"},
	}
	for _, c := range cases {
		s := sessions.Session{Status: c.status}
		if c.reason != "" {
			s.PauseReason = &c.reason
		}
		if c.outcome != "" {
			s.Outcome = &c.outcome
		}
		if got := sessions.DisplayStatus(s, c.busy, now); got != c.want {
			t.Errorf("%s/%s/%s: %s, want %s", c.status, c.reason, c.outcome, got, c.want)
		}
	}
}
