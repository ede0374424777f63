package enforcer

import (
	"context"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// sweepLockKey is the advisory lock that keeps sweeps one at a time across
// replicas.
const sweepLockKey = "billing.enforcer.sweep"

// Sweeper retries enforcement: every Every it pauses the live sessions of
// organizations that are exhausted or suspended, until they are paused.
type Sweeper struct {
	Deps
	// Every is the period [30s].
	Every time.Duration
	// Limit bounds the sessions of one pass [500].
	Limit int
}

// Run sweeps every Every until ctx ends.
func (s Sweeper) Run(ctx context.Context) error {
	every := s.Every
	if every <= 0 {
		every = 30 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log().Warn("enforcer: sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep runs one pass (nothing when another replica's pass holds the
// lock).
func (s Sweeper) Sweep(ctx context.Context) (Result, error) {
	conn, release, locked, err := db.PassLock(ctx, s.Pool, db.LockKey(sweepLockKey))
	if err != nil {
		return Result{}, fmt.Errorf("enforcer: sweep: %w", err)
	}
	if !locked {
		return Result{}, nil
	}
	defer release()
	limit := s.Limit
	if limit <= 0 {
		limit = 500
	}
	cands, err := orgsdb.New(conn).PausedOrgLiveSessions(ctx, int32(limit))
	if err != nil {
		return Result{}, fmt.Errorf("enforcer: sweep candidates: %w", err)
	}
	byOrg := map[string][]string{}
	var orgs []string
	for _, c := range cands {
		if _, ok := byOrg[c.OrgID]; !ok {
			orgs = append(orgs, c.OrgID)
		}
		byOrg[c.OrgID] = append(byOrg[c.OrgID], c.ID)
	}
	var total Result
	for _, org := range orgs {
		s.revokeOrg(ctx, org)
		r := s.pauseAll(ctx, org, byOrg[org])
		total.Paused += r.Paused
		total.Failed += r.Failed
		total.Skipped += r.Skipped
	}
	if len(cands) > 0 {
		s.log().Info("enforcer: sweep", "sessions", len(cands), "paused", total.Paused, "failed", total.Failed, "skipped", total.Skipped)
	}
	return total, nil
}
