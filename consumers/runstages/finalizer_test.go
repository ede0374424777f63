package runstages_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
)

func (h *harness) finalizer() *runstages.Finalizer {
	return runstages.NewFinalizer(h.deps, runstages.FinalizerOptions{Inactivity: 30 * time.Minute})
}

func (h *harness) exec(sql string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), sql, args...); err != nil {
		h.t.Fatal(err)
	}
}

// running brings a new run to running with its prompt sent.
func (h *harness) running(auto string) runs.Run {
	h.t.Helper()
	id := h.enqueue(auto, "Bug")
	h.waitStatus(id, runs.StatusRunning)
	testenv.Eventually(h.t, 10*time.Second, "prompt sent", func() bool { return h.run1(id).PromptSentAt != nil })
	return h.run1(id)
}

func (h *harness) pass(f *runstages.Finalizer) runstages.PassResult {
	h.t.Helper()
	res, err := f.Pass(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) expectEnded(id, status, reason string) {
	h.t.Helper()
	r := h.run1(id)
	if r.Status != status || r.StatusReason == nil || *r.StatusReason != reason || *r.FailureStage != runs.StageFinalization {
		h.t.Fatalf("run %s: %s/%v/%v, want %s/%s at finalization", id, r.Status, deref(r.StatusReason), deref(r.FailureStage), status, reason)
	}
	var ev string
	if err := h.pool.QueryRow(context.Background(), `SELECT status FROM trigger_events WHERE id = $1`, r.TriggerEventID).Scan(&ev); err != nil || ev != "failed" {
		h.t.Fatalf("trigger event %q %v", ev, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// Every finalization branch: deadline (running, or still waiting for a
// stage), inactivity with a live session, a session gone or stopped without
// completion, a dead sandbox; a healthy active run and a run waiting for a
// stage within its deadline are left alone.
func TestFinalizerBranches(t *testing.T) {
	h := newHarness(t)
	h.stages()
	auto := h.automation("")
	f := h.finalizer()

	deadline := h.running(auto)
	h.exec(`UPDATE automation_runs SET deadline_at = now() - interval '1 second' WHERE id = $1`, deadline.ID)
	inactive := h.running(auto)
	gone := h.running(auto)
	stopped := h.running(auto)
	dead := h.running(auto)
	for _, r := range []runs.Run{inactive, gone, stopped, dead} {
		h.exec(`UPDATE automation_runs SET last_activity_at = now() - interval '31 minutes' WHERE id = $1`, r.ID)
	}
	h.sessions.SetState(*gone.SessionID, runs.SessionState{})
	h.sessions.SetState(*stopped.SessionID, runs.SessionState{Exists: true, Status: "stopped", SandboxAlive: false})
	h.sessions.SetState(*dead.SessionID, runs.SessionState{Exists: true, Status: "running", SandboxAlive: false})
	healthy := h.running(auto)
	// A run waiting for its executor for a long time (a lagging consumer, an
	// outage) is left alone within its deadline, and timed out past it.
	waiting := h.running(auto).ID
	late := h.running(auto).ID
	testenv.Eventually(t, 10*time.Second, "executor caught up", func() bool { return h.caughtUp(runstages.ExecutorGroup.Name) })
	// Rewound by hand once the executor has seen every record, so no
	// delivery moves them on again.
	h.exec(`UPDATE automation_runs SET status = 'ready', updated_at = now() - interval '1 hour' WHERE id = ANY($1)`, []string{waiting, late})
	h.exec(`UPDATE automation_runs SET deadline_at = now() - interval '1 second' WHERE id = $1`, late)

	res := h.pass(f)
	if !res.Locked || res.Finalized != 6 {
		t.Fatalf("pass %+v, want 6 finalized", res)
	}
	if r := h.run1(waiting); r.Status != runs.StatusReady {
		t.Fatalf("a run waiting within its deadline was finalized: %s", r.Status)
	}
	h.expectEnded(deadline.ID, runs.StatusTimedOut, "deadline_exceeded")
	h.expectEnded(inactive.ID, runs.StatusFailed, "inactivity_timeout")
	h.expectEnded(gone.ID, runs.StatusFailed, "no_completion")
	h.expectEnded(stopped.ID, runs.StatusFailed, "no_completion")
	h.expectEnded(dead.ID, runs.StatusFailed, "sandbox_dead")
	h.expectEnded(late, runs.StatusTimedOut, "deadline_exceeded")
	if r := h.run1(healthy.ID); r.Status != runs.StatusRunning {
		t.Fatalf("healthy run %s", r.Status)
	}
	if got := h.lifecycle(deadline.ID, 5); got[4] != runs.StatusTimedOut {
		t.Fatalf("lifecycle %v", got)
	}
	// A second pass has nothing left to do.
	if res := h.pass(f); res.Finalized != 0 {
		t.Fatalf("second pass %+v", res)
	}
	// The agent completing after the timeout is refused: the outcome stands.
	if _, err := h.complete(runs.Completion{RunID: deadline.ID, CompletionID: runstages.CompletionID(deadline.ID), Outcome: "succeeded"}); err == nil {
		t.Fatal("a completion after the timeout was accepted")
	}
}

// Two finalizer replicas passing at the same time act once per run: one
// holds the lock, and every run gets exactly one terminal transition.
func TestFinalizerReplicasActOnce(t *testing.T) {
	h := newHarness(t)
	h.stages()
	auto := h.automation("")
	var ids []string
	for range 5 {
		r := h.running(auto)
		ids = append(ids, r.ID)
		h.exec(`UPDATE automation_runs SET deadline_at = now() - interval '1 second' WHERE id = $1`, r.ID)
	}
	a, b := h.finalizer(), h.finalizer()
	total := 0
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		results := make([]runstages.PassResult, 2)
		for i, f := range []*runstages.Finalizer{a, b} {
			wg.Go(func() { results[i] = h.pass(f) })
		}
		wg.Wait()
		total += results[0].Finalized + results[1].Finalized
	}
	if total != len(ids) {
		t.Fatalf("%d finalizations for %d runs", total, len(ids))
	}
	for _, id := range ids {
		var n int
		if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM automation_run_events
			WHERE run_id = $1 AND to_status = 'timed_out'`, id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("run %s has %d timed_out transitions (%v)", id, n, err)
		}
	}
}
