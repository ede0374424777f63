// Package enforcer is the enforcer consumer group: when an organization's billing state becomes
// exhausted or suspended (topic billing.state, keyed by organization), its
// running sessions are paused with a snapshot — resumable, never
// terminated — with pause_reason credit_limit, and the organization's
// virtual LLM keys are revoked.
//
// Design:
//
//   - Pausing is the gateway's job: it owns the sandbox, the hub, the
//     snapshot books and the session's keys. The enforcer asks the gateway
//     over HTTP (POST /proliferate/{id}/pause with {"reason":
//     "credit_limit"}, a service credential; the gateway accepts a reason
//     only from services), exactly as the dashboard API pauses a session.
//   - The handler never blocks its partition on a persistent failure: a
//     session whose pause fails (gateway down, provider snapshot failure)
//     is logged and left to the Sweeper, which every 30 s finds the
//     running sessions of exhausted or suspended organizations and pauses
//     them until they are paused. (The original left such sessions running
//     forever: its known limitation P0.)
//   - Right before each pause the organization's state is read again:
//     credits added meanwhile (state back to active) stop further pauses,
//     whatever the age of the event being handled. Replays are therefore
//     harmless, and pausing a paused session changes nothing.
//   - One sweep at a time across replicas (a Postgres advisory lock).
//   - Key revocation is best effort (logged): keys also carry a budget and
//     a lifetime, and the proxy refuses spend beyond the balance.
package enforcer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/schemas"
)

// PauseReason is the pause_reason of an enforced pause.
const PauseReason = sessions.PauseCreditLimit

// Pauser pauses a session with a snapshot, recording reason (the gateway;
// GatewayPauser). A session that is gone or already stopped is not an
// error (ErrGone may be returned and counts as done).
type Pauser interface {
	Pause(ctx context.Context, orgID, sessionID, reason string) error
}

// ErrGone: the session no longer exists or has ended; nothing to pause.
var ErrGone = errors.New("enforcer: session gone or ended")

// Deps configure the handler and the sweeper.
type Deps struct {
	Pool   *pgxpool.Pool
	Pauser Pauser
	// Keys revokes the organization's LLM keys; nil = none to revoke.
	Keys llmkeys.Issuer
	// Log [slog.Default()].
	Log *slog.Logger
	// Concurrency bounds the pauses of one organization in flight [4].
	Concurrency int
	// PauseTimeout bounds one pause (a snapshot may take minutes) [3m].
	PauseTimeout time.Duration
}

func (d Deps) log() *slog.Logger {
	if d.Log == nil {
		return slog.Default()
	}
	return d.Log
}

// Result counts what one enforcement did.
type Result struct {
	Paused, Failed, Skipped int
}

// Handler is the enforcer group's handler on billing.state.
func Handler(d Deps) consumers.Handler {
	log := d.log()
	return func(ctx context.Context, m *consumers.Message) error {
		if m.Event == nil {
			return consumers.Permanent(errors.New("enforcer: record without a decoded event"))
		}
		st, ok := m.Event.Payload.(*schemas.BillingState)
		if !ok {
			return consumers.Permanent(fmt.Errorf("enforcer: event type %s is not billing.state", m.Event.EventType))
		}
		orgID := m.Event.OrgID
		if orgID == "" {
			return consumers.Permanent(errors.New("enforcer: billing.state event without an organization"))
		}
		if !billing.ShouldPause(st.ToState) {
			return nil
		}
		res, err := d.EnforceOrg(ctx, orgID)
		if err != nil {
			return err // reading Postgres failed: retried by the runner
		}
		log.Info("billing enforcement", "org_id", orgID, "state", st.ToState, "paused", res.Paused, "failed", res.Failed,
			"skipped", res.Skipped)
		return nil
	}
}

// EnforceOrg revokes the organization's LLM keys and pauses its live
// sessions while its state asks for it. Failed pauses are counted, not
// returned: the Sweeper retries them. The error is for reading Postgres.
func (d Deps) EnforceOrg(ctx context.Context, orgID string) (Result, error) {
	pause, err := d.shouldPause(ctx, orgID)
	if err != nil || !pause {
		return Result{}, err
	}
	d.revokeOrg(ctx, orgID)
	ids, err := sessionsdb.New(d.Pool).LiveSessionIDs(ctx, orgID)
	if err != nil {
		return Result{}, fmt.Errorf("enforcer: live sessions of %s: %w", orgID, err)
	}
	return d.pauseAll(ctx, orgID, ids), nil
}

// shouldPause reads the organization's current state.
func (d Deps) shouldPause(ctx context.Context, orgID string) (bool, error) {
	state, err := orgsdb.New(d.Pool).BillingState(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enforcer: billing state of %s: %w", orgID, err)
	}
	return billing.ShouldPause(state), nil
}

func (d Deps) revokeOrg(ctx context.Context, orgID string) {
	if d.Keys == nil {
		return
	}
	if err := d.Keys.RevokeOrg(ctx, orgID, "credit_limit"); err != nil {
		d.log().Warn("enforcer: revoke the organization's LLM keys", "org_id", orgID, "err", err)
	}
}

// pauseAll pauses ids (sessions of orgID) with bounded concurrency,
// re-checking the organization's state before each pause.
func (d Deps) pauseAll(ctx context.Context, orgID string, ids []string) Result {
	var (
		mu  sync.Mutex
		res Result
		wg  sync.WaitGroup
	)
	n := d.Concurrency
	if n <= 0 {
		n = 4
	}
	sem := make(chan struct{}, n)
	for _, id := range ids {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			mu.Lock()
			res.Failed += 1
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			outcome := d.pauseOne(ctx, orgID, id)
			mu.Lock()
			switch outcome {
			case paused:
				res.Paused++
			case failed:
				res.Failed++
			default:
				res.Skipped++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

type outcome int

const (
	paused outcome = iota
	failed
	skipped
)

func (d Deps) pauseOne(ctx context.Context, orgID, id string) outcome {
	log := d.log().With("org_id", orgID, "session_id", id)
	// Credits may have been added since the event (or the last session).
	pause, err := d.shouldPause(ctx, orgID)
	if err != nil {
		log.Warn("enforcer: re-check the organization's state; the sweeper retries", "err", err)
		return failed
	}
	if !pause {
		return skipped
	}
	timeout := d.PauseTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = d.Pauser.Pause(pctx, orgID, id, PauseReason)
	switch {
	case errors.Is(err, ErrGone):
		return skipped
	case err != nil:
		log.Warn("enforcer: pausing the session failed; the sweeper retries", "err", err)
		return failed
	}
	log.Info("enforcer: session paused for the credit limit")
	return paused
}
