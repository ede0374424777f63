package invocations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/runs"
)

var ctx = context.Background()

func createIssue(title string) invocations.InvokeInput {
	return invocations.InvokeInput{Integration: "linear", Action: "create_issue",
		Params: json.RawMessage(fmt.Sprintf(`{"teamId":"team-eng","title":%q}`, title))}
}

func (w *world) setOrgModes(t *testing.T, modes string) {
	t.Helper()
	if _, err := w.pool.Exec(ctx, `UPDATE organizations SET action_modes = $2 WHERE id = $1`, w.org, modes); err != nil {
		t.Fatal(err)
	}
}

func TestAllowExecutesOnceAndRecordsEveryStep(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	w.setOrgModes(t, `{"linear:create_issue":"allow"}`)

	out, err := w.svc.Invoke(ctx, sess, createIssue("Crash on start"))
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.Status != invocations.StatusCompleted || inv.Mode != "allow" || inv.ModeSource != "org_default" || inv.Drifted {
		t.Fatalf("invocation = %+v", inv)
	}
	if w.fake.MutationCount() != 1 {
		t.Fatalf("linear saw %d mutations, want 1", w.fake.MutationCount())
	}
	if !strings.Contains(string(out.Result), "Crash on start") || !strings.Contains(string(inv.Result), "Crash on start") {
		t.Fatalf("result = %s / stored %s", out.Result, inv.Result)
	}
	if inv.DurationMs == nil || inv.CompletedAt == nil {
		t.Fatalf("duration/completed_at missing: %+v", inv)
	}
	got, err := w.svc.Get(ctx, sess.ID, inv.ID)
	if err != nil || got.Status != invocations.StatusCompleted {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if tr := transitions(w.events(t, inv.ID)); tr != ">approved approved>executing executing>completed" {
		t.Fatalf("events = %s", tr)
	}
	evs := w.events(t, inv.ID)
	last := evs[len(evs)-1]
	if last.SessionID != sess.ID || last.Mode != "allow" || last.ModeSource == nil || *last.ModeSource != "org_default" ||
		last.ResultJSON == nil || last.ParamsJSON == nil || last.DurationMs == nil || last.CompletedAt == nil {
		t.Fatalf("last event = %+v", last)
	}
	if st := w.notes.statuses(inv.ID); strings.Join(st, ",") != "executing,completed" {
		t.Fatalf("notifications = %v", st)
	}
	// Another session of another org cannot read it.
	if _, err := w.svc.Get(ctx, w.session(t).ID, inv.ID); !errors.Is(err, invocations.ErrNotFound) {
		t.Fatalf("Get from another session = %v", err)
	}
}

func TestReadActionInferredAllowAndFailedExecution(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: "linear", Action: "get_issue",
		Params: json.RawMessage(`{"issueId":"ENG-404"}`)})
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.ModeSource != "inferred_default" || inv.Status != invocations.StatusFailed || inv.Error == nil {
		t.Fatalf("invocation = %+v", inv)
	}
	if strings.Contains(*inv.Error, linearToken) {
		t.Fatal("error text leaks the token")
	}
	if tr := transitions(w.events(t, inv.ID)); tr != ">approved approved>executing executing>failed" {
		t.Fatalf("events = %s", tr)
	}
}

func TestDenyStoresPolicyAndExecutesNothing(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	// wipe is danger: inferred deny.
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "wipe"})
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.Status != invocations.StatusDenied || inv.DeniedReason == nil || *inv.DeniedReason != "policy" || inv.Mode != "deny" {
		t.Fatalf("invocation = %+v", inv)
	}
	// An explicit org deny of create_issue.
	w.setOrgModes(t, `{"linear:create_issue":"deny"}`)
	out, err = w.svc.Invoke(ctx, sess, createIssue("nope"))
	if err != nil || out.Invocation.Status != invocations.StatusDenied || out.Invocation.ModeSource != "org_default" {
		t.Fatalf("org deny = %+v, %v", out.Invocation, err)
	}
	if w.conn.execs.Load() != 0 || w.fake.MutationCount() != 0 {
		t.Fatal("a denied action was executed")
	}
	if tr := transitions(w.events(t, inv.ID)); tr != ">denied" {
		t.Fatalf("events = %s", tr)
	}
}

