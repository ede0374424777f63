// Package meter is the compute meter: every Interval it turns the elapsed time of each running session
// into billable usage on billing.usage, with a deterministic idempotency key
// per interval, and it declares sandboxes dead after consecutive failed
// liveness checks.
//
// Design:
//
//   - One active meter across replicas: Run holds a Postgres session-level
//     advisory lock (pg_try_advisory_lock) on a dedicated pooled connection.
//     The connection is pinged before every cycle; when it is gone the lock
//     went with it, the meter steps down and competes for the lock again.
//     A replica that does not get the lock stands by and retries every
//     Interval. Two cycles overlapping for a moment (a leader that has not
//     yet noticed its connection died) bill nothing twice: every step below
//     is a compare-and-set and every key is deterministic.
//   - The mark moves with the usage: sessions.metered_through_at is the end
//     of the last billed interval. Billing an interval is ONE transaction: a
//     compare-and-set of the mark (from → to) and the usage event added to
//     the transactional outbox. The original system advanced the mark after
//     deducting, in a separate statement (its "metering crash window"); here
//     a crash either bills and moves the mark, or does neither.
//   - Whole seconds: an interval is [from, from + floor(now - from)), so the
//     next one starts exactly where this one ended and the keys
//     compute:{session}:{fromMs}:{toMs} are the same whoever computes them.
//     Intervals under billing.ComputeMinBillableSeconds stay open and are
//     billed by a later cycle.
//   - A session leaving running (pause, stop, failure) has its open interval
//     closed by the sessions_meter_marks trigger in the same statement, into
//     billing_meter_closures. The meter bills each closure as a final
//     interval (key compute:{session}:{fromMs}:final, even under 10 s) in
//     the transaction that deletes it. A pause therefore bills exactly up to
//     the pause, and resuming starts a fresh interval at the resume (the
//     trigger sets the mark), so paused time is never billed.
//   - Liveness: each running session's sandbox is checked (bounded
//     concurrency) through Deps.Liveness: the heartbeat its owning gateway
//     renews while that gateway's provider says the sandbox is alive (the
//     meter runs on one replica, whose own provider may not know another
//     gateway's sandboxes); without Liveness, through Deps.Provider. An
//     alive sandbox resets the failure count and moves last_seen_alive_at;
//     a dead one (or a failed check) counts one failure. At
//     billing.LivenessFailures the sandbox is dead: the final interval is
//     billed through min(now, last_seen_alive_at + Interval), not through
//     the detection time, and the mark is cleared in the same transaction;
//     then the session is paused (pause_reason sandbox_dead, resumable)
//     through the sessions store, fenced on the sandbox id. A crash between
//     the two leaves a running session without a mark whose sandbox is
//     dead: the next cycle pauses it without billing again. A running
//     session without a mark whose sandbox is alive (it moved to a new
//     sandbox meanwhile) starts metering again.
package meter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// LockID is the Postgres advisory lock the active meter holds ("meter").
const LockID int64 = 0x6d65746572

// PauseReason is the pause_reason of a session whose sandbox died.
const PauseReason = "sandbox_dead"

// Deps configure a Meter.
type Deps struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	// Provider answers liveness checks (Provider.Alive) of the sessions
	// whose sandbox_provider is its Name(); sessions of other providers,
	// or all of them when Provider is nil, are metered without liveness
	// checks (their hubs and the orphan sweeper detect dead sandboxes,
	// and the pause closes the interval).
	Provider sandbox.Provider
	// Liveness, when set, answers every liveness check instead of
	// Provider, for sessions of any provider: with several gateways only
	// the session's owner can ask its provider (hub.Liveness reads the
	// heartbeat the owner renews while its provider says alive).
	Liveness Liveness
	// Sessions pauses sessions whose sandbox died.
	Sessions *sessions.Store
	// LLMKeys revokes the virtual LLM keys of a session paused because its
	// sandbox died; nil = none.
	LLMKeys llmkeys.Issuer
	// Interval between cycles [30s]; also the slack a dead sandbox's
	// final interval gets after it was last seen alive.
	Interval time.Duration
	// Now is the clock [time.Now].
	Now func() time.Time
	// Log [slog.Default()].
	Log *slog.Logger
	// Registerer receives the metrics; nil = not registered.
	Registerer prometheus.Registerer
	// Concurrency bounds the liveness checks in flight [16].
	Concurrency int
	// CheckTimeout bounds one liveness check [10s].
	CheckTimeout time.Duration
	// Batch is how many closures one query reads [500].
	Batch int
}

