package runs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// runningRun queues a run and moves it to running with a session, as the
// executor does.
func runningRun(t *testing.T, key string) (runs.Source, *schemas.Codec, string) {
	t.Helper()
	src, codec := setup(t)
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var id string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, codec, src, event(key))
		if err != nil {
			return err
		}
		id = out.RunID
		r, err := runs.Lock(ctx, tx, "", id)
		if err != nil {
			return err
		}
		for _, to := range []string{runs.StatusEnriching, runs.StatusReady} {
			if r, err = runs.Apply(ctx, tx, codec, r, runs.Move{From: []string{r.Status}, To: to}); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE automation_runs SET session_id = '00000000-0000-0000-0000-00000000abcd' WHERE id = $1`, id); err != nil {
			return err
		}
		_, err = runs.Apply(ctx, tx, codec, r, runs.Move{From: []string{runs.StatusReady}, To: runs.StatusRunning})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return src, codec, id
}

func complete(t *testing.T, codec *schemas.Codec, org, session string, c runs.Completion) (runs.CompleteResult, error) {
	t.Helper()
	var res runs.CompleteResult
	err := pgx.BeginFunc(context.Background(), testenv.Postgres(t), func(tx pgx.Tx) error {
		var err error
		res, err = runs.Complete(context.Background(), tx, codec, org, session, c)
		return err
	})
	return res, err
}

// The same completion twice: the second is a replay that writes nothing.
// Another completion id afterwards is refused, and the outcome stands.
func TestCompletionIdempotencyAndConflict(t *testing.T) {
	src, codec, id := runningRun(t, "complete-1")
	first := runs.Completion{RunID: id, CompletionID: "cmp-1", Outcome: "needs_human", SummaryMarkdown: "Please review"}
	res, err := complete(t, codec, src.OrgID, "", first)
	if err != nil || res.Replayed || res.Run.Status != runs.StatusNeedsHuman {
		t.Fatalf("%+v %v", res, err)
	}
	rows := func() int {
		return count(t, `SELECT (SELECT count(*) FROM automation_run_events WHERE run_id = $1) + (SELECT count(*) FROM outbox)`, id)
	}
	before := rows()
	res, err = complete(t, codec, src.OrgID, "", first)
	if err != nil || !res.Replayed || res.Run.Status != runs.StatusNeedsHuman {
		t.Fatalf("replay: %+v %v", res, err)
	}
	// Same id with another outcome is still the first completion's replay.
	res, err = complete(t, codec, src.OrgID, "", runs.Completion{RunID: id, CompletionID: "cmp-1", Outcome: "succeeded"})
	if err != nil || !res.Replayed || res.Run.Status != runs.StatusNeedsHuman {
		t.Fatalf("replay with another outcome: %+v %v", res, err)
	}
	if _, err := complete(t, codec, src.OrgID, "", runs.Completion{RunID: id, CompletionID: "cmp-2", Outcome: "succeeded"}); !errors.Is(err, runs.ErrAlreadyCompleted) {
		t.Fatalf("conflicting completion: %v", err)
	}
	if after := rows(); after != before {
		t.Fatalf("replays and conflicts wrote %d rows", after-before)
	}
	if st := count(t, `SELECT count(*) FROM trigger_events te JOIN automation_runs r ON r.trigger_event_id = te.id
		WHERE r.id = $1 AND te.status = 'completed'`, id); st != 1 {
		t.Fatal("the trigger event was not completed")
	}
}

// Completions that must change nothing: invalid, another org, another
// session, a run not running yet.
func TestCompletionRefusals(t *testing.T) {
	src, codec, id := runningRun(t, "complete-2")
	other := runstest.Org(t, testenv.Postgres(t))
	cases := []struct {
		name         string
		org, session string
		c            runs.Completion
		want         error
	}{
		{"bad outcome", src.OrgID, "", runs.Completion{RunID: id, CompletionID: "x", Outcome: "done"}, runs.ErrInvalid},
		{"no completion id", src.OrgID, "", runs.Completion{RunID: id, Outcome: "succeeded"}, runs.ErrInvalid},
		{"huge summary", src.OrgID, "", runs.Completion{RunID: id, CompletionID: "x", Outcome: "succeeded", SummaryMarkdown: strings.Repeat("a", runs.MaxSummaryLen+1)}, runs.ErrInvalid},
		{"other org", other, "", runs.Completion{RunID: id, CompletionID: "x", Outcome: "succeeded"}, runs.ErrNotFound},
		{"other session", "", "00000000-0000-0000-0000-00000000ffff", runs.Completion{RunID: id, CompletionID: "x", Outcome: "succeeded"}, runs.ErrNotFound},
		{"unknown run", src.OrgID, "", runs.Completion{RunID: "00000000-0000-0000-0000-000000000001", CompletionID: "x", Outcome: "succeeded"}, runs.ErrNotFound},
	}
	for _, tc := range cases {
		if _, err := complete(t, codec, tc.org, tc.session, tc.c); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if r, _ := runs.Get(context.Background(), testenv.Postgres(t), "", id); r.Status != runs.StatusRunning || r.CompletionID != nil {
		t.Fatalf("a refused completion changed the run: %+v", r)
	}
	// The run's own session may complete it.
	if res, err := complete(t, codec, "", "00000000-0000-0000-0000-00000000abcd",
		runs.Completion{RunID: id, CompletionID: "x", Outcome: "failed"}); err != nil || res.Run.Status != runs.StatusFailed {
		t.Fatalf("own session: %+v %v", res, err)
	}

	// Queued runs cannot be completed.
	_, _, q := func() (runs.Source, *schemas.Codec, string) {
		var qid string
		err := pgx.BeginFunc(context.Background(), testenv.Postgres(t), func(tx pgx.Tx) error {
			out, err := runs.Enqueue(context.Background(), tx, codec, src, event("complete-queued"))
			qid = out.RunID
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return src, codec, qid
	}()
	if _, err := complete(t, codec, src.OrgID, "", runs.Completion{RunID: q, CompletionID: "y", Outcome: "succeeded"}); !errors.Is(err, runs.ErrNotRunning) {
		t.Fatalf("queued run: %v", err)
	}
}
