package toolmaterializer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/toolmaterializer"
	"github.com/proliferate/proliferate/internal/analytics"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	*consumerstest.World
	t    *testing.T
	pool *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	w := consumerstest.New(t, consumerstest.Options{Partitions: 4}, toolmaterializer.Group)
	return &env{World: w, t: t, pool: w.Pool()}
}

// run starts the group's runner under group id id until the test ends.
func (e *env) run(id string) (stop func()) {
	return e.StartBatch(toolmaterializer.Group, toolmaterializer.BatchHandler(toolmaterializer.Deps{Pool: e.pool}), consumerstest.FastRetry(id))
}

func (e *env) caughtUp(id string) {
	e.WaitCaughtUp(id, toolmaterializer.Group.Inputs...)
}

var day1 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func at(ev *schemas.Event, t time.Time) *schemas.Event {
	ev.OccurredAt = t.UTC().Truncate(time.Millisecond)
	return ev
}

func (e *env) toolCall(org, sess, call, tool, status, by string, dur int64, t time.Time) *kgo.Record {
	p := &schemas.ToolCall{SessionID: sess, ToolCallID: call, ToolName: tool, Status: status, ExecutedBy: by}
	if status != schemas.ToolCallStarted {
		p.DurationMs = &dur
	}
	return e.Record(topics.ToolsCalls, sess, at(schemas.New(org, p), t))
}

func (e *env) transcriptCall(org, sess, call, tool, status string, dur int64, t time.Time) *kgo.Record {
	p := &schemas.SessionTranscript{SessionID: sess, Kind: schemas.TranscriptToolCallKind,
		Tool: &schemas.TranscriptToolCall{ToolCallID: call, Name: tool, Status: status, InputJSON: `{}`, Output: "secret output", DurationMs: dur}}
	return e.Record(topics.SessionsTranscript, sess, at(schemas.New(org, p), t))
}

func (e *env) sessionEvent(org, sess string, p *schemas.SessionEvent, t time.Time) *kgo.Record {
	p.SessionID = sess
	return e.Record(topics.SessionsEvents, sess, at(schemas.New(org, p), t))
}

func (e *env) usage(org, sess, key string, credits int64, t time.Time) *kgo.Record {
	p := &schemas.BillingUsage{IdempotencyKey: key, Kind: schemas.UsageLLM, Unit: schemas.UnitUSD, QuantityMicros: credits,
		CreditsMicros: credits, SessionID: &sess, PeriodFrom: t, PeriodTo: t}
	return e.Record(topics.BillingUsage, org, at(schemas.New(org, p), t))
}

func (e *env) spend(org string, sess *string, request string, in, out, cacheRead, cacheWrite int64, t time.Time) *kgo.Record {
	p := &schemas.LLMSpend{RequestID: request, SessionID: sess, Model: "claude-sonnet", InputTokens: in, OutputTokens: out,
		CacheReadTokens: cacheRead, CacheWriteTokens: cacheWrite, TotalTokens: in + out + cacheRead + cacheWrite,
		StartedAt: t, EndedAt: t, Source: "llm-proxy"}
	return e.Record(topics.LLMSpend, org, at(schemas.New(org, p), t))
}