// Liveness tells whether a session's sandbox is alive (hub.Liveness).
type Liveness interface {
	SandboxAlive(ctx context.Context, sessionID, sandboxID, provider string) (bool, error)
}

// Result describes one cycle.
type Result struct {
	// Closures is how many closed intervals (pauses, stops) were billed.
	Closures int
	// Running is how many running sessions were examined.
	Running int
	// Billed is how many intervals of running sessions were billed.
	Billed int
	// Skipped counts sessions whose open interval was under the minimum.
	Skipped int
	// Dead counts sandboxes declared dead this cycle.
	Dead int
	// Paused counts sessions paused because their sandbox died.
	Paused int
	// Seconds is the total of seconds billed.
	Seconds int64
	// Failed counts sessions whose processing failed (retried next cycle).
	Failed int
}

// Status is the meter's leadership as seen by this replica.
type Status struct {
	// Leader is true while this replica holds the meter lock.
	Leader bool
	// Cycles run by this replica.
	Cycles int64
	// Standby counts lock attempts that found another replica leading.
	Standby int64
	// LostLeadership counts leaderships ended by a dead connection.
	LostLeadership int64
}

// Meter bills running sessions. Create it with New.
type Meter struct {
	d   Deps
	log *slog.Logger
	m   metrics

	leader                atomic.Bool
	cycles, standby, lost atomic.Int64
}

type metrics struct {
	seconds  prometheus.Counter
	metered  prometheus.Counter
	dead     prometheus.Counter
	cycles   prometheus.Counter
	failures prometheus.Counter
	leader   prometheus.Gauge
}