func TestUnknownStoredModeDenies(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	w.setOrgModes(t, `{"linear:create_issue":"x"}`)
	out, err := w.svc.Invoke(ctx, sess, createIssue("t"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Invocation.Status != invocations.StatusDenied || *out.Invocation.DeniedReason != "unknown_mode:x" {
		t.Fatalf("invocation = %+v", out.Invocation)
	}
	if w.fake.MutationCount() != 0 {
		t.Fatal("executed")
	}
}

func TestDriftedAllowWaitsForApproval(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	w.srcs.drifted.Store(true)
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "search",
		Params: json.RawMessage(`{"query":"kafka"}`)})
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.Status != invocations.StatusPending || inv.Mode != "require_approval" || !inv.Drifted || inv.ExpiresAt == nil {
		t.Fatalf("invocation = %+v", inv)
	}
	if d := time.Until(*inv.ExpiresAt); d < 4*time.Minute || d > 6*time.Minute {
		t.Fatalf("interactive expiry in %s, want 5m", d)
	}
	if w.conn.execs.Load() != 0 {
		t.Fatal("executed before approval")
	}
	if st := w.notes.statuses(inv.ID); len(st) != 1 || st[0] != "pending" {
		t.Fatalf("notifications = %v", st)
	}
}

func TestBadParamsStoreNothing(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	_, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: "linear", Action: "create_issue",
		Params: json.RawMessage(`{"title":5}`)})
	var pe *actions.ParamsError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want ParamsError", err)
	}
	if _, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: "linear", Action: "nope"}); !errors.Is(err, invocations.ErrUnknownAction) {
		t.Fatalf("unknown action = %v", err)
	}
	if _, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: "github", Action: "x"}); !errors.Is(err, invocations.ErrUnknownIntegration) {
		t.Fatalf("unknown integration = %v", err)
	}
	if n := w.count(t, `SELECT count(*) FROM action_invocations WHERE session_id = $1`, sess.ID); n != 0 {
		t.Fatalf("%d rows stored", n)
	}
}

func TestApproveOnceThenAlwaysAtOrgScope(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	out, err := w.svc.Invoke(ctx, sess, createIssue("first"))
	if err != nil || out.Invocation.Status != invocations.StatusPending || out.Invocation.ModeSource != "inferred_default" {
		t.Fatalf("invoke = %+v, %v", out.Invocation, err)
	}
	res, err := w.svc.Approve(ctx, w.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce})
	if err != nil {
		t.Fatal(err)
	}
	if res.Invocation.Status != invocations.StatusCompleted || res.Invocation.ApprovedBy == nil || *res.Invocation.ApprovedBy != w.admin {
		t.Fatalf("approved = %+v", res.Invocation)
	}
	if w.fake.MutationCount() != 1 {
		t.Fatalf("mutations = %d", w.fake.MutationCount())
	}
	if tr := transitions(w.events(t, out.Invocation.ID)); tr != ">pending pending>approved approved>executing executing>completed" {
		t.Fatalf("events = %s", tr)
	}
	// Once: the next one waits again.
	out2, err := w.svc.Invoke(ctx, sess, createIssue("second"))
	if err != nil || out2.Invocation.Status != invocations.StatusPending {
		t.Fatalf("second = %+v, %v", out2.Invocation, err)
	}
	if _, err := w.svc.Approve(ctx, w.approver("owner"), out2.Invocation.ID, invocations.Approval{Mode: invocations.ApproveAlways}); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := w.pool.QueryRow(ctx, `SELECT action_modes->>'linear:create_issue' FROM organizations WHERE id = $1`, w.org).Scan(&mode); err != nil || mode != "allow" {
		t.Fatalf("org mode = %q, %v", mode, err)
	}
	out3, err := w.svc.Invoke(ctx, sess, createIssue("third"))
	if err != nil || out3.Invocation.Status != invocations.StatusCompleted || out3.Invocation.ModeSource != "org_default" {
		t.Fatalf("third = %+v, %v", out3.Invocation, err)
	}
	if w.fake.MutationCount() != 3 {
		t.Fatalf("mutations = %d, want 3", w.fake.MutationCount())
	}
}

