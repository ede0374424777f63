package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

func toolCall(t *testing.T, g *gw, token, sessionID, tool, callID string, args any) (int, protocol.ToolResult, []byte) {
	t.Helper()
	raw, _ := json.Marshal(args)
	st, body := call(t, "POST", g.url+"/proliferate/"+sessionID+"/tools/"+tool, token,
		protocol.ToolCallRequest{ToolCallID: callID, Args: raw}, nil)
	var res protocol.ToolResult
	if st == http.StatusOK {
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatalf("tool answer %s: %v", body, err)
		}
	}
	return st, res, body
}

func invocations(t *testing.T, w *world, sessionID, callID string) int {
	t.Helper()
	var n int
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT count(*) FROM session_tool_invocations
		WHERE session_id = $1 AND tool_call_id = $2`, sessionID, callID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A callback retried with the same tool_call_id executes once and every
// retry gets the first answer: sequentially, concurrently, and after a
// restart (a new gateway on the same database, nothing in memory).
func TestToolCallbackRetriedActsOnce(t *testing.T) {
	w := newWorld(t)
	g1 := w.start(t, "a")
	var runs atomic.Int32
	registerEcho(g1, &runs)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	tok := w.sandboxToken(sid)

	st, first, body := toolCall(t, g1, tok, sid, "echo_test", "call-1", map[string]int{"n": 1})
	if st != 200 || !first.Success || first.Data["execution"] != float64(1) {
		t.Fatalf("%d %s", st, body)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			st, res, body := toolCall(t, g1, tok, sid, "echo_test", "call-1", map[string]int{"n": 1})
			if st != 200 || fmt.Sprint(res) != fmt.Sprint(first) {
				t.Errorf("retry: %d %s", st, body)
			}
		})
	}
	wg.Wait()

	// Restart: a new gateway process (new hub manager, empty memory).
	g2 := w.start(t, "b")
	registerEcho(g2, &runs)
	st, again, body := toolCall(t, g2, tok, sid, "echo_test", "call-1", map[string]int{"n": 1})
	if st != 200 || fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("after restart: %d %s", st, body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("executed %d times", n)
	}
	if n := invocations(t, w, sid, "call-1"); n != 1 {
		t.Fatalf("%d invocation rows", n)
	}
	// Another tool_call_id is another call.
	if _, res, _ := toolCall(t, g2, tok, sid, "echo_test", "call-2", map[string]int{}); res.Data["execution"] != float64(2) {
		t.Fatalf("second call: %+v", res)
	}
	// A missing tool_call_id is refused; an unknown tool is 404.
	if st, _, body := toolCall(t, g2, tok, sid, "echo_test", "", map[string]int{}); st != 422 {
		t.Fatalf("no id: %d %s", st, body)
	}
	if st, _, _ := toolCall(t, g2, tok, sid, "rm_rf", "call-3", map[string]int{}); st != 404 {
		t.Fatalf("unknown tool: %d", st)
	}
}

// Duplicates arriving at two gateway instances while the first attempt is
// still executing wait for it: one execution, one answer for all.
func TestConcurrentDuplicatesAcrossInstancesActOnce(t *testing.T) {
	w := newWorld(t)
	g1, g2 := w.start(t, "a"), w.start(t, "b")
	var execs atomic.Int32
	release := make(chan struct{})
	slow := tools.Tool{Name: "slow_test", Execute: func(ctx context.Context, c tools.Call) (tools.Result, error) {
		n := execs.Add(1)
		<-release
		return tools.Result{Success: true, Result: "done", Data: map[string]any{"execution": n}}, nil
	}}
	g1.srv.Tools().Register(slow)
	g2.srv.Tools().Register(slow)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	tok := w.sandboxToken(sid)

	var wg sync.WaitGroup
	results := make(chan string, 10)
	for i := range 10 {
		g := []*gw{g1, g2}[i%2]
		wg.Go(func() {
			st, res, body := toolCall(t, g, tok, sid, "slow_test", "dup", map[string]any{})
			if st != 200 {
				t.Errorf("%d %s", st, body)
			}
			results <- fmt.Sprint(res)
		})
	}
	testenv.Eventually(t, 10*time.Second, "first execution started", func() bool { return execs.Load() == 1 })
	close(release)
	wg.Wait()
	close(results)
	var first string
	for r := range results {
		if first == "" {
			first = r
		}
		if r != first {
			t.Fatalf("answers differ: %s vs %s", r, first)
		}
	}
	if execs.Load() != 1 || invocations(t, w, sid, "dup") != 1 {
		t.Fatalf("executed %d times", execs.Load())
	}
}

// runningRun queues a run for an automation session and moves it to
// running with that session, as the run executor does.
func runningRun(t *testing.T, w *world, orgID string) (runID, sessionID string) {
	t.Helper()
	pool := w.api.Deps.Pool
	ctx := context.Background()
	auto := runstest.Automation(t, pool, orgID)
	trig := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: orgID, AutomationID: auto})
	src := runs.Source{OrgID: orgID, TriggerID: trig, AutomationID: auto, TriggerType: "webhook", WebhookEventID: "wh-1"}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, w.codec, src, runs.Event{Provider: "github", EventType: "issue_opened",
			ProviderEventType: "issues:opened", OccurredAt: time.Now(), DedupKey: "d-" + orgID, Title: "Bug",
			URL: "https://github.com/a/b/issues/1", Context: map[string]any{"number": 1}})
		if err != nil {
			return err
		}
		runID = out.RunID
		r, err := runs.Lock(ctx, tx, "", runID)
		if err != nil {
			return err
		}
		for _, to := range []string{runs.StatusEnriching, runs.StatusReady} {
			if r, err = runs.Apply(ctx, tx, w.codec, r, runs.Move{From: []string{r.Status}, To: to}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sessionID = sessionstest.New(t, pool, orgID, sessionstest.Options{SessionType: "automation", ClientType: "automation",
		AutomationID: auto, RunID: runID, Status: "running"})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE automation_runs SET session_id = $2 WHERE id = $1`, runID, sessionID); err != nil {
			return err
		}
		r, err := runs.Lock(ctx, tx, "", runID)
		if err != nil {
			return err
		}
		_, err = runs.Apply(ctx, tx, w.codec, r, runs.Move{From: []string{runs.StatusReady}, To: runs.StatusRunning})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return runID, sessionID
}

