package runs_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
)

// An organization scheduled for deletion starts no runs: its trigger
// events are recorded as skipped (org_pending_deletion), once; after a
// restore events queue runs again.
func TestEnqueueSkipsOrgPendingDeletion(t *testing.T) {
	src, codec := setup(t)
	pool := testenv.Postgres(t)
	ctx := context.Background()
	enqueue := func(key string) runs.Outcome {
		t.Helper()
		var out runs.Outcome
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			out, err = runs.Enqueue(ctx, tx, codec, src, event(key))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if _, err := pool.Exec(ctx, `UPDATE organizations SET deletion_scheduled_at = now(), delete_after = now() + interval '7 days' WHERE id = $1`, src.OrgID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if out := enqueue("pending-1"); out.RunID != "" {
			t.Fatalf("a run was queued: %+v", out)
		}
	}
	if n := count(t, "SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND status = 'skipped' AND skip_reason = $2", src.TriggerID, runs.SkipOrgPendingDeletion); n != 1 {
		t.Fatalf("%d skipped events", n)
	}
	if n := count(t, "SELECT count(*) FROM automation_runs WHERE trigger_id = $1", src.TriggerID); n != 0 {
		t.Fatalf("%d runs", n)
	}
	if _, err := pool.Exec(ctx, `UPDATE organizations SET deletion_scheduled_at = NULL, delete_after = NULL WHERE id = $1`, src.OrgID); err != nil {
		t.Fatal(err)
	}
	if out := enqueue("restored-1"); out.RunID == "" {
		t.Fatalf("no run after the restore: %+v", out)
	}
}