func TestSecondApprovalConflictsAndExecutesOnce(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	other := w.newService() // a second instance on the same database
	out, err := w.svc.Invoke(ctx, sess, createIssue("race"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			svc := w.svc
			if i%2 == 1 {
				svc = other
			}
			_, errs[i] = svc.Approve(ctx, w.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce})
		}()
	}
	wg.Wait()
	ok, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, invocations.ErrConflict):
			conflicts++
		default:
			t.Fatalf("approve: %v", err)
		}
	}
	if ok != 1 || conflicts != n-1 {
		t.Fatalf("ok=%d conflicts=%d", ok, conflicts)
	}
	if w.fake.MutationCount() != 1 {
		t.Fatalf("executed %d times", w.fake.MutationCount())
	}
	if _, err := w.svc.Deny(ctx, w.approver("admin"), out.Invocation.ID); !errors.Is(err, invocations.ErrConflict) {
		t.Fatalf("deny after approve = %v", err)
	}
	if tr := transitions(w.events(t, out.Invocation.ID)); tr != ">pending pending>approved approved>executing executing>completed" {
		t.Fatalf("events = %s", tr)
	}
}

func TestApproveAfterExpiry(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	out, err := w.svc.Invoke(ctx, sess, createIssue("late"))
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(invocations.InteractiveTTL + time.Second)
	res, err := w.svc.Approve(ctx, w.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce})
	if !errors.Is(err, invocations.ErrExpired) {
		t.Fatalf("approve = %v", err)
	}
	if res.Invocation.Status != invocations.StatusExpired || *res.Invocation.DeniedReason != "expired" {
		t.Fatalf("invocation = %+v", res.Invocation)
	}
	if w.fake.MutationCount() != 0 {
		t.Fatal("expired invocation executed")
	}
	if _, err := w.svc.Approve(ctx, w.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce}); !errors.Is(err, invocations.ErrExpired) {
		t.Fatalf("second approve = %v (want expired, as before the row was marked)", err)
	}
	if tr := transitions(w.events(t, out.Invocation.ID)); tr != ">pending pending>expired" {
		t.Fatalf("events = %s", tr)
	}
}

// Deps.PendingTTL (ACTIONS_PENDING_TTL) replaces InteractiveTTL: past the
// default an invocation can still be approved, past the setting it has
// expired.
func TestPendingTTLIsASetting(t *testing.T) {
	w := newWorld(t)
	svc := invocations.New(invocations.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Sources: w.srcs,
		Validator: actions.NewValidator(0), Notifier: w.notes, RunHooks: invocations.NewRunHooks(w.codec), Now: w.clock.Now,
		PendingTTL: 3 * invocations.InteractiveTTL})
	sess := w.session(t)
	kept, err := svc.Invoke(ctx, sess, createIssue("kept"))
	if err != nil {
		t.Fatal(err)
	}
	late, err := svc.Invoke(ctx, sess, createIssue("late"))
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(invocations.InteractiveTTL + time.Minute)
	if res, err := svc.Approve(ctx, w.approver("admin"), kept.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce}); err != nil ||
		res.Invocation.Status != invocations.StatusCompleted {
		t.Fatalf("approve past the default TTL = %+v, %v", res.Invocation, err)
	}
	w.clock.Advance(2 * invocations.InteractiveTTL)
	if _, err := svc.Approve(ctx, w.approver("admin"), late.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce}); !errors.Is(err, invocations.ErrExpired) {
		t.Fatalf("approve past the set TTL = %v", err)
	}
}