func runStatus(t *testing.T, w *world, runID string) string {
	t.Helper()
	var s string
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT status FROM automation_runs WHERE id = $1`, runID).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// automation.complete is wired to runs.Complete: the running run of this
// session succeeds, the session is then stopped with the outcome (which
// ends its sandbox token: late retries are refused), and another session's
// sandbox cannot complete the run.
func TestAutomationCompleteFinishesTheRun(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	runID, sid := runningRun(t, w, owner.OrgID)
	args := map[string]any{"run_id": runID, "completion_id": "cmp-1", "outcome": "succeeded", "summary_markdown": "Fixed the bug"}

	// Another session's sandbox names this run: refused, nothing changes.
	intruder := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{SessionType: "automation"})
	st, res, body := toolCall(t, g, w.sandboxToken(intruder), intruder, tools.AutomationComplete, "t-x", args)
	if st != 200 || res.Success || runStatus(t, w, runID) != runs.StatusRunning {
		t.Fatalf("intruder: %d %s", st, body)
	}
	// Invalid arguments are the agent's to fix.
	if _, res, _ := toolCall(t, g, w.sandboxToken(sid), sid, tools.AutomationComplete, "t-bad",
		map[string]any{"run_id": runID, "completion_id": "c", "outcome": "maybe"}); res.Success {
		t.Fatal("invalid outcome accepted")
	}

	st, res, body = toolCall(t, g, w.sandboxToken(sid), sid, tools.AutomationComplete, "t-1", args)
	if st != 200 || !res.Success || res.Data["status"] != runs.StatusSucceeded {
		t.Fatalf("%d %s", st, body)
	}
	if s := runStatus(t, w, runID); s != runs.StatusSucceeded {
		t.Fatalf("run is %s", s)
	}
	// The session is terminated with the run's outcome (after the answer).
	testenv.Eventually(t, 10*time.Second, "session stopped", func() bool {
		s, err := w.store.Get(context.Background(), "", sid)
		return err == nil && s.Status == sessions.StatusStopped && s.Outcome != nil && *s.Outcome == "succeeded"
	})

	// The stopped session's sandbox is gone and so is its token: a late
	// retry (also on another gateway, also under the alias) completes
	// nothing again. (Replays by completion id: api/runs.)
	g2 := w.start(t, "b")
	for _, tool := range []string{tools.AutomationComplete, tools.AutomationCompleteAlias} {
		if st, _, body := toolCall(t, g2, w.sandboxToken(sid), sid, tool, "t-1", args); st != http.StatusUnauthorized {
			t.Fatalf("%s after the session stopped: %d %s", tool, st, body)
		}
	}
	if invocations(t, w, sid, "t-1") != 1 {
		t.Fatal("a retry after the stop was recorded")
	}
	var events int
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT count(*) FROM automation_run_events
		WHERE run_id = $1 AND type = 'completion'`, runID).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 || runStatus(t, w, runID) != runs.StatusSucceeded {
		t.Fatalf("%d completion events, run %s", events, runStatus(t, w, runID))
	}
}

