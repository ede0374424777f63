package invocations_test

import (
	"encoding/json"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
)

// A drifted connector invocation stores the hashes and the diff, shows
// them on every read, publishes them (action.invocation v2) and says why
// it waits.
func TestDriftedInvocationRecordsTheReview(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	w.srcs.drifted.Store(true)
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "search",
		Params: json.RawMessage(`{"query":"kafka"}`)})
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.Status != invocations.StatusPending || invocations.PendingReason(inv) != invocations.ReasonDefinitionChanged ||
		inv.DefinitionHash == nil || inv.ReviewedHash == nil || *inv.ReviewedHash != "reviewed-hash" ||
		inv.DefinitionDiff == nil || inv.DefinitionDiff.ReviewedKnown || len(inv.DefinitionDiff.Changes) == 0 {
		t.Fatalf("invocation = %+v", inv)
	}
	got, err := w.svc.Get(ctx, sess.ID, inv.ID)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got.DefinitionDiff)
	b, _ := json.Marshal(inv.DefinitionDiff)
	if string(a) != string(b) || *got.DefinitionHash != *inv.DefinitionHash {
		t.Fatalf("read back %s, stored %s", a, b)
	}
	evs := w.events(t, inv.ID)
	if len(evs) != 1 || !evs[0].Drifted || evs[0].DefinitionHash == nil || *evs[0].DefinitionHash != *inv.DefinitionHash ||
		evs[0].ReviewedHash == nil || evs[0].DefinitionDiffJSON == nil || *evs[0].DefinitionDiffJSON != string(b) {
		t.Fatalf("events = %+v", evs)
	}
	var d actions.DefinitionDiff
	if err := json.Unmarshal([]byte(*evs[0].DefinitionDiffJSON), &d); err != nil {
		t.Fatal(err)
	}

	// Not drifted: it waits by policy (when it waits) and carries no diff.
	w.srcs.drifted.Store(false)
	out, err = w.svc.Invoke(ctx, sess, createIssue("x"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Invocation.DefinitionDiff != nil || out.Invocation.DefinitionHash != nil || out.Invocation.Drifted ||
		invocations.PendingReason(out.Invocation) != invocations.ReasonPolicy {
		t.Fatalf("provider invocation = %+v", out.Invocation)
	}
}