func TestApproverChecks(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	out, err := w.svc.Invoke(ctx, sess, createIssue("guarded"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Approve(ctx, w.approver("member"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce}); !errors.Is(err, invocations.ErrForbidden) {
		t.Fatalf("member approve = %v", err)
	}
	if _, err := w.svc.Deny(ctx, w.approver("member"), out.Invocation.ID); !errors.Is(err, invocations.ErrForbidden) {
		t.Fatalf("member deny = %v", err)
	}
	w2 := newWorld(t)
	if _, err := w.svc.Approve(ctx, w2.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce}); !errors.Is(err, invocations.ErrNotFound) {
		t.Fatalf("other org approve = %v", err)
	}
	if _, err := w.svc.Approve(ctx, w.approver("admin"), "not-a-uuid", invocations.Approval{Mode: invocations.ApproveOnce}); !errors.Is(err, invocations.ErrNotFound) {
		t.Fatalf("bad id = %v", err)
	}
	inv, err := w.svc.Deny(ctx, w.approver("admin"), out.Invocation.ID)
	if err != nil || inv.Status != invocations.StatusDenied || *inv.DeniedReason != "human" {
		t.Fatalf("deny = %+v, %v", inv, err)
	}
	if w.fake.MutationCount() != 0 {
		t.Fatal("denied invocation executed")
	}
	if tr := transitions(w.events(t, out.Invocation.ID)); tr != ">pending pending>denied" {
		t.Fatalf("events = %s", tr)
	}
}

func TestPendingCapAcrossInstances(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	svcs := []*invocations.Svc{w.svc, w.newService()}
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = svcs[i%2].Invoke(ctx, sess, createIssue(fmt.Sprintf("p%d", i)))
		}()
	}
	wg.Wait()
	ok, limited := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, invocations.ErrPendingLimit):
			limited++
		default:
			t.Fatal(err)
		}
	}
	if ok != invocations.MaxPendingPerSession || limited != n-invocations.MaxPendingPerSession {
		t.Fatalf("ok=%d limited=%d", ok, limited)
	}
	if c := w.count(t, `SELECT count(*) FROM action_invocations WHERE session_id = $1`, sess.ID); c != invocations.MaxPendingPerSession {
		t.Fatalf("%d rows stored", c)
	}
	// Reads are not capped; another session is not affected.
	if out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: "linear", Action: "list_issues"}); err != nil || out.Invocation.Status != invocations.StatusCompleted {
		t.Fatalf("read while capped = %+v, %v", out.Invocation, err)
	}
	if _, err := w.svc.Invoke(ctx, w.session(t), createIssue("elsewhere")); err != nil {
		t.Fatal(err)
	}
}

func TestRateLimitSharedAcrossInstances(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	svcs := []*invocations.Svc{w.svc, w.newService()}
	// Stay inside one minute window.
	now := w.clock.Now()
	w.clock.Advance(now.Truncate(time.Minute).Add(time.Minute).Sub(now) + time.Second)
	var wg sync.WaitGroup
	const n = invocations.RatePerMinute + 15
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = svcs[i%2].Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "wipe"})
		}()
	}
	wg.Wait()
	limited := 0
	for _, err := range errs {
		if errors.Is(err, invocations.ErrRateLimited) {
			limited++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if limited != 15 {
		t.Fatalf("limited %d, want 15", limited)
	}
	w.clock.Advance(time.Minute)
	if _, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "wipe"}); err != nil {
		t.Fatalf("next minute: %v", err)
	}
}

