package meter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/outbox/outboxtest"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/meter"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// provider is a sandbox.Provider whose liveness the test controls; only
// Alive is used by the meter.
type provider struct {
	sandbox.Provider
	mu    sync.Mutex
	state map[string]error // nil = alive; errDead = dead; other = check fails
}

var errDead = errors.New("dead")

func (p *provider) Name() string { return "local" }

func (p *provider) set(sandboxID string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state[sandboxID] = err
}

func (p *provider) Alive(_ context.Context, sandboxID string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err, ok := p.state[sandboxID]
	switch {
	case !ok || err == nil:
		return true, nil
	case errors.Is(err, errDead):
		return false, nil
	default:
		return false, err
	}
}

// clock is a controllable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

type env struct {
	t     *testing.T
	pool  *pgxpool.Pool
	codec *schemas.Codec
	store *sessions.Store
	prov  *provider
	clock *clock
	meter *meter.Meter
	org   string
	keys  *llmproxy.Keys
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	// Earlier tests of this package share the database: their sessions
	// and closed intervals are not this test's business.
	for _, q := range []string{`UPDATE sessions SET status = 'stopped' WHERE status = 'running'`, `DELETE FROM billing_meter_closures`} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pool: pool, codec: codec, store: &sessions.Store{Pool: pool, Codec: codec},
		prov: &provider{state: map[string]error{}}, clock: &clock{t: time.Now()}, org: runstest.Org(t, pool)}
	if e.keys, err = llmproxy.NewKeys(llmproxy.KeysDeps{Pool: pool, PublicURL: "http://llm.test"}); err != nil {
		t.Fatal(err)
	}
	e.meter = e.newMeter(e.clock.Now, time.Hour)
	return e
}