// snapshot is every owned table's rows, sorted (tables are whole: the
// tests of this package run one after the other).
func (e *env) snapshot() string {
	var b strings.Builder
	for _, q := range []string{
		`SELECT session_id, tool_call_id, source, org_id, tool_name, status, coalesce(duration_ms, -1), cached, coalesce(finished_at::text, ''), event_id FROM analytics_tool_calls ORDER BY 1, 2, 3`,
		`SELECT org_id, day::text, tool_name, calls, failures FROM analytics_tool_daily ORDER BY 1, 2, 3`,
		`SELECT org_id, day::text, tool_name, bucket, n FROM analytics_tool_durations ORDER BY 1, 2, 3, 4`,
		`SELECT session_id, org_id, coalesce(automation_id::text, ''), coalesce(user_id::text, '') FROM analytics_sessions ORDER BY 1`,
		`SELECT org_id, day::text, session_id, messages, active_seconds, prs, credits_micros,
			input_tokens, output_tokens, cache_read_tokens, cache_write_tokens FROM analytics_session_usage ORDER BY 1, 2, 3`,
		`SELECT event_id FROM analytics_applied_events ORDER BY 1`,
	} {
		rows, err := e.pool.Query(context.Background(), q)
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				e.t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

func (e *env) truncate() {
	if _, err := e.pool.Exec(context.Background(), `TRUNCATE `+strings.Join(toolmaterializer.Group.Owns, ", ")); err != nil {
		e.t.Fatal(err)
	}
}

// TestRollupsRedeliveryAndReplay: tool calls from tools.calls and the
// transcript (one call on both, counted once by the gateway's report),
// session telemetry and credits materialize into the rollups the API
// reads; records produced again and a second group reading everything
// again change nothing; truncating the tables and replaying the topics
// rebuilds identical rows.
func TestRollupsRedeliveryAndReplay(t *testing.T) {
	e := newEnv(t)
	e.truncate()
	org, other := uuid.NewString(), uuid.NewString()
	s1, s2, s3 := uuid.NewString(), uuid.NewString(), uuid.NewString()
	alice, automation := uuid.NewString(), uuid.NewString()
	day2 := day1.Add(24 * time.Hour)
	var recs []*kgo.Record
	// bash: 100 transcript calls of 1..100 ms on day 1, every 10th failed.
	for i := 1; i <= 100; i++ {
		status := "completed"
		if i%10 == 0 {
			status = "error"
		}
		recs = append(recs, e.transcriptCall(org, s1, fmt.Sprintf("bash_%d", i), "bash", status, int64(i), day1.Add(time.Duration(i)*time.Second)))
	}
	// A gateway tool: started, completed after 2000 ms, then a cached replay;
	// the transcript reports the same call with the agent's 2500 ms.
	recs = append(recs,
		e.toolCall(org, s2, "gw_1", "verify", schemas.ToolCallStarted, "gateway", 0, day1),
		e.toolCall(org, s2, "gw_1", "verify", schemas.ToolCallCompleted, "gateway", 2000, day1.Add(2*time.Second)),
		e.transcriptCall(org, s2, "gw_1", "verify", "completed", 2500, day1.Add(3*time.Second)),
		e.toolCall(org, s2, "gw_2", "verify", schemas.ToolCallFailed, "gateway", 40, day2),
	)
	recs = append(recs, e.toolCall(org, s2, "gw_1", "verify", schemas.ToolCallCompleted, "gateway", 0, day2)) // cached replay
	// Another organization's call.
	recs = append(recs, e.transcriptCall(other, s3, "x", "bash", "completed", 5, day1))
	// Sessions: s1 is Alice's, s2 an automation's.
	recs = append(recs,
		e.sessionEvent(org, s1, &schemas.SessionEvent{Kind: schemas.SessionKindCreated, UserID: &alice}, day1),
		e.sessionEvent(org, s1, &schemas.SessionEvent{Kind: schemas.SessionKindTelemetry,
			Telemetry: &schemas.SessionTelemetry{MessagesExchanged: 4, ActiveSeconds: 120, PRURLs: []string{"https://github.com/o/r/pull/1"}}}, day1),
		e.sessionEvent(org, s1, &schemas.SessionEvent{Kind: schemas.SessionKindTelemetry,
			Telemetry: &schemas.SessionTelemetry{MessagesExchanged: 2, ActiveSeconds: 30}}, day2),
		e.sessionEvent(org, s2, &schemas.SessionEvent{Kind: schemas.SessionKindCreated, AutomationID: &automation}, day1),
		e.sessionEvent(org, s2, &schemas.SessionEvent{Kind: schemas.SessionKindTelemetry, AutomationID: &automation,
			Telemetry: &schemas.SessionTelemetry{MessagesExchanged: 1, ActiveSeconds: 10}}, day1),
		e.usage(org, s1, "llm:req-1", 1_500_000, day1),
		e.usage(org, s2, "compute:s2:1", 250_000, day1),
		e.usage(org, s1, "llm:req-1", 1_500_000, day1), // the same key produced again (another event id)
		e.sessionEvent(other, s3, &schemas.SessionEvent{Kind: schemas.SessionKindTelemetry,
			Telemetry: &schemas.SessionTelemetry{MessagesExchanged: 99}}, day1),
	)
	e.Produce(recs...)
	e.Produce(recs[40:60]...) // redelivered
	e.run(toolmaterializer.Group.Name)
	e.caughtUp(toolmaterializer.Group.Name)

	ctx := context.Background()
	tools, err := analytics.Tools(ctx, e.pool, org, day1, day2)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 2 {
		t.Fatalf("tools = %+v", tools)
	}
	bash, verify := tools[0], tools[1]
	if bash.Tool != "bash" || bash.Calls != 100 || bash.Failures != 10 {
		t.Fatalf("bash = %+v", bash)
	}
	// Exact p50 is 50 ms and p95 95 ms; the histogram is within ±7.5 %.
	if bash.P50MS < 46 || bash.P50MS > 54 || bash.P95MS < 88 || bash.P95MS > 102 {
		t.Fatalf("bash percentiles = %d, %d", bash.P50MS, bash.P95MS)
	}
	if verify.Tool != "verify" || verify.Calls != 2 || verify.Failures != 1 || verify.P95MS < 1850 || verify.P95MS > 2150 {
		t.Fatalf("verify = %+v (the gateway's 2000 ms counts, not the transcript's 2500)", verify)
	}
	if day1Only, _ := analytics.Tools(ctx, e.pool, org, day1, day1); len(day1Only) != 2 || day1Only[1].Calls != 1 || day1Only[1].Failures != 0 {
		t.Fatalf("day 1 = %+v", day1Only)
	}
	byPerson, err := analytics.Usage(ctx, e.pool, org, day1, day2, analytics.ByPerson)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]analytics.UsageDay{
		{Day: "2026-03-02", Key: "", Messages: 1, ActiveSeconds: 10, CreditsMicros: 250_000},
		{Day: "2026-03-02", Key: alice, Messages: 4, ActiveSeconds: 120, PRs: 1, CreditsMicros: 1_500_000},
		{Day: "2026-03-03", Key: alice, Messages: 2, ActiveSeconds: 30},
	})
	if fmt.Sprint(byPerson) != want {
		t.Fatalf("usage by person = %+v\nwant %s", byPerson, want)
	}
	byAutomation, _ := analytics.Usage(ctx, e.pool, org, day1, day1, analytics.ByAutomation)
	if len(byAutomation) != 2 || byAutomation[0].Key != "" || byAutomation[1].Key != automation || byAutomation[1].Messages != 1 || byAutomation[1].CreditsMicros != 250_000 {
		t.Fatalf("usage by automation = %+v", byAutomation)
	}
	calls, err := analytics.SessionCalls(ctx, e.pool, org, s2)
	if err != nil || len(calls) != 2 || calls[0].Source != analytics.SourceGateway || *calls[0].DurationMS != 2000 || calls[0].Cached {
		t.Fatalf("session calls = %+v, %v", calls, err)
	}
	first := e.snapshot()

	// Redelivered again, and a second group reading everything again.
	e.Produce(recs...)
	e.run("tool-materializer-again")
	e.caughtUp("tool-materializer-again")
	e.caughtUp(toolmaterializer.Group.Name)
	if again := e.snapshot(); again != first {
		t.Fatalf("redelivery changed rows:\n%s\nwant\n%s", again, first)
	}

	// Replay: the tables rebuilt from the topics are the same.
	e.truncate()
	e.run("tool-materializer-replay")
	e.caughtUp("tool-materializer-replay")
	if replayed := e.snapshot(); replayed != first {
		t.Fatalf("replay rebuilt other rows:\n%s\nwant\n%s", replayed, first)
	}
}

