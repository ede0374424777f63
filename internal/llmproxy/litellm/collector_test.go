package litellm_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm/litellmfake"
	litellmproducer "github.com/proliferate/proliferate/producers/litellm"
	"github.com/proliferate/proliferate/schemas"
)

func spendOf(t *testing.T, ev *schemas.Event) *schemas.LLMSpend {
	t.Helper()
	p, ok := ev.Payload.(*schemas.LLMSpend)
	if !ok {
		t.Fatalf("payload %T", ev.Payload)
	}
	return p
}

func TestCollectorProducesSpendOfTwoOrgsOnceAndAdvancesCursors(t *testing.T) {
	e := newCollectorEnv(t, nil)
	a, b := newOrg(t, e.pool, billing.StateActive, 1000), newOrg(t, e.pool, billing.StateTrial, 1000)
	sa := newSession(t, e.pool, a, "running")
	now := time.Now().UTC()
	t1 := now.Add(-2 * time.Minute).Truncate(time.Millisecond)
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-a1", TeamID: a, User: sa, KeyAlias: sa, Spend: 0.0123456, Model: "claude-sonnet-4-5",
		ModelGroup: "anthropic/claude-sonnet-4-5", Provider: "anthropic", PromptTokens: 1000, CompletionTokens: 200, CacheReadTokens: 300, CacheWriteTokens: 40,
		StartTime: t1, EndTime: t1.Add(1500 * time.Millisecond)})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-a2", TeamID: a, User: sa, Spend: 0.5, Model: "claude-sonnet-4-5", PromptTokens: 10, CompletionTokens: 5, StartTime: t1.Add(time.Second)})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-b1", TeamID: b, User: "sess-b", Spend: 1.25, Model: "claude-opus-4-6", PromptTokens: 7, CompletionTokens: 3, StartTime: t1})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-other", TeamID: "not-an-org", Spend: 9, StartTime: t1})

	st := e.cycle(t)
	if st.Produced != 3 || st.Failed != 0 {
		t.Fatalf("cycle stats %+v, want 3 produced", st)
	}
	evs, keys := e.read(t, 3)
	byID := map[string]*schemas.LLMSpend{}
	for i, ev := range evs {
		p := spendOf(t, ev)
		byID[p.RequestID] = p
		if keys[i] != ev.OrgID {
			t.Fatalf("record key %q, want the org id %q", keys[i], ev.OrgID)
		}
		if p.Source != litellmproducer.SourceLiteLLM {
			t.Fatalf("source %q", p.Source)
		}
	}
	a1 := byID["req-a1"]
	if a1 == nil || byID["req-a2"] == nil || byID["req-b1"] == nil {
		t.Fatalf("events %v", byID)
	}
	if evs[0].OrgID == "" || a1.SessionID == nil || *a1.SessionID != sa || a1.Model != "claude-sonnet-4-5" ||
		a1.ModelGroup == nil || *a1.ModelGroup != "anthropic/claude-sonnet-4-5" || a1.Provider == nil || *a1.Provider != "anthropic" ||
		a1.InputTokens != 1000 || a1.OutputTokens != 200 || a1.TotalTokens != 1200 || a1.CacheReadTokens != 300 || a1.CacheWriteTokens != 40 ||
		a1.CostUSDMicros != 12346 || !a1.StartedAt.Equal(t1) || !a1.EndedAt.Equal(t1.Add(1500*time.Millisecond)) {
		t.Fatalf("req-a1 event %+v", a1)
	}
	if byID["req-b1"].CostUSDMicros != 1_250_000 || *byID["req-b1"].SessionID != "sess-b" {
		t.Fatalf("req-b1 event %+v", byID["req-b1"])
	}
	for _, ev := range evs {
		if p := spendOf(t, ev); (p.RequestID == "req-b1") != (ev.OrgID == b) {
			t.Fatalf("event %s under org %s", p.RequestID, ev.OrgID)
		}
	}

	ca := readCursor(t, e.pool, a)
	if !ca.Exists || !ca.At.Equal(t1.Add(time.Second)) || ca.RequestID == nil || *ca.RequestID != "req-a2" || ca.Processed != 2 {
		t.Fatalf("cursor of org a: %+v", ca)
	}
	if cb := readCursor(t, e.pool, b); !cb.Exists || *cb.RequestID != "req-b1" || cb.Processed != 1 {
		t.Fatalf("cursor of org b: %+v", cb)
	}

	// Nothing new: nothing produced, cursors unchanged.
	if st := e.cycle(t); st.Produced != 0 {
		t.Fatalf("second cycle produced %d", st.Produced)
	}
	if n := e.topicCount(t); n != 3 {
		t.Fatalf("%d records on llm.spend, want 3", n)
	}
	if c := readCursor(t, e.pool, a); !c.At.Equal(ca.At) || c.Processed != 2 {
		t.Fatalf("cursor moved without new logs: %+v", c)
	}
}

