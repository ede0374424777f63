package sideeffects_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sideeffects"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type req struct {
	Channel string `json:"channel"`
	Text    string `json:"text"`
}

func effect(org, id string, r any) sideeffects.Effect {
	return sideeffects.Effect{OrgID: org, EffectID: id, Kind: "slack.chat.postMessage", Provider: "slack", Request: r}
}

// The first Do calls fn and stores its response; later ones return the
// stored response without calling fn.
func TestRecordThenReplay(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org := runstest.Org(t, pool)
	calls := 0
	fn := func(context.Context) (json.RawMessage, error) {
		calls++
		return json.RawMessage(`{"ts":"1700000000.000100","channel":"C1"}`), nil
	}
	e := effect(org, "run:x:notify:succeeded:post", req{"C1", "hello"})
	resp, replayed, err := sideeffects.Do(ctx, pool, e, fn)
	if err != nil || replayed || calls != 1 {
		t.Fatalf("first: replayed=%v calls=%d err=%v", replayed, calls, err)
	}
	for range 3 {
		again, replayed, err := sideeffects.Do(ctx, pool, e, fn)
		if err != nil || !replayed || calls != 1 {
			t.Fatalf("replay: replayed=%v calls=%d err=%v", replayed, calls, err)
		}
		var a, b map[string]string
		_ = json.Unmarshal(resp, &a)
		_ = json.Unmarshal(again, &b)
		if a["ts"] != b["ts"] || b["ts"] != "1700000000.000100" {
			t.Fatalf("replayed %s, first %s", again, resp)
		}
	}
	var n int
	var runID *string
	var kind, provider, hash string
	if err := pool.QueryRow(ctx, `SELECT count(*) OVER (), run_id::text, kind, provider, request_hash FROM automation_side_effects
		WHERE org_id = $1`, org).Scan(&n, &runID, &kind, &provider, &hash); err != nil {
		t.Fatal(err)
	}
	want, _ := sideeffects.Hash(req{"C1", "hello"})
	if n != 1 || runID != nil || kind != "slack.chat.postMessage" || provider != "slack" || hash != want {
		t.Fatalf("row: n=%d run=%v kind=%s provider=%s hash=%s", n, runID, kind, provider, hash)
	}
}

// A failed call records nothing, so the next attempt calls again.
func TestFailureIsNotRecorded(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org := runstest.Org(t, pool)
	boom := errors.New("slack 500")
	calls := 0
	fn := func(context.Context) (json.RawMessage, error) {
		calls++
		if calls == 1 {
			return nil, boom
		}
		return json.RawMessage(`{"ok":true}`), nil
	}
	e := effect(org, "k", req{"C1", "x"})
	if _, _, err := sideeffects.Do(ctx, pool, e, fn); !errors.Is(err, boom) {
		t.Fatalf("want the call's error, got %v", err)
	}
	if _, replayed, err := sideeffects.Do(ctx, pool, e, fn); err != nil || replayed || calls != 2 {
		t.Fatalf("retry: replayed=%v calls=%d err=%v", replayed, calls, err)
	}
	if _, replayed, _ := sideeffects.Do(ctx, pool, e, fn); !replayed || calls != 2 {
		t.Fatalf("third: replayed=%v calls=%d", replayed, calls)
	}
}

// The same key with another request is an error and makes no call; the same
// key in another org is independent.
func TestKeyReusedAndOrgScope(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org, other := runstest.Org(t, pool), runstest.Org(t, pool)
	calls := 0
	fn := func(context.Context) (json.RawMessage, error) { calls++; return json.RawMessage(`{}`), nil }
	if _, _, err := sideeffects.Do(ctx, pool, effect(org, "k", req{"C1", "a"}), fn); err != nil {
		t.Fatal(err)
	}
	_, _, err := sideeffects.Do(ctx, pool, effect(org, "k", req{"C2", "a"}), fn)
	if !errors.Is(err, sideeffects.ErrKeyReused) || calls != 1 {
		t.Fatalf("want ErrKeyReused without a call, got %v (calls %d)", err, calls)
	}
	if _, replayed, err := sideeffects.Do(ctx, pool, effect(other, "k", req{"C2", "a"}), fn); err != nil || replayed || calls != 2 {
		t.Fatalf("other org: replayed=%v calls=%d err=%v", replayed, calls, err)
	}
}

// Concurrent callers on one key all get the one stored response; one row.
func TestConcurrentCallersShareOneRow(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org := runstest.Org(t, pool)
	var calls atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]string, 16)
	for i := range results {
		wg.Go(func() {
			<-start
			resp, _, err := sideeffects.Do(ctx, pool, effect(org, "race", req{"C1", "x"}), func(context.Context) (json.RawMessage, error) {
				n := calls.Add(1)
				return json.RawMessage(`{"n":` + string(rune('0'+n%10)) + `}`), nil
			})
			if err != nil {
				t.Error(err)
			}
			results[i] = string(resp)
		})
	}
	close(start)
	wg.Wait()
	for _, r := range results[1:] {
		if r != results[0] {
			t.Fatalf("callers saw different responses: %v", results)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM automation_side_effects WHERE org_id = $1`, org).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows %d, err %v", n, err)
	}
}

// RunID is stored; a nil response is stored as NULL and replayed as nil.
func TestRunIDAndEmptyResponse(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	org := runstest.Org(t, pool)
	auto := runstest.Automation(t, pool, org)
	trig := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto})
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	var out runs.Outcome
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		out, err = runs.Enqueue(ctx, tx, codec, runs.Source{OrgID: org, TriggerID: trig, AutomationID: auto, TriggerType: "webhook"},
			runs.Event{Provider: "github", EventType: "x", OccurredAt: time.Now(), DedupKey: uuid.NewString(), Title: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e := effect(org, "run:"+out.RunID+":noop", map[string]any{"b": 1, "a": []int{1, 2}})
	e.RunID = out.RunID
	fn := func(context.Context) (json.RawMessage, error) { return nil, nil }
	if _, _, err := sideeffects.Do(ctx, pool, e, fn); err != nil {
		t.Fatal(err)
	}
	resp, replayed, err := sideeffects.Do(ctx, pool, e, fn)
	if err != nil || !replayed || resp != nil {
		t.Fatalf("replay: %s %v %v", resp, replayed, err)
	}
	var runID string
	var isNull bool
	if err := pool.QueryRow(ctx, `SELECT run_id::text, response_json IS NULL FROM automation_side_effects WHERE org_id = $1`, org).Scan(&runID, &isNull); err != nil {
		t.Fatal(err)
	}
	if runID != out.RunID || !isNull {
		t.Fatalf("run %s null %v", runID, isNull)
	}
}

// The hash depends on the JSON value, not on key order or Go types.
func TestHashIsCanonical(t *testing.T) {
	a, _ := sideeffects.Hash(map[string]any{"text": "hi", "channel": "C1", "n": 1.0})
	b, _ := sideeffects.Hash(struct {
		N       int    `json:"n"`
		Channel string `json:"channel"`
		Text    string `json:"text"`
	}{1, "C1", "hi"})
	c, _ := sideeffects.Hash(map[string]any{"text": "hi", "channel": "C2", "n": 1})
	if a != b || a == c || len(a) != 64 {
		t.Fatalf("a=%s b=%s c=%s", a, b, c)
	}
}