func TestExpireOnceAcrossReplicas(t *testing.T) {
	w := newWorld(t)
	var ids []string
	for range 3 {
		sess := w.session(t)
		for i := range 5 {
			out, err := w.svc.Invoke(ctx, sess, createIssue(fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, out.Invocation.ID)
		}
	}
	if _, err := w.pool.Exec(ctx, `UPDATE action_invocations SET expires_at = now() - interval '1 second' WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	replicas := []*invocations.Svc{w.svc, w.newService(), w.newService()}
	var wg sync.WaitGroup
	counts := make([]int, len(replicas))
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := r.ExpirePending(ctx)
			if err != nil {
				t.Error(err)
			}
			counts[i] = n
		}()
	}
	wg.Wait()
	if total := counts[0] + counts[1] + counts[2]; total != len(ids) {
		t.Fatalf("expired %v, total != %d", counts, len(ids))
	}
	for _, id := range ids {
		if tr := transitions(w.events(t, id)); tr != ">pending pending>expired" {
			t.Fatalf("events of %s = %s", id, tr)
		}
	}
	if n, err := w.svc.ExpirePending(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v", n, err)
	}
}

func TestUnattendedRunPausesAndResumes(t *testing.T) {
	w := newWorld(t)
	sess, auto, run := w.runSession(t)
	a, err := w.svc.Invoke(ctx, sess, createIssue("a"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Invocation.RunID == nil || *a.Invocation.RunID != run || a.Invocation.AutomationID == nil {
		t.Fatalf("invocation = %+v", a.Invocation)
	}
	if d := time.Until(*a.Invocation.ExpiresAt); d < 23*time.Hour {
		t.Fatalf("unattended expiry in %s, want 24h", d)
	}
	if st := w.runStatus(t, run); st != runs.StatusNeedsHuman {
		t.Fatalf("run = %s, want needs_human", st)
	}
	// A pause for approval is not the end of the run: its trigger event
	// stays processing and it has no completion time.
	waitingRun := func(what string) {
		t.Helper()
		var evStatus string
		var completed *time.Time
		if err := w.pool.QueryRow(ctx, `SELECT te.status, r.completed_at FROM automation_runs r
			JOIN trigger_events te ON te.id = r.trigger_event_id WHERE r.id = $1`, run).Scan(&evStatus, &completed); err != nil {
			t.Fatal(err)
		}
		if evStatus != "processing" || completed != nil {
			t.Fatalf("%s: trigger event %s, completed_at %v", what, evStatus, completed)
		}
	}
	waitingRun("paused for approval")
	b, err := w.svc.Invoke(ctx, sess, createIssue("b"))
	if err != nil {
		t.Fatal(err)
	}
	// Approving one of two leaves the run waiting.
	if _, err := w.svc.Approve(ctx, w.approver("admin"), a.Invocation.ID, invocations.Approval{Mode: invocations.ApproveAlways}); err != nil {
		t.Fatal(err)
	}
	if st := w.runStatus(t, run); st != runs.StatusNeedsHuman {
		t.Fatalf("run = %s after one approval", st)
	}
	// "Always" was written at the automation scope, not the org.
	var autoMode, orgMode *string
	if err := w.pool.QueryRow(ctx, `SELECT a.action_modes->>'linear:create_issue', o.action_modes->>'linear:create_issue'
		FROM automations a, organizations o WHERE a.id = $1 AND o.id = $2`, auto, w.org).Scan(&autoMode, &orgMode); err != nil {
		t.Fatal(err)
	}
	if autoMode == nil || *autoMode != "allow" || orgMode != nil {
		t.Fatalf("automation mode %v, org mode %v", autoMode, orgMode)
	}
	if _, err := w.svc.Deny(ctx, w.approver("admin"), b.Invocation.ID); err != nil {
		t.Fatal(err)
	}
	if st := w.runStatus(t, run); st != runs.StatusRunning {
		t.Fatalf("run = %s after all resolved, want running", st)
	}
	waitingRun("resumed")
	// The automation override now allows it without a pause.
	c, err := w.svc.Invoke(ctx, sess, createIssue("c"))
	if err != nil || c.Invocation.Status != invocations.StatusCompleted || c.Invocation.ModeSource != "automation_override" {
		t.Fatalf("c = %+v, %v", c.Invocation, err)
	}
	if w.runStatus(t, run) != runs.StatusRunning {
		t.Fatal("allowed action paused the run")
	}
	moves := w.count(t, `SELECT count(*) FROM automation_run_events WHERE run_id = $1 AND type = 'status_transition'`, run)
	if moves != 2 {
		t.Fatalf("%d run transitions, want 2", moves)
	}

	// An expired approval leaves the run needs_human for a person.
	d, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: "linear", Action: "add_comment",
		Params: json.RawMessage(`{"issueId":"ENG-1","body":"hi"}`)})
	if err != nil || w.runStatus(t, run) != runs.StatusNeedsHuman {
		t.Fatalf("d = %+v, %v", d.Invocation, err)
	}
	w.clock.Advance(invocations.UnattendedTTL + time.Minute)
	if _, err := w.svc.Approve(ctx, w.approver("admin"), d.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce}); !errors.Is(err, invocations.ErrExpired) {
		t.Fatalf("late approval = %v", err)
	}
	if st := w.runStatus(t, run); st != runs.StatusNeedsHuman {
		t.Fatalf("run = %s after expiry, want needs_human", st)
	}
}

func TestRedactedParamsAndTruncatedResults(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	big := make([]string, 0, 400)
	for i := range 400 {
		big = append(big, fmt.Sprintf(`{"n":%d,"text":"%s"}`, i, strings.Repeat("x", 40)))
	}
	w.conn.result = json.RawMessage(`{"access_token":"tok-very-secret","hits":[` + strings.Join(big, ",") + `]}`)
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "search",
		Params: json.RawMessage(`{"query":"q","api_key":"key-very-secret"}`)})
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.Status != invocations.StatusCompleted {
		t.Fatalf("status %s", inv.Status)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, inv.Result); err != nil {
		t.Fatal(err)
	}
	if compact.Len() > actions.DefaultMaxResultBytes || !strings.Contains(compact.String(), `"_truncated":true`) {
		t.Fatalf("stored result %d bytes: %.100s", compact.Len(), compact.String())
	}
	for _, b := range []string{string(inv.Result), string(inv.Params), string(out.Result)} {
		if strings.Contains(b, "very-secret") {
			t.Fatalf("secret leaked: %.200s", b)
		}
	}
	for _, e := range w.events(t, inv.ID) {
		for _, p := range []*string{e.ParamsJSON, e.ResultJSON} {
			if p != nil && strings.Contains(*p, "very-secret") {
				t.Fatal("event leaks a secret")
			}
		}
	}
	// One size rule: the agent gets exactly what is stored.
	var agentV, storedV any
	if err := json.Unmarshal(out.Result, &agentV); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(inv.Result, &storedV); err != nil {
		t.Fatal(err)
	}
	if len(out.Result) > actions.DefaultMaxResultBytes || !reflect.DeepEqual(agentV, storedV) {
		t.Fatalf("the agent's result (%d bytes) is not the stored one: %.200s", len(out.Result), out.Result)
	}
}

func TestApprovedPendingRunsWithOriginalParams(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	w.srcs.drifted.Store(true)
	w.conn.result = nil
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "search",
		Params: json.RawMessage(`{"query":"q","api_key":"key-very-secret"}`)})
	if err != nil || out.Invocation.Status != invocations.StatusPending {
		t.Fatalf("invoke = %+v, %v", out.Invocation, err)
	}
	if strings.Contains(string(out.Invocation.Params), "very-secret") {
		t.Fatal("pending params stored unredacted")
	}
	res, err := w.svc.Approve(ctx, w.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce})
	if err != nil {
		t.Fatal(err)
	}
	// The connector got the original key; nothing stored or returned has it.
	w.conn.mu.Lock()
	last := string(w.conn.last)
	w.conn.mu.Unlock()
	if w.conn.execs.Load() != 1 || !strings.Contains(last, "key-very-secret") {
		t.Fatalf("executed %d times with %s", w.conn.execs.Load(), last)
	}
	for _, b := range []string{string(res.Invocation.Result), string(res.Result), string(res.Invocation.Params)} {
		if strings.Contains(b, "very-secret") {
			t.Fatalf("secret leaked: %s", b)
		}
	}

	// When the kept originals are lost, approval fails cleanly instead of
	// executing "[REDACTED]".
	out, err = w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "search",
		Params: json.RawMessage(`{"query":"q","api_key":"key-very-secret"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.Del(ctx, "actions:params:"+out.Invocation.ID).Err(); err != nil {
		t.Fatal(err)
	}
	res, err = w.svc.Approve(ctx, w.approver("admin"), out.Invocation.ID, invocations.Approval{Mode: invocations.ApproveOnce})
	if err != nil || res.Invocation.Status != invocations.StatusFailed || !strings.Contains(*res.Invocation.Error, "no longer available") {
		t.Fatalf("approve without originals = %+v, %v", res.Invocation, err)
	}
	if w.conn.execs.Load() != 1 {
		t.Fatal("executed with redacted params")
	}
}

func TestListsAndGuide(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	var ids []string
	for i := range 5 {
		out, err := w.svc.Invoke(ctx, sess, createIssue(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, out.Invocation.ID)
	}
	if _, err := w.svc.Deny(ctx, w.approver("admin"), ids[0]); err != nil {
		t.Fatal(err)
	}
	list, err := w.svc.ListSession(ctx, sess.ID, 0)
	if err != nil || len(list) != 5 || list[0].ID != ids[4] {
		t.Fatalf("ListSession = %d, %v", len(list), err)
	}
	// The API role: no sources, no Redis.
	api := invocations.New(invocations.Deps{Pool: w.pool, Codec: w.codec})
	var seen []string
	cursor := ""
	for {
		page, next, err := api.ListOrg(ctx, w.org, "pending", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			if p.SessionTitle != "Fix the bug" || p.Status != "pending" {
				t.Fatalf("item %+v", p)
			}
			seen = append(seen, p.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(seen, ",") != strings.Join([]string{ids[4], ids[3], ids[2], ids[1]}, ",") {
		t.Fatalf("pages = %v", seen)
	}
	if _, _, err := api.ListOrg(ctx, w.org, "bogus", "", 10); !errors.Is(err, invocations.ErrInvalidQuery) {
		t.Fatalf("bad status = %v", err)
	}
	if _, _, err := api.ListOrg(ctx, w.org, "", "!!", 10); !errors.Is(err, invocations.ErrInvalidQuery) {
		t.Fatalf("bad cursor = %v", err)
	}
	if other, _, err := api.ListOrg(ctx, newWorld(t).org, "", "", 10); err != nil || len(other) != 0 {
		t.Fatalf("other org sees %d, %v", len(other), err)
	}
	avail, err := w.svc.Available(ctx, sess)
	if err != nil || len(avail) != 2 || avail[0].Integration != "linear" || len(avail[0].Actions) != 5 {
		t.Fatalf("Available = %+v, %v", avail, err)
	}
	g, err := w.svc.Guide(ctx, sess, w.conn.id)
	if err != nil || !strings.Contains(g, "search the docs") {
		t.Fatalf("Guide = %q, %v", g, err)
	}
	if _, err := w.svc.Guide(ctx, sess, "nope"); !errors.Is(err, invocations.ErrUnknownIntegration) {
		t.Fatalf("Guide unknown = %v", err)
	}
}

func TestFailStaleExecuting(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	out, err := w.svc.Invoke(ctx, sess, createIssue("stuck"))
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a gateway that died mid-execution: approved and executing,
	// never finished.
	if _, err := w.pool.Exec(ctx, `UPDATE action_invocations SET status = 'executing', updated_at = now() - interval '10 minutes'
		WHERE id = $1`, out.Invocation.ID); err != nil {
		t.Fatal(err)
	}
	fresh, err := w.svc.Invoke(ctx, sess, createIssue("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE action_invocations SET status = 'executing' WHERE id = $1`, fresh.Invocation.ID); err != nil {
		t.Fatal(err)
	}
	n, err := w.svc.FailStale(ctx)
	if err != nil || n < 1 {
		t.Fatalf("FailStale = %d, %v", n, err)
	}
	var st, fst string
	if err := w.pool.QueryRow(ctx, `SELECT (SELECT status FROM action_invocations WHERE id = $1), (SELECT status FROM action_invocations WHERE id = $2)`,
		out.Invocation.ID, fresh.Invocation.ID).Scan(&st, &fst); err != nil {
		t.Fatal(err)
	}
	if st != invocations.StatusFailed || fst != invocations.StatusExecuting {
		t.Fatalf("stale %s, fresh %s", st, fst)
	}
	evs := w.events(t, out.Invocation.ID)
	if last := evs[len(evs)-1]; last.Status != "failed" || last.Error == nil || *last.Error != invocations.StaleError {
		t.Fatalf("last event %+v", last)
	}
}