func TestCollectorEqualStartTimesAreNeitherLostNorDuplicated(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-b", TeamID: org, Spend: 0.01, Model: "m", StartTime: at})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-d", TeamID: org, Spend: 0.01, Model: "m", StartTime: at})
	if st := e.cycle(t); st.Produced != 2 {
		t.Fatalf("first cycle produced %d, want 2", st.Produced)
	}
	if c := readCursor(t, e.pool, org); *c.RequestID != "req-d" || !c.At.Equal(at) {
		t.Fatalf("cursor %+v, want (%s, req-d)", c, at)
	}
	// Two more logs with the same start time show up: one sorting after
	// the cursor's request id, one before it (written late).
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-e", TeamID: org, Spend: 0.01, Model: "m", StartTime: at})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-a", TeamID: org, Spend: 0.01, Model: "m", StartTime: at})
	if st := e.cycle(t); st.Produced != 2 {
		t.Fatalf("second cycle produced %d, want 2 (req-a, req-e)", st.Produced)
	}
	if st := e.cycle(t); st.Produced != 0 {
		t.Fatalf("third cycle produced %d", st.Produced)
	}
	evs, _ := e.read(t, 4)
	seen := map[string]int{}
	for _, ev := range evs {
		seen[spendOf(t, ev).RequestID]++
	}
	for _, id := range []string{"req-a", "req-b", "req-d", "req-e"} {
		if seen[id] != 1 {
			t.Fatalf("request %s produced %d times (%v)", id, seen[id], seen)
		}
	}
	if n := e.topicCount(t); n != 4 {
		t.Fatalf("%d records on the topic, want 4", n)
	}
	if c := readCursor(t, e.pool, org); *c.RequestID != "req-e" || c.Processed != 4 {
		t.Fatalf("cursor %+v", c)
	}
}

func TestCollectorPicksUpLogsWrittenLateBeforeTheCursor(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	now := time.Now().UTC()
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-new", TeamID: org, Spend: 0.02, Model: "m", StartTime: now.Add(-10 * time.Second)})
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("produced %d", st.Produced)
	}
	// A long streamed request started 90 s ago; LiteLLM writes its log now.
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "req-long", TeamID: org, Spend: 0.30, Model: "m", StartTime: now.Add(-90 * time.Second)})
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("late log: produced %d, want 1", st.Produced)
	}
	evs, _ := e.read(t, 2)
	if p := spendOf(t, evs[1]); p.RequestID != "req-long" {
		t.Fatalf("second event %s", p.RequestID)
	}
	if c := readCursor(t, e.pool, org); *c.RequestID != "req-new" {
		t.Fatalf("a late log moved the cursor back: %+v", c)
	}
	if st := e.cycle(t); st.Produced != 0 {
		t.Fatalf("third cycle produced %d", st.Produced)
	}
}

func TestCollectorOneOrgsFailureLeavesOthersAndCatchesUp(t *testing.T) {
	e := newCollectorEnv(t, nil)
	bad, good := newOrg(t, e.pool, billing.StateActive, 1000), newOrg(t, e.pool, billing.StateGrace, 1000)
	at := time.Now().UTC().Add(-time.Minute)
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "bad-1", TeamID: bad, Spend: 0.1, Model: "m", StartTime: at})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "good-1", TeamID: good, Spend: 0.2, Model: "m", StartTime: at})
	e.fake.FailTeam("/spend/logs/v2", bad, http.StatusInternalServerError)

	st := e.cycle(t)
	if st.Produced != 1 || st.Failed != 1 {
		t.Fatalf("stats %+v, want 1 produced and 1 failed org", st)
	}
	evs, _ := e.read(t, 1)
	if p := spendOf(t, evs[0]); p.RequestID != "good-1" {
		t.Fatalf("produced %s", p.RequestID)
	}
	if c := readCursor(t, e.pool, bad); c.Exists {
		t.Fatalf("failing org's cursor moved: %+v", c)
	}
	if !strings.Contains(e.logs.String(), bad) || strings.Contains(e.logs.String(), masterKey) {
		t.Fatalf("failure log:\n%s", e.logs.String())
	}

	e.fake.ClearFailures()
	if st := e.cycle(t); st.Produced != 1 || st.Failed != 0 {
		t.Fatalf("catch-up stats %+v", st)
	}
	evs, _ = e.read(t, 1)
	if p := spendOf(t, evs[0]); p.RequestID != "bad-1" || evs[0].OrgID != bad {
		t.Fatalf("caught up %s for %s", p.RequestID, evs[0].OrgID)
	}
	if c := readCursor(t, e.pool, bad); !c.Exists || *c.RequestID != "bad-1" {
		t.Fatalf("cursor after catch-up %+v", c)
	}
}