// New returns a Meter.
func New(d Deps) (*Meter, error) {
	if d.Pool == nil || d.Codec == nil || d.Sessions == nil {
		return nil, errors.New("meter: Pool, Codec and Sessions are required")
	}
	if d.Interval <= 0 {
		d.Interval = 30 * time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Concurrency <= 0 {
		d.Concurrency = 16
	}
	if d.CheckTimeout <= 0 {
		d.CheckTimeout = 10 * time.Second
	}
	if d.Batch <= 0 {
		d.Batch = 500
	}
	m := &Meter{d: d, log: d.Log.With("component", "compute_meter")}
	m.m = metrics{
		seconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "proliferate_meter_seconds_billed_total",
			Help: "Compute seconds billed by the meter (running and final intervals)."}),
		metered: prometheus.NewCounter(prometheus.CounterOpts{Name: "proliferate_meter_intervals_billed_total",
			Help: "Session intervals billed by the meter (one per session and cycle, plus final intervals)."}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{Name: "proliferate_meter_dead_sandboxes_total",
			Help: "Sandboxes declared dead after consecutive failed liveness checks."}),
		cycles: prometheus.NewCounter(prometheus.CounterOpts{Name: "proliferate_meter_cycles_total",
			Help: "Metering cycles run by this replica."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "proliferate_meter_failures_total",
			Help: "Sessions or closures whose metering failed in a cycle (retried next cycle)."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "proliferate_meter_leader",
			Help: "1 while this replica is the active compute meter."}),
	}
	if d.Registerer != nil {
		for _, c := range []prometheus.Collector{m.m.seconds, m.m.metered, m.m.dead, m.m.cycles, m.m.failures, m.m.leader} {
			if err := d.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("meter: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Status reports this replica's leadership and counters.
func (m *Meter) Status() Status {
	return Status{Leader: m.leader.Load(), Cycles: m.cycles.Load(), Standby: m.standby.Load(), LostLeadership: m.lost.Load()}
}

// Run competes for the meter lock and, while it holds it, runs a Cycle
// every Interval, until ctx ends (then it returns nil).
func (m *Meter) Run(ctx context.Context) error {
	for {
		if err := m.lead(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("compute meter leadership", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.d.Interval):
		}
	}
}

// lead takes the lock if it is free and then meters until ctx ends or the
// lock's connection dies.
func (m *Meter) lead(ctx context.Context) error {
	conn, err := m.d.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire lock connection: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, LockID).Scan(&got); err != nil {
		conn.Release()
		return fmt.Errorf("try meter lock: %w", err)
	}
	if !got {
		conn.Release()
		m.standby.Add(1)
		return nil
	}
	m.setLeader(true)
	m.log.Info("compute meter leading")
	healthy := true
	defer func() {
		m.setLeader(false)
		if healthy {
			uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, LockID); err != nil {
				_ = conn.Conn().Close(uctx) // closing the session releases the lock
			}
		} else {
			_ = conn.Conn().Close(context.Background())
		}
		conn.Release()
	}()
	t := time.NewTicker(m.d.Interval)
	defer t.Stop()
	for {
		if err := conn.Ping(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			healthy = false
			m.lost.Add(1)
			return fmt.Errorf("lost the meter lock's connection: %w", err)
		}
		res, err := m.Cycle(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			m.log.Error("metering cycle failed", "err", err)
		case res.Billed+res.Closures+res.Dead+res.Failed > 0:
			m.log.Info("metering cycle", "running", res.Running, "billed", res.Billed, "closures", res.Closures,
				"skipped", res.Skipped, "dead", res.Dead, "paused", res.Paused, "seconds", res.Seconds, "failed", res.Failed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *Meter) setLeader(v bool) {
	m.leader.Store(v)
	if v {
		m.m.leader.Set(1)
	} else {
		m.m.leader.Set(0)
	}
}

// Cycle meters once: closed intervals first, then every running session.
// Errors of single sessions are logged and counted in Result.Failed (they
// are retried next cycle); the error is for the cycle itself.
func (m *Meter) Cycle(ctx context.Context) (Result, error) {
	m.cycles.Add(1)
	m.m.cycles.Inc()
	var res Result
	if err := m.closures(ctx, &res); err != nil {
		return res, err
	}
	if err := m.running(ctx, &res); err != nil {
		return res, err
	}
	return res, nil
}

// interval is a billable interval of a session.
type interval struct {
	sessionID, orgID string
	from             time.Time
	seconds          int64
	final            bool
}

func (iv interval) to() time.Time { return iv.from.Add(time.Duration(iv.seconds) * time.Second) }

func (iv interval) key() string {
	if iv.final {
		return fmt.Sprintf("compute:%s:%d:final", iv.sessionID, iv.from.UnixMilli())
	}
	return fmt.Sprintf("compute:%s:%d:%d", iv.sessionID, iv.from.UnixMilli(), iv.to().UnixMilli())
}

// emit adds the usage of iv to the outbox in tx.
func (m *Meter) emit(ctx context.Context, tx pgx.Tx, iv interval) error {
	sid := iv.sessionID
	credits := billing.ComputeCreditsMicros(iv.seconds)
	ev := schemas.New(iv.orgID, &schemas.BillingUsage{
		IdempotencyKey: iv.key(),
		Kind:           schemas.UsageCompute,
		Unit:           schemas.UnitMinute,
		QuantityMicros: credits, // minutes in micros: 1 credit per minute
		CreditsMicros:  credits,
		SessionID:      &sid,
		PeriodFrom:     iv.from.UTC(),
		PeriodTo:       iv.to().UTC(),
		Final:          iv.final,
	})
	ev.CorrelationID = iv.sessionID
	if err := outbox.AddEvent(ctx, tx, m.d.Codec, topics.BillingUsage, iv.orgID, ev); err != nil {
		return fmt.Errorf("add usage %s: %w", iv.key(), err)
	}
	return nil
}

func (m *Meter) billed(iv interval) {
	m.m.seconds.Add(float64(iv.seconds))
	m.m.metered.Inc()
}

// wholeSeconds is floor(d / 1s), never negative.
func wholeSeconds(d time.Duration) int64 { return max(int64(d/time.Second), 0) }

type closure struct {
	sessionID, orgID string
	from, to         time.Time
}

// closures bills every closed interval in the transaction that deletes it.
func (m *Meter) closures(ctx context.Context, res *Result) error {
	for {
		rows, err := sessionsdb.New(m.d.Pool).MeterClosures(ctx, int32(m.d.Batch))
		if err != nil {
			return fmt.Errorf("meter: list closures: %w", err)
		}
		cs := make([]closure, len(rows))
		for i, r := range rows {
			cs[i] = closure{sessionID: r.SessionID, orgID: r.OrgID, from: r.FromAt, to: r.ToAt}
		}
		done := 0
		for _, c := range cs {
			billed, err := m.closure(ctx, c)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				res.Failed++
				m.m.failures.Inc()
				m.log.Error("bill closed interval", "session_id", c.sessionID, "org_id", c.orgID, "err", err)
				continue
			}
			done++
			if billed.seconds > 0 {
				res.Closures++
				res.Seconds += billed.seconds
				m.billed(billed)
			}
		}
		if len(cs) < m.d.Batch || done == 0 {
			return nil
		}
	}
}

func (m *Meter) closure(ctx context.Context, c closure) (interval, error) {
	var iv interval
	err := pgx.BeginFunc(ctx, m.d.Pool, func(tx pgx.Tx) error {
		to, err := sessionsdb.New(tx).TakeMeterClosure(ctx, sessionsdb.TakeMeterClosureParams{SessionID: c.sessionID, FromAt: c.from})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another meter billed it
		}
		if err != nil {
			return fmt.Errorf("delete closure: %w", err)
		}
		iv = interval{sessionID: c.sessionID, orgID: c.orgID, from: c.from, seconds: wholeSeconds(to.Sub(c.from)), final: true}
		if iv.seconds == 0 {
			return nil
		}
		return m.emit(ctx, tx, iv)
	})
	if err != nil {
		return interval{}, err
	}
	return iv, nil
}

// session is a running session as the meter reads it.
type session struct {
	id, orgID, sandboxID, provider string
	from                           *time.Time // metered_through_at
	lastSeen                       *time.Time
	failures                       int
}

// outcome of one session in a cycle.
type outcome struct {
	billed  interval
	skipped bool
	dead    bool
	paused  bool
	err     error
}

func (m *Meter) running(ctx context.Context, res *Result) error {
	rows, err := sessionsdb.New(m.d.Pool).MeteredSessions(ctx)
	if err != nil {
		return fmt.Errorf("meter: list running sessions: %w", err)
	}
	ss := make([]session, len(rows))
	for i, r := range rows {
		ss[i] = session{id: r.ID, orgID: r.OrgID, sandboxID: r.SandboxID, provider: r.SandboxProvider, from: r.MeteredThroughAt,
			lastSeen: r.LastSeenAliveAt, failures: int(r.AliveCheckFailures)}
	}
	res.Running = len(ss)
	outs := make([]outcome, len(ss))
	sem := make(chan struct{}, m.d.Concurrency)
	var wg sync.WaitGroup
	for i, s := range ss {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			outs[i] = m.meter(ctx, s)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, o := range outs {
		switch {
		case o.err != nil:
			res.Failed++
			m.m.failures.Inc()
			m.log.Error("meter session", "session_id", ss[i].id, "org_id", ss[i].orgID, "err", o.err)
		case o.skipped:
			res.Skipped++
		}
		if o.billed.seconds > 0 {
			if o.billed.final {
				res.Closures++
			} else {
				res.Billed++
			}
			res.Seconds += o.billed.seconds
			m.billed(o.billed)
		}
		if o.dead {
			res.Dead++
			m.m.dead.Inc()
		}
		if o.paused {
			res.Paused++
		}
	}
	return nil
}

// meter checks one running session's sandbox and bills or closes it.
func (m *Meter) meter(ctx context.Context, s session) outcome {
	check := func(ctx context.Context) (bool, error) {
		return m.d.Liveness.SandboxAlive(ctx, s.id, s.sandboxID, s.provider)
	}
	if m.d.Liveness == nil {
		if m.d.Provider == nil || s.provider != m.d.Provider.Name() {
			return m.alive(ctx, s, m.d.Now())
		}
		check = func(ctx context.Context) (bool, error) { return m.d.Provider.Alive(ctx, s.sandboxID) }
	}
	cctx, cancel := context.WithTimeout(ctx, m.d.CheckTimeout)
	alive, err := check(cctx)
	cancel()
	if ctx.Err() != nil {
		return outcome{err: ctx.Err()}
	}
	if err != nil {
		m.log.Warn("sandbox liveness check failed", "session_id", s.id, "sandbox_id", s.sandboxID, "err", err)
		alive = false
	}
	now := m.d.Now()
	if alive {
		return m.alive(ctx, s, now)
	}
	return m.notAlive(ctx, s, now)
}

func (m *Meter) alive(ctx context.Context, s session, now time.Time) outcome {
	if s.from == nil {
		// Running without a mark on a live sandbox: it moved to a new
		// sandbox after the old one was declared dead. Meter from now.
		err := sessionsdb.New(m.d.Pool).RestartMetering(ctx, sessionsdb.RestartMeteringParams{ID: s.id, SandboxID: s.sandboxID, Now: now})
		if err != nil {
			return outcome{err: fmt.Errorf("restart metering: %w", err)}
		}
		return outcome{skipped: true}
	}
	iv := interval{sessionID: s.id, orgID: s.orgID, from: *s.from, seconds: wholeSeconds(now.Sub(*s.from))}
	if iv.seconds < billing.ComputeMinBillableSeconds {
		if err := sessionsdb.New(m.d.Pool).RecordAlive(ctx, sessionsdb.RecordAliveParams{ID: s.id, Now: now}); err != nil {
			return outcome{err: fmt.Errorf("record liveness: %w", err)}
		}
		return outcome{skipped: true}
	}
	moved := false
	err := pgx.BeginFunc(ctx, m.d.Pool, func(tx pgx.Tx) error {
		n, err := sessionsdb.New(tx).AdvanceMeter(ctx, sessionsdb.AdvanceMeterParams{ID: s.id, FromAt: iv.from, ToAt: iv.to(), Now: now})
		if err != nil {
			return fmt.Errorf("advance mark: %w", err)
		}
		if n == 0 {
			return nil // paused, stopped or billed by someone else meanwhile
		}
		moved = true
		return m.emit(ctx, tx, iv)
	})
	if err != nil {
		return outcome{err: err}
	}
	if !moved {
		return outcome{skipped: true}
	}
	return outcome{billed: iv}
}

func (m *Meter) notAlive(ctx context.Context, s session, now time.Time) outcome {
	r, err := sessionsdb.New(m.d.Pool).CountAliveFailure(ctx, sessionsdb.CountAliveFailureParams{ID: s.id, SandboxID: s.sandboxID})
	failures := int(r.AliveCheckFailures)
	if err == nil {
		s.from, s.lastSeen = r.MeteredThroughAt, r.LastSeenAliveAt
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return outcome{skipped: true} // no longer running on that sandbox
	}
	if err != nil {
		return outcome{err: fmt.Errorf("count liveness failure: %w", err)}
	}
	if failures < billing.LivenessFailures {
		return outcome{}
	}
	var out outcome
	if s.from != nil {
		out.dead = true
		m.log.Warn("sandbox dead", "session_id", s.id, "org_id", s.orgID, "sandbox_id", s.sandboxID, "failures", failures)
		end := now
		if s.lastSeen != nil {
			end = minTime(now, s.lastSeen.Add(m.d.Interval))
		}
		iv := interval{sessionID: s.id, orgID: s.orgID, from: *s.from, seconds: wholeSeconds(end.Sub(*s.from)), final: true}
		closed := false
		err := pgx.BeginFunc(ctx, m.d.Pool, func(tx pgx.Tx) error {
			n, err := sessionsdb.New(tx).CloseMeter(ctx, sessionsdb.CloseMeterParams{ID: s.id, FromAt: iv.from, SandboxID: s.sandboxID})
			if err != nil {
				return fmt.Errorf("close mark: %w", err)
			}
			if n == 0 {
				return nil
			}
			closed = true
			if iv.seconds == 0 {
				return nil
			}
			return m.emit(ctx, tx, iv)
		})
		if err != nil {
			return outcome{err: fmt.Errorf("bill final interval: %w", err)}
		}
		if !closed {
			return outcome{skipped: true}
		}
		out.billed = iv
	}
	// The interval is closed (now, or by a cycle that died before pausing):
	// pause the session, fenced on its sandbox. No closure is written: the
	// mark is NULL.
	_, err = m.d.Sessions.PauseIfSandbox(ctx, s.id, s.sandboxID, PauseReason, "", false)
	switch {
	case errors.Is(err, sessions.ErrSandboxChanged):
		m.log.Info("session moved on before its dead sandbox was paused", "session_id", s.id)
	case err != nil:
		out.err = fmt.Errorf("pause session with dead sandbox: %w", err)
	default:
		out.paused = true
		m.log.Info("session paused: sandbox dead", "session_id", s.id, "org_id", s.orgID, "sandbox_id", s.sandboxID)
		m.revokeCredentials(ctx, s.id)
	}
	return out
}

// revokeCredentials ends what the dead sandbox held, as a hub does at
// every stop: its sandbox tokens (already refused, since the session no
// longer runs on that sandbox; this records why) and its virtual LLM keys.
// Failures are logged: the tokens are dead anyway, the keys expire.
func (m *Meter) revokeCredentials(ctx context.Context, sessionID string) {
	if err := m.d.Sessions.RevokeSandboxTokens(ctx, sessionID, PauseReason); err != nil {
		m.log.Warn("revoke the dead sandbox's tokens", "session_id", sessionID, "err", err)
	}
	if m.d.LLMKeys != nil {
		if err := m.d.LLMKeys.RevokeSession(ctx, sessionID, PauseReason); err != nil {
			m.log.Warn("revoke the dead sandbox's LLM keys", "session_id", sessionID, "err", err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