// TestPoisonRecordDeadLettered: records that can never apply (not Avro; a
// tool call whose session id is not a UUID; an unknown executed_by) go to
// the group's dead-letter topic and the partition moves on.
func TestPoisonRecordDeadLettered(t *testing.T) {
	e := newEnv(t)
	e.truncate()
	org, sess := uuid.NewString(), uuid.NewString()
	garbage := &kgo.Record{Topic: topics.ToolsCalls, Key: []byte(sess), Value: []byte("not avro")}
	badID := e.toolCall(org, "not-a-uuid", "c1", "bash", schemas.ToolCallCompleted, "gateway", 5, day1)
	badID.Key = []byte(sess)
	badSource := e.toolCall(org, sess, "c2", "bash", schemas.ToolCallCompleted, "elsewhere", 5, day1)
	good := e.toolCall(org, sess, "c3", "bash", schemas.ToolCallCompleted, "gateway", 5, day1)
	e.Produce(garbage, badID, badSource, good)
	e.run(toolmaterializer.Group.Name)
	e.caughtUp(toolmaterializer.Group.Name)
	tools, err := analytics.Tools(context.Background(), e.pool, org, day1, day1)
	if err != nil || len(tools) != 1 || tools[0].Calls != 1 {
		t.Fatalf("tools = %+v, %v", tools, err)
	}
	dl := e.ReadAll(toolmaterializer.Group.DeadLetter(), 3)
	if len(dl) != 3 || string(dl[0].Value) != "not avro" {
		t.Fatalf("dead letters: %d", len(dl))
	}
}