func (e *env) newMeter(now func() time.Time, interval time.Duration) *meter.Meter {
	e.t.Helper()
	m, err := meter.New(meter.Deps{Pool: e.pool, Codec: e.codec, Provider: e.prov, Sessions: e.store, LLMKeys: e.keys,
		Interval: interval, Now: now})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// running inserts a running session of the env's org on sandboxID.
func (e *env) running(sandboxID string) string {
	return sessionstest.New(e.t, e.pool, e.org, sessionstest.Options{Status: "running", SandboxID: sandboxID})
}

// mark reads the session's metered_through_at (nil when NULL).
func (e *env) mark(id string) *time.Time {
	e.t.Helper()
	var m *time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT metered_through_at FROM sessions WHERE id = $1`, id).Scan(&m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) cycle() meter.Result {
	e.t.Helper()
	res, err := e.meter.Cycle(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if res.Failed > 0 {
		e.t.Fatalf("cycle failed for %d sessions", res.Failed)
	}
	return res
}

type usage struct {
	ev *schemas.Event
	u  *schemas.BillingUsage
}

// usages decodes every billing.usage record the outbox holds for the
// env's org, in order.
func (e *env) usages() []usage {
	e.t.Helper()
	vals := outboxtest.Values(e.t, e.pool, topics.BillingUsage, e.org)
	out := make([]usage, 0, len(vals))
	for _, v := range vals {
		ev, err := e.codec.Decode(v)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, usage{ev: ev, u: ev.Payload.(*schemas.BillingUsage)})
	}
	return out
}

func key(session string, from, to time.Time) string {
	return fmt.Sprintf("compute:%s:%d:%d", session, from.UnixMilli(), to.UnixMilli())
}

func finalKey(session string, from time.Time) string {
	return fmt.Sprintf("compute:%s:%d:final", session, from.UnixMilli())
}

func checkUsage(t *testing.T, got usage, org, session, wantKey string, from time.Time, seconds int64, final bool) {
	t.Helper()
	u := got.u
	if u.IdempotencyKey != wantKey {
		t.Fatalf("key = %s, want %s", u.IdempotencyKey, wantKey)
	}
	if got.ev.OrgID != org || u.SessionID == nil || *u.SessionID != session {
		t.Fatalf("usage %s: org %s session %v, want %s %s", wantKey, got.ev.OrgID, u.SessionID, org, session)
	}
	if u.Kind != schemas.UsageCompute || u.Unit != schemas.UnitMinute || u.Final != final {
		t.Fatalf("usage %s: kind %s unit %s final %v", wantKey, u.Kind, u.Unit, u.Final)
	}
	want := billing.ComputeCreditsMicros(seconds)
	if u.CreditsMicros != want || u.QuantityMicros != want {
		t.Fatalf("usage %s: credits %d quantity %d, want %d (%d s)", wantKey, u.CreditsMicros, u.QuantityMicros, want, seconds)
	}
	if !u.PeriodFrom.Equal(from.Truncate(time.Millisecond)) ||
		!u.PeriodTo.Equal(from.Add(time.Duration(seconds)*time.Second).Truncate(time.Millisecond)) {
		t.Fatalf("usage %s: period %s – %s, want %s + %ds", wantKey, u.PeriodFrom, u.PeriodTo, from, seconds)
	}
}

func TestRunningSessionIsBilledInWholeSecondIntervals(t *testing.T) {
	e := newEnv(t)
	s := e.running("sb-run")
	from := *e.mark(s)

	// Under 10 s: skipped, the interval stays open.
	e.clock.Set(from.Add(5 * time.Second))
	if res := e.cycle(); res.Skipped != 1 || res.Billed != 0 {
		t.Fatalf("5 s: %+v", res)
	}
	if got := e.mark(s); !got.Equal(from) || len(e.usages()) != 0 {
		t.Fatalf("5 s moved the mark to %s or billed %d", got, len(e.usages()))
	}

	// 65.7 s: 65 whole seconds billed, the mark moves by exactly 65 s.
	e.clock.Set(from.Add(65*time.Second + 700*time.Millisecond))
	if res := e.cycle(); res.Billed != 1 || res.Seconds != 65 {
		t.Fatalf("65.7 s: %+v", res)
	}
	second := from.Add(65 * time.Second)
	if got := e.mark(s); !got.Equal(second) {
		t.Fatalf("mark = %s, want %s", got, second)
	}
	us := e.usages()
	if len(us) != 1 {
		t.Fatalf("%d usages, want 1", len(us))
	}
	checkUsage(t, us[0], e.org, s, key(s, from, second), from, 65, false)
	if us[0].u.CreditsMicros != 1_083_333 { // 65/60 credit, rounded to the micro-credit
		t.Fatalf("credits = %d", us[0].u.CreditsMicros)
	}

	// Replaying the cycle at the same instant bills nothing new.
	e.cycle()
	if n := len(e.usages()); n != 1 {
		t.Fatalf("replay billed again: %d usages", n)
	}

	// The next interval starts exactly where the previous one ended.
	e.clock.Set(from.Add(125*time.Second + 200*time.Millisecond))
	e.cycle()
	us = e.usages()
	if len(us) != 2 {
		t.Fatalf("%d usages, want 2", len(us))
	}
	checkUsage(t, us[1], e.org, s, key(s, second, from.Add(125*time.Second)), second, 60, false)
	if us[1].u.CreditsMicros != billing.Micros {
		t.Fatalf("a minute costs %d micro-credits", us[1].u.CreditsMicros)
	}
}

func TestPauseBillsUpToThePauseAndResumeRestartsTheMeter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.running("sb-pause")
	// The session has been running for 42.5 s unbilled.
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET metered_through_at = now() - interval '42.5 seconds' WHERE id = $1`, s); err != nil {
		t.Fatal(err)
	}
	from := *e.mark(s)
	if _, err := e.store.MarkPaused(ctx, s, "", ""); err != nil {
		t.Fatal(err)
	}
	var to time.Time
	if err := e.pool.QueryRow(ctx, `SELECT to_at FROM billing_meter_closures WHERE session_id = $1 AND from_at = $2`, s, from).Scan(&to); err != nil {
		t.Fatalf("pause closed no interval: %v", err)
	}
	if e.mark(s) != nil {
		t.Fatal("a paused session keeps its mark")
	}

	// Far in the future: the paused session is not metered any further.
	e.clock.Set(to.Add(time.Hour))
	res := e.cycle()
	if res.Closures != 1 {
		t.Fatalf("cycle: %+v", res)
	}
	seconds := int64(to.Sub(from) / time.Second)
	if seconds != 42 {
		t.Fatalf("closure of %d s, want 42", seconds)
	}
	us := e.usages()
	if len(us) != 1 {
		t.Fatalf("%d usages, want 1", len(us))
	}
	checkUsage(t, us[0], e.org, s, finalKey(s, from), from, seconds, true)
	var left int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_meter_closures WHERE session_id = $1`, s).Scan(&left); err != nil || left != 0 {
		t.Fatalf("closure rows left: %d (%v)", left, err)
	}
	e.cycle()
	if n := len(e.usages()); n != 1 {
		t.Fatalf("paused session billed again: %d usages", n)
	}

	// Resume: metering restarts at the resume, the paused time is not billed.
	resumed, err := e.store.MarkRunning(ctx, s, sessions.Runtime{SandboxID: "sb-pause-2"})
	if err != nil {
		t.Fatal(err)
	}
	start := e.mark(s)
	if start == nil || start.Before(to) || resumed.Status != sessions.StatusRunning {
		t.Fatalf("resume mark %v, pause at %s", start, to)
	}
	e.clock.Set(start.Add(20 * time.Second))
	e.cycle()
	us = e.usages()
	if len(us) != 2 {
		t.Fatalf("%d usages, want 2", len(us))
	}
	checkUsage(t, us[1], e.org, s, key(s, *start, start.Add(20*time.Second)), *start, 20, false)
}

func TestDeadSandboxBillsThroughLastSeenAliveAndPauses(t *testing.T) {
	e := newEnv(t)
	e.meter = e.newMeter(e.clock.Now, 30*time.Second)
	ctx := context.Background()
	s := e.running("sb-dead")
	from := *e.mark(s)
	// The sandbox's credentials.
	token := sessionstest.SandboxToken(t, e.pool, s)
	if _, err := e.keys.Issue(ctx, e.org, s); err != nil {
		t.Fatal(err)
	}

	e.clock.Set(from.Add(40 * time.Second))
	e.cycle() // alive: 40 s billed, last seen alive at +40 s
	seen := from.Add(40 * time.Second)

	// Two failed checks (one not alive, one erroring) change nothing yet.
	e.prov.set("sb-dead", errDead)
	e.clock.Set(from.Add(70 * time.Second))
	e.cycle()
	e.prov.set("sb-dead", errors.New("provider timeout"))
	e.clock.Set(from.Add(100 * time.Second))
	e.cycle()
	if got, _ := e.store.Get(ctx, "", s); got.Status != sessions.StatusRunning {
		t.Fatalf("paused after 2 failures: %s", got.Status)
	}
	if n := len(e.usages()); n != 1 {
		t.Fatalf("%d usages after failed checks, want 1", n)
	}

	// The third failure declares it dead: billed through last seen alive +
	// Interval (+70 s), not through detection (+130 s).
	e.prov.set("sb-dead", errDead)
	e.clock.Set(from.Add(130 * time.Second))
	res := e.cycle()
	if res.Dead != 1 || res.Paused != 1 || res.Seconds != 30 {
		t.Fatalf("third failure: %+v", res)
	}
	us := e.usages()
	if len(us) != 2 {
		t.Fatalf("%d usages, want 2", len(us))
	}
	checkUsage(t, us[1], e.org, s, finalKey(s, seen), seen, 30, true)
	got, err := e.store.Get(ctx, "", s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != sessions.StatusPaused || got.PauseReason == nil || *got.PauseReason != meter.PauseReason || got.SandboxID != nil {
		t.Fatalf("session after death: status %s reason %v sandbox %v", got.Status, got.PauseReason, got.SandboxID)
	}
	// Its credentials died with it.
	if _, _, err := sessions.VerifySandboxToken(ctx, e.pool, token); err == nil {
		t.Fatal("the dead sandbox's token still works")
	}
	var liveKeys, revokedTokens int
	if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM llm_virtual_keys WHERE session_id = $1 AND revoked_at IS NULL),
		(SELECT count(*) FROM sandbox_tokens WHERE session_id = $1 AND revoke_reason = $2)`, s, meter.PauseReason).Scan(&liveKeys, &revokedTokens); err != nil {
		t.Fatal(err)
	}
	if liveKeys != 0 || revokedTokens != 1 {
		t.Fatalf("after death: %d live LLM keys, %d tokens revoked as %s", liveKeys, revokedTokens, meter.PauseReason)
	}
	var closures int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_meter_closures WHERE session_id = $1`, s).Scan(&closures); err != nil || closures != 0 {
		t.Fatalf("the pause closed another interval: %d (%v)", closures, err)
	}
	e.clock.Set(from.Add(time.Hour))
	e.cycle()
	if n := len(e.usages()); n != 2 {
		t.Fatalf("billed after death: %d usages", n)
	}
}

// A meter that died between billing a dead sandbox's final interval and
// pausing the session: the next cycle pauses it without billing.
func TestDeadSandboxWithClosedMarkIsPausedWithoutBilling(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.running("sb-crash")
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET metered_through_at = NULL, alive_check_failures = $2 WHERE id = $1`,
		s, billing.LivenessFailures); err != nil {
		t.Fatal(err)
	}
	e.prov.set("sb-crash", errDead)
	if res := e.cycle(); res.Paused != 1 || res.Dead != 0 || res.Seconds != 0 {
		t.Fatalf("cycle: %+v", res)
	}
	if got, _ := e.store.Get(ctx, "", s); got.Status != sessions.StatusPaused || *got.PauseReason != meter.PauseReason {
		t.Fatalf("status %s", got.Status)
	}
	if n := len(e.usages()); n != 0 {
		t.Fatalf("billed %d usages", n)
	}
}

