package invocations_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions/invocations"
)

// approveOnce approves id as the world's admin.
func approveOnce(w *world, id string) (invocations.Outcome, error) {
	return w.svc.Approve(ctx, w.approver("admin"), id, invocations.Approval{Mode: invocations.ApproveOnce})
}

// A decision after the pending TTL has one answer, ErrExpired (410),
// whether the approver is the first to notice (the decision expires the
// row) or the sweeper already marked it expired; either way nothing runs
// and the expiry is written and announced once. A decision on an
// invocation already approved or denied stays ErrConflict (409).
func TestLateDecisionIsExpiredBeforeAndAfterTheSweep(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	newPending := func() string {
		t.Helper()
		out, err := w.svc.Invoke(ctx, sess, createIssue("late"))
		if err != nil || out.Invocation.Status != invocations.StatusPending {
			t.Fatalf("invoke = %+v, %v", out.Invocation, err)
		}
		return out.Invocation.ID
	}
	byApprover, bySweeper := newPending(), newPending()
	w.clock.Advance(invocations.InteractiveTTL + time.Second)

	// Before the sweep: the approval itself expires the row.
	res, err := approveOnce(w, byApprover)
	if !errors.Is(err, invocations.ErrExpired) || res.Invocation.Status != invocations.StatusExpired {
		t.Fatalf("approve before the sweep = %+v, %v", res.Invocation, err)
	}
	// After the sweep: the same answer, for approvals and denials alike.
	if n, err := w.svc.ExpirePending(ctx); err != nil || n != 1 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	for _, id := range []string{byApprover, bySweeper} {
		res, err := approveOnce(w, id)
		if !errors.Is(err, invocations.ErrExpired) || res.Invocation.ID != id || res.Invocation.Status != invocations.StatusExpired {
			t.Fatalf("approve %s after the sweep = %+v, %v", id, res.Invocation, err)
		}
		inv, err := w.svc.Deny(ctx, w.approver("admin"), id)
		if !errors.Is(err, invocations.ErrExpired) || inv.Status != invocations.StatusExpired {
			t.Fatalf("deny %s after the sweep = %+v, %v", id, inv, err)
		}
		if tr := transitions(w.events(t, id)); tr != ">pending pending>expired" {
			t.Fatalf("events of %s = %s", id, tr)
		}
		if got := w.notes.statuses(id); !slices.Equal(got, []string{"pending", "expired"}) {
			t.Fatalf("notifications of %s = %v", id, got)
		}
	}
	if w.fake.MutationCount() != 0 {
		t.Fatal("an expired invocation ran")
	}

	// Already decided: 409, not 410, even past the TTL.
	approved, denied := newPending(), newPending()
	if _, err := approveOnce(w, approved); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Deny(ctx, w.approver("admin"), denied); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(invocations.InteractiveTTL + time.Second)
	for _, id := range []string{approved, denied} {
		if _, err := approveOnce(w, id); !errors.Is(err, invocations.ErrConflict) {
			t.Fatalf("approve decided %s = %v", id, err)
		}
		if _, err := w.svc.Deny(ctx, w.approver("admin"), id); !errors.Is(err, invocations.ErrConflict) {
			t.Fatalf("deny decided %s = %v", id, err)
		}
	}
}

// An approved invocation whose execution fails (Linear answers 503) is
// not an error of the approval: Approve returns the invocation failed,
// with the remote's error (redacted), recorded on the row, published and
// announced; the agent polling the invocation sees the same failure.
func TestApprovedExecutionFailureIsRecorded(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	out, err := w.svc.Invoke(ctx, sess, createIssue("doomed"))
	if err != nil || out.Invocation.Status != invocations.StatusPending {
		t.Fatalf("invoke = %+v, %v", out.Invocation, err)
	}
	id := out.Invocation.ID
	w.fake.FailNext(1, http.StatusServiceUnavailable)
	res, err := approveOnce(w, id)
	if err != nil {
		t.Fatalf("approve = %v", err)
	}
	inv := res.Invocation
	if inv.Status != invocations.StatusFailed || inv.Error == nil || !strings.Contains(*inv.Error, "linear") ||
		inv.ApprovedBy == nil || *inv.ApprovedBy != w.admin || inv.CompletedAt == nil || len(res.Result) != 0 {
		t.Fatalf("approve outcome = %+v (error %v)", inv, inv.Error)
	}
	if strings.Contains(*inv.Error, linearToken) {
		t.Fatal("the error carries the credential")
	}
	if len(w.fake.Issues()) != 0 {
		t.Fatal("an issue was created")
	}
	polled, err := w.svc.Get(ctx, sess.ID, id)
	if err != nil || polled.Status != invocations.StatusFailed || polled.Error == nil || *polled.Error != *inv.Error {
		t.Fatalf("the agent polls %+v, %v", polled, err)
	}
	if tr := transitions(w.events(t, id)); tr != ">pending pending>approved approved>executing executing>failed" {
		t.Fatalf("events = %s", tr)
	}
	evs := w.events(t, id)
	if last := evs[len(evs)-1]; last.Error == nil || *last.Error != *inv.Error {
		t.Fatalf("failed event = %+v", last)
	}
	if got := w.notes.statuses(id); !slices.Contains(got, invocations.StatusFailed) {
		t.Fatalf("notifications = %v", got)
	}
	// It was decided: a second approval is 409 and runs nothing.
	if _, err := approveOnce(w, id); !errors.Is(err, invocations.ErrConflict) {
		t.Fatalf("second approve = %v", err)
	}
}