// save_service_commands: setup sessions only, validated, written to the
// session's configuration.
func TestSaveServiceCommands(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	ctx := context.Background()
	cfgID := sessionstest.Configuration(t, w.api.Deps.Pool, owner.OrgID, "cfg")
	setup := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, SessionType: "setup", ConfigurationID: cfgID})
	coding := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, ConfigurationID: cfgID})
	good := map[string]any{"commands": []map[string]any{
		{"name": "web", "command": "npm run dev", "cwd": "app"},
		{"name": "db", "command": "docker compose up db", "workspacePath": "backend"},
	}}
	stored := func() string {
		var s string
		if err := w.api.Deps.Pool.QueryRow(ctx, `SELECT service_commands::text FROM configurations WHERE id = $1`, cfgID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, res, _ := toolCall(t, g, w.sandboxToken(coding), coding, tools.SaveServiceCommands, "c1", good); res.Success {
		t.Fatal("coding session saved service commands")
	}
	for name, bad := range map[string]any{
		"none":      map[string]any{"commands": []any{}},
		"no name":   map[string]any{"commands": []map[string]any{{"name": "", "command": "x"}}},
		"escape":    map[string]any{"commands": []map[string]any{{"name": "a", "command": "x", "cwd": "../etc"}}},
		"absolute":  map[string]any{"commands": []map[string]any{{"name": "a", "command": "x", "cwd": "/etc"}}},
		"unknown":   map[string]any{"commands": []map[string]any{{"name": "a", "command": "x", "shell": "zsh"}}},
		"long":      map[string]any{"commands": []map[string]any{{"name": "a", "command": strings.Repeat("x", 1001)}}},
		"slash":     map[string]any{"commands": []map[string]any{{"name": "a/b", "command": "x"}}},
		"duplicate": map[string]any{"commands": []map[string]any{{"name": "a", "command": "x"}, {"name": "a", "command": "y"}}},
		"control":   map[string]any{"commands": []map[string]any{{"name": "a\x07", "command": "x"}}},
		"too many": map[string]any{"commands": func() []map[string]any {
			var c []map[string]any
			for range 11 {
				c = append(c, map[string]any{"name": "a", "command": "b"})
			}
			return c
		}()},
	} {
		if _, res, _ := toolCall(t, g, w.sandboxToken(setup), setup, tools.SaveServiceCommands, "bad-"+name, bad); res.Success {
			t.Fatalf("%s accepted", name)
		}
	}
	if stored() != "[]" {
		t.Fatalf("invalid input was stored: %s", stored())
	}
	_, res, body := toolCall(t, g, w.sandboxToken(setup), setup, tools.SaveServiceCommands, "ok", good)
	if !res.Success || res.Data["commandCount"] != float64(2) || res.Data["configurationId"] != cfgID {
		t.Fatalf("%s", body)
	}
	var got []map[string]string
	_ = json.Unmarshal([]byte(stored()), &got)
	if len(got) != 2 || got[0]["cwd"] != "app" || got[1]["workspace_path"] != "backend" {
		t.Fatalf("stored %s", stored())
	}
}

// save_snapshot snapshots the running sandbox once per tool call id; in a
// setup session it becomes the configuration's snapshot.
func TestSaveSnapshotOncePerCall(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	ctx := context.Background()
	cfgID := sessionstest.Configuration(t, w.api.Deps.Pool, owner.OrgID, "cfg")
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, SessionType: "setup", ConfigurationID: cfgID})
	st, res, body := toolCall(t, g, w.sandboxToken(sid), sid, tools.SaveSnapshot, "snap-1", map[string]any{"message": "deps installed"})
	if st != 200 || !res.Success || res.Data["target"] != "configuration" {
		t.Fatalf("%d %s", st, body)
	}
	snap, _ := res.Data["snapshotId"].(string)
	_, again, _ := toolCall(t, g, w.sandboxToken(sid), sid, tools.SaveSnapshot, "snap-1", map[string]any{"message": "deps installed"})
	if again.Data["snapshotId"] != snap || w.prov.snapshots.Load() != 1 {
		t.Fatalf("retry took another snapshot: %+v (%d snapshots)", again, w.prov.snapshots.Load())
	}
	var cfgSnap, status string
	if err := w.api.Deps.Pool.QueryRow(ctx, `SELECT snapshot_id, snapshot_status FROM configurations WHERE id = $1`, cfgID).
		Scan(&cfgSnap, &status); err != nil {
		t.Fatal(err)
	}
	s, err := w.store.Get(ctx, "", sid)
	if err != nil || cfgSnap != snap || status != "ready" || s.SnapshotID == nil || *s.SnapshotID != snap {
		t.Fatalf("configuration %s/%s, session %v, want %s (%v)", cfgSnap, status, s.SnapshotID, snap, err)
	}
}