func TestCollectorFirstRunLooksBackFiveMinutes(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	now := time.Now().UTC()
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "too-old", TeamID: org, Spend: 0.1, Model: "m", StartTime: now.Add(-6 * time.Minute)})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "recent", TeamID: org, Spend: 0.1, Model: "m", StartTime: now.Add(-4 * time.Minute)})
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("produced %d, want 1", st.Produced)
	}
	evs, _ := e.read(t, 1)
	if p := spendOf(t, evs[0]); p.RequestID != "recent" {
		t.Fatalf("produced %s", p.RequestID)
	}
	var startDate string
	for _, c := range e.fake.Calls("/spend/logs/v2") {
		if c.Query.Get("team_id") == org {
			startDate = c.Query.Get("start_date")
		}
	}
	start, err := time.Parse("2006-01-02 15:04:05", startDate)
	if err != nil || start.Before(now.Add(-5*time.Minute-2*time.Second)) || start.After(now.Add(-5*time.Minute+2*time.Second)) {
		t.Fatalf("first fetch started at %s (%v), want about now-5m", start, err)
	}
}

func TestCollectorQuietNewOrgAnchorsItsWindow(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	e.cycle(t)
	c := readCursor(t, e.pool, org)
	if !c.Exists || c.RequestID != nil || time.Since(c.At) < 5*time.Minute-5*time.Second {
		t.Fatalf("cursor of a quiet org %+v, want anchored at the lookback start", c)
	}
	// A log from just after the anchor (written long after) is still found.
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "r", TeamID: org, Spend: 0.1, Model: "m", StartTime: c.At.Add(2 * time.Second)})
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("produced %d", st.Produced)
	}
}

func TestCollectorSkipsZeroSpendAndReportsAnomalies(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	at := time.Now().UTC().Add(-time.Minute)
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "free-tokens", TeamID: org, Spend: 0, Model: "unpriced", PromptTokens: 50, CompletionTokens: 5, StartTime: at})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "failed", TeamID: org, Spend: 0, Model: "m", Status: "failure", StartTime: at})
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "paid", TeamID: org, Spend: 0.004, Model: "m", StartTime: at.Add(time.Second)})
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("produced %d, want 1", st.Produced)
	}
	evs, _ := e.read(t, 1)
	if p := spendOf(t, evs[0]); p.RequestID != "paid" || p.CostUSDMicros != 4000 {
		t.Fatalf("event %+v", p)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "request_id=free-tokens") || !strings.Contains(logs, "anomaly=true") || strings.Contains(logs, "request_id=failed") {
		t.Fatalf("anomaly logging:\n%s", logs)
	}
	if st := e.cycle(t); st.Produced != 0 || strings.Count(e.logs.String(), "request_id=free-tokens") != 1 {
		t.Fatalf("second cycle re-examined a seen log: %+v\n%s", st, e.logs.String())
	}
}

func TestCollectorPagesThroughABusyWindow(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	base := time.Now().UTC().Add(-4 * time.Minute)
	const n = 730
	for i := range n {
		e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: fmt.Sprintf("req-%04d", i), TeamID: org, Spend: 0.001, Model: "m",
			StartTime: base.Add(time.Duration(i%120) * time.Second)})
	}
	if st := e.cycle(t); st.Produced != n {
		t.Fatalf("produced %d, want %d", st.Produced, n)
	}
	evs, _ := e.read(t, n)
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[spendOf(t, ev).RequestID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct requests, want %d", len(seen), n)
	}
	if c := readCursor(t, e.pool, org); c.Processed != n {
		t.Fatalf("records_processed %d", c.Processed)
	}
}

func TestCollectorOnlyOneReplicaCollects(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateActive, 1000)
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "r1", TeamID: org, Spend: 0.1, Model: "m", StartTime: time.Now().UTC().Add(-time.Minute)})

	ctx := context.Background()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(0x6c6c6d7370656e64)).Scan(&got); err != nil || !got {
		t.Fatalf("take the lock as another replica: %v %v", got, err)
	}
	st, err := e.coll.Cycle(ctx)
	if err != nil || st.Locked || st.Produced != 0 {
		t.Fatalf("cycle while another replica holds the lock: %+v %v", st, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(0x6c6c6d7370656e64)); err != nil {
		t.Fatal(err)
	}
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("after the other replica let go: %+v", st)
	}
}

func TestCollectorSkipsUnconfiguredOrgsWithBilling(t *testing.T) {
	e := newCollectorEnv(t, nil)
	org := newOrg(t, e.pool, billing.StateUnconfigured, 0)
	exhausted := newOrg(t, e.pool, billing.StateExhausted, 0)
	at := time.Now().UTC().Add(-time.Minute)
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "u", TeamID: org, Spend: 0.1, Model: "m", StartTime: at})
	// In flight when the organization ran out: still billed.
	e.fake.AddSpendLog(litellmfake.SpendLog{RequestID: "x", TeamID: exhausted, Spend: 0.1, Model: "m", StartTime: at})
	if st := e.cycle(t); st.Produced != 1 {
		t.Fatalf("produced %d", st.Produced)
	}
	evs, _ := e.read(t, 1)
	if p := spendOf(t, evs[0]); p.RequestID != "x" {
		t.Fatalf("produced %s", p.RequestID)
	}
	for _, c := range e.fake.Calls("/spend/logs/v2") {
		if c.Query.Get("team_id") == org {
			t.Fatal("an unconfigured organization was collected with billing enabled")
		}
	}
}