// TestLLMSpendTokens: llm.spend records add their tokens to their session's
// usage once per request id (a request produced again under another event
// id, and redelivered records, change nothing), in their organization only;
// a second group reading everything again builds the same rows.
func TestLLMSpendTokens(t *testing.T) {
	e := newEnv(t)
	e.truncate()
	org, other := uuid.NewString(), uuid.NewString()
	s1, s2 := uuid.NewString(), uuid.NewString()
	recs := []*kgo.Record{
		e.spend(org, &s1, "req-1", 1000, 200, 5000, 300, day1),
		e.spend(org, &s1, "req-2", 10, 20, 30, 40, day1.Add(time.Hour)),
		e.spend(org, &s1, "req-1", 1000, 200, 5000, 300, day1), // the same request again (another event id)
		e.spend(org, nil, "req-3", 7, 7, 0, 0, day1),           // no session
		e.spend(other, &s2, "req-4", 99, 99, 99, 99, day1),
		e.spend(org, &s1, "req-5", 0, 0, 0, 0, day1), // nothing to count
		e.usage(org, s1, "llm:req-1", 1_500_000, day1),
	}
	e.Produce(recs...)
	e.Produce(recs[:2]...) // redelivered
	e.run(toolmaterializer.Group.Name)
	e.caughtUp(toolmaterializer.Group.Name)

	ctx := context.Background()
	got, err := analytics.SessionTotals(ctx, e.pool, org, s1)
	if err != nil {
		t.Fatal(err)
	}
	want := analytics.SessionUsage{CreditsMicros: 1_500_000, InputTokens: 1010, OutputTokens: 220, CacheReadTokens: 5030, CacheWriteTokens: 340}
	if got != want {
		t.Fatalf("session totals = %+v, want %+v", got, want)
	}
	if leak, err := analytics.SessionTotals(ctx, e.pool, org, s2); err != nil || leak != (analytics.SessionUsage{}) {
		t.Fatalf("another organization's session from org = %+v, %v", leak, err)
	}
	if o, err := analytics.SessionTotals(ctx, e.pool, other, s2); err != nil || o.InputTokens != 99 || o.CacheWriteTokens != 99 {
		t.Fatalf("other org's session = %+v, %v", o, err)
	}
	if none, err := analytics.SessionTotals(ctx, e.pool, org, analytics.NoSession); err != nil || none.InputTokens != 7 {
		t.Fatalf("usage without a session = %+v, %v", none, err)
	}
	first := e.snapshot()
	e.Produce(recs...)
	e.run("tool-materializer-again")
	e.caughtUp("tool-materializer-again")
	e.caughtUp(toolmaterializer.Group.Name)
	if again := e.snapshot(); again != first {
		t.Fatalf("redelivery changed rows:\n%s\nwant\n%s", again, first)
	}
}