func TestOnlyOneMeterLeads(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.newMeter(time.Now, 10*time.Millisecond)
	b := e.newMeter(time.Now, 10*time.Millisecond)
	start := func(m *meter.Meter) (stop func()) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		var once sync.Once
		stop = func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("meter run: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}
	stopA := start(a)
	testenv.Eventually(t, 10*time.Second, "meter A to lead", func() bool { return a.Status().Leader && a.Status().Cycles >= 2 })
	start(b)
	testenv.Eventually(t, 10*time.Second, "meter B to stand by three times", func() bool { return b.Status().Standby >= 3 })
	cyclesA := a.Status().Cycles
	if st := b.Status(); st.Leader || st.Cycles != 0 {
		t.Fatalf("B ran while A led: %+v", st)
	}
	testenv.Eventually(t, 10*time.Second, "meter A to keep metering", func() bool { return a.Status().Cycles > cyclesA })
	if st := b.Status(); st.Leader || st.Cycles != 0 {
		t.Fatalf("B ran while A led: %+v", st)
	}

	// A stops: B takes over.
	stopA()
	if a.Status().Leader {
		t.Fatal("A still leads after stopping")
	}
	testenv.Eventually(t, 10*time.Second, "meter B to take over", func() bool { return b.Status().Leader && b.Status().Cycles >= 1 })

	// B's lock connection dies: B steps down, then leads again.
	hi, lo := uint32(meter.LockID>>32), uint32(meter.LockID&0xffffffff)
	var killed bool
	if err := e.pool.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 1 AND granted`, int64(hi), int64(lo)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the lock holder: %v %v", killed, err)
	}
	testenv.Eventually(t, 10*time.Second, "meter B to notice its lost lock", func() bool { return b.Status().LostLeadership == 1 })
	cyclesB := b.Status().Cycles
	testenv.Eventually(t, 10*time.Second, "meter B to lead again", func() bool { return b.Status().Leader && b.Status().Cycles > cyclesB })
}

// Sessions of another provider are metered without liveness checks: the
// meter's provider cannot see their sandboxes.
func TestOtherProvidersSessionsAreMeteredWithoutLivenessChecks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.running("sb-elsewhere")
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET sandbox_provider = 'cloud' WHERE id = $1`, s); err != nil {
		t.Fatal(err)
	}
	e.prov.set("sb-elsewhere", errDead) // what the local provider would say
	from := *e.mark(s)
	for i := 1; i <= billing.LivenessFailures+1; i++ {
		e.clock.Set(from.Add(time.Duration(i) * 30 * time.Second))
		if res := e.cycle(); res.Dead != 0 || res.Billed != 1 {
			t.Fatalf("cycle %d: %+v", i, res)
		}
	}
	if got, _ := e.store.Get(ctx, "", s); got.Status != sessions.StatusRunning {
		t.Fatalf("status %s", got.Status)
	}
	if n := len(e.usages()); n != billing.LivenessFailures+1 {
		t.Fatalf("%d usages", n)
	}
}