// request_env_variables surfaces an env_request to the session's
// WebSocket clients and waits for an answer; unanswered (this provider
// cannot take values anyway) it ends with a timed-out result. Bad
// arguments fail at once. (env_test.go answers it with the real provider.)
func TestRequestEnvVariablesReachesClients(t *testing.T) {
	w := newWorld(t)
	g := w.startWith(t, "a", w.prov, func(d *hub.Deps) { d.EnvRequestTimeout = 200 * time.Millisecond })
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	st, c := dialWS(t, g, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, c, protocol.MsgInit)
	testenv.Eventually(t, 10*time.Second, "sandbox running", func() bool { return w.prov.Created() == 1 })
	if _, res, _ := toolCall(t, g, w.sandboxToken(sid), sid, tools.RequestEnvVariables, "env-2",
		map[string]any{"keys": []map[string]any{{"key": "A", "type": "file"}}}); res.Success {
		t.Fatal("bad type accepted")
	}
	if _, res, _ := toolCall(t, g, w.sandboxToken(sid), sid, tools.RequestEnvVariables, "env-3",
		map[string]any{"keys": []map[string]any{{"key": "PATH"}}}); res.Success {
		t.Fatal("a variable the sandbox sets accepted")
	}
	args := map[string]any{"keys": []map[string]any{{"key": "STRIPE_KEY", "type": "secret", "description": "test key"}}}
	_, res, body := toolCall(t, g, w.sandboxToken(sid), sid, tools.RequestEnvVariables, "env-1", args)
	if res.Success || !strings.Contains(res.Result, "timed out") || res.Data["timedOut"] != true {
		t.Fatalf("%s", body)
	}
	var m protocol.EnvRequestMessage
	if err := json.Unmarshal(readUntil(t, c, protocol.MsgEnvRequest), &m); err != nil {
		t.Fatal(err)
	}
	var req struct {
		Keys []struct{ Key, Type string }
	}
	_ = json.Unmarshal(m.Request, &req)
	if m.ToolCallID != "env-1" || len(req.Keys) != 1 || req.Keys[0].Key != "STRIPE_KEY" || req.Keys[0].Type != "secret" {
		t.Fatalf("%+v", m)
	}
	var r protocol.EnvResolvedMessage
	if err := json.Unmarshal(readUntil(t, c, protocol.MsgEnvResolved), &r); err != nil || r.ToolCallID != "env-1" || r.Status != protocol.EnvTimedOut {
		t.Fatalf("%+v %v", r, err)
	}
}

// An attempt whose gateway died mid-execution (an executing row nobody
// finishes) is taken over once stale, so the sandbox's retry completes.
func TestStaleExecutingCallIsTakenOver(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	var n atomic.Int32
	registerEcho(g, &n)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `INSERT INTO session_tool_invocations
		(session_id, org_id, tool_call_id, tool_name, input, started_at)
		VALUES ($1, $2, 'orphan', 'echo_test', '{}', now() - interval '1 hour')`, sid, owner.OrgID); err != nil {
		t.Fatal(err)
	}
	st, res, body := toolCall(t, g, w.sandboxToken(sid), sid, "echo_test", "orphan", map[string]any{})
	if st != 200 || !res.Success || n.Load() != 1 {
		t.Fatalf("%d %s (executions %d)", st, body, n.Load())
	}
}
