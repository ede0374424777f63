package orgs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// PauseReasonDeletion is the pause reason of the sessions of an
// organization scheduled for deletion (sessions.PauseOrgDeletion).
const PauseReasonDeletion = "org_deletion"

// SessionPauser pauses a session with a snapshot (the gateway). A session
// that is gone or has already ended counts as paused: return nil.
type SessionPauser interface {
	Pause(ctx context.Context, orgID, sessionID, reason string) error
}

// Reaper is the org-deletion job, run by the scheduler role: every Every
// it pauses the live sessions of organizations scheduled for deletion
// (until they are paused) and finalizes the organizations whose grace
// period is over. One pass at a time across replicas (an advisory lock).
//
// Finalizing an organization, in order, each step safe to repeat:
//
//  1. its live sessions are paused through the gateway (the sandbox is
//     snapshotted and stopped); a failure leaves everything for the next
//     pass;
//  2. its integrations are disconnected (Disconnect: the rows deleted and
//     the upstream connection revoked where the provider allows);
//  3. its LLM keys are revoked (RevokeKeys, best effort: they also expire);
//  4. in one transaction holding the organization's row lock: an audit row
//     and the org.delete event on audit.events (through the outbox: names
//     and counts, never secrets), then the row itself, whose ON DELETE
//     CASCADE foreign keys remove its members, invitations, sessions,
//     repos and configurations, remaining integration rows with their
//     stored tokens, secrets (the sealed values are destroyed, not
//     flagged), org-scoped API keys, triggers, automations, runs and
//     billing rows. The gateway's snapshot cleaner then deletes the
//     provider storage of the deleted sessions' snapshots (delete_reason
//     session_deleted, retried until the provider confirms).
//
// A crash anywhere leaves the organization scheduled and due, so the next
// pass repeats the steps; a finalized organization is gone, so finalizing
// it again does nothing.
type Reaper struct {
	Pool *pgxpool.Pool
	// Pauser pauses sessions; nil: live sessions hold the finalization
	// back (nothing can stop them).
	Pauser SessionPauser
	// Disconnect disconnects the organization's integrations; nil: their
	// rows go with the organization.
	Disconnect func(ctx context.Context, orgID string) error
	// RevokeKeys revokes the organization's LLM keys; nil: none.
	RevokeKeys func(ctx context.Context, orgID string) error
	// Now is the clock [time.Now].
	Now func() time.Time
	// Every is the period of Run [15s].
	Every time.Duration
	// Limit bounds the sessions paused and the organizations finalized per
	// pass [200].
	Limit int
	Log   *slog.Logger
}

// SweepResult counts what one pass did.
type SweepResult struct {
	Paused, PauseFailed, Finalized, Failed int
}

// Finalized is the outcome of finalizing one organization.
type Finalized struct {
	// Deleted: this call deleted it (false: nothing to do, or not yet due).
	Deleted bool           `json:"deleted"`
	Name    string         `json:"name"`
	Removed map[string]int `json:"removed"`
}

const reaperLockKey = "orgs.deletion.reaper"

func (r *Reaper) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reaper) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

func (r *Reaper) limit() int32 {
	if r.Limit <= 0 {
		return 200
	}
	return int32(r.Limit)
}

// Run sweeps every Every until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	every := r.Every
	if every <= 0 {
		every = 15 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.log().Warn("org deletion: sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep runs one pass (nothing when another replica's pass holds the
// lock): pauses the live sessions of organizations scheduled for deletion,
// then finalizes the due ones.
func (r *Reaper) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	conn, release, locked, err := db.PassLock(ctx, r.Pool, db.LockKey(reaperLockKey))
	if err != nil {
		return res, fmt.Errorf("org deletion: %w", err)
	}
	if !locked {
		return res, nil
	}
	defer release()
	q := orgsdb.New(conn)
	live, err := q.PendingOrgLiveSessions(ctx, orgsdb.PendingOrgLiveSessionsParams{MaxRows: r.limit()})
	if err != nil {
		return res, fmt.Errorf("org deletion: live sessions: %w", err)
	}
	for _, s := range live {
		if err := r.pause(ctx, s.OrgID, s.ID); err != nil {
			res.PauseFailed++
			r.log().Warn("org deletion: pausing a session failed; retried next pass", "org_id", s.OrgID, "session_id", s.ID, "err", err)
			continue
		}
		res.Paused++
	}
	now := r.now()
	due, err := q.DueOrgDeletions(ctx, orgsdb.DueOrgDeletionsParams{Now: &now, MaxRows: r.limit()})
	if err != nil {
		return res, fmt.Errorf("org deletion: due organizations: %w", err)
	}
	for _, id := range due {
		f, err := r.Finalize(ctx, id)
		switch {
		case err != nil:
			res.Failed++
			r.log().Warn("org deletion: finalizing failed; retried next pass", "org_id", id, "err", err)
		case f.Deleted:
			res.Finalized++
			r.log().Info("org deletion: organization deleted", "org_id", id, "removed", f.Removed)
		}
	}
	return res, nil
}

func (r *Reaper) pause(ctx context.Context, orgID, sessionID string) error {
	if r.Pauser == nil {
		return errors.New("no session pauser configured")
	}
	return r.Pauser.Pause(ctx, orgID, sessionID, PauseReasonDeletion)
}

// Finalize deletes an organization whose grace period is over, with
// everything in it (the steps are on Reaper). An organization that is gone,
// not scheduled or not yet due is left alone (Deleted false, no error).
func (r *Reaper) Finalize(ctx context.Context, orgID string) (Finalized, error) {
	out := Finalized{Removed: map[string]int{}}
	st, err := orgsdb.New(r.Pool).OrgDeletion(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read organization: %w", err)
	}
	out.Name = st.Name
	if st.DeleteAfter == nil || r.now().Before(*st.DeleteAfter) {
		return out, nil
	}
	live, err := orgsdb.New(r.Pool).PendingOrgLiveSessions(ctx, orgsdb.PendingOrgLiveSessionsParams{OrgID: &orgID, MaxRows: 10000})
	if err != nil {
		return out, fmt.Errorf("live sessions: %w", err)
	}
	for _, s := range live {
		if err := r.pause(ctx, orgID, s.ID); err != nil {
			return out, fmt.Errorf("pause session %s: %w", s.ID, err)
		}
	}
	if r.Disconnect != nil {
		if err := r.Disconnect(ctx, orgID); err != nil {
			return out, fmt.Errorf("disconnect integrations: %w", err)
		}
	}
	if r.RevokeKeys != nil {
		if err := r.RevokeKeys(ctx, orgID); err != nil {
			r.log().Warn("org deletion: revoking LLM keys failed (they expire on their own)", "org_id", orgID, "err", err)
		}
	}
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return out, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	q := orgsdb.New(tx)
	row, err := q.LockOrgForDeletion(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil // a concurrent finalization won
	}
	if err != nil {
		return out, fmt.Errorf("lock organization: %w", err)
	}
	if row.DeleteAfter == nil || r.now().Before(*row.DeleteAfter) {
		return out, nil
	}
	// A session that became live after the pauses above (none can start
	// once scheduled) holds the deletion back until the next pass.
	if still, err := q.PendingOrgLiveSessions(ctx, orgsdb.PendingOrgLiveSessionsParams{OrgID: &orgID, MaxRows: 1}); err != nil {
		return out, err
	} else if len(still) > 0 {
		return out, fmt.Errorf("session %s is still live", still[0].ID)
	}
	c, err := q.OrgDeletionCounts(ctx, orgID)
	if err != nil {
		return out, fmt.Errorf("count: %w", err)
	}
	out.Removed = map[string]int{"members": int(c.Members), "invitations": int(c.Invitations), "sessions": int(c.Sessions),
		"repos": int(c.Repos), "integrations": int(c.Integrations), "secrets": int(c.Secrets), "api_keys": int(c.ApiKeys),
		"automations": int(c.Automations)}
	removed := map[string]any{}
	for k, v := range out.Removed {
		removed[k] = v
	}
	details := map[string]any{"name": row.Name, "removed": removed,
		"deletion_scheduled_at": row.DeletionScheduledAt.UTC().Format(time.RFC3339)}
	if row.DeletionScheduledBy != nil {
		details["deletion_scheduled_by"] = *row.DeletionScheduledBy
	}
	// The platform deletes it (actor system); audit_log keeps the row with
	// its org_id cleared by the foreign key, audit.events keeps the event.
	if err := audit(ctx, tx, Actor{}, Audit{OrgID: orgID, Action: "org.delete", TargetType: "organization", TargetID: orgID,
		Details: details}); err != nil {
		return out, err
	}
	if _, err := q.DeleteOrg(ctx, orgID); err != nil {
		return out, fmt.Errorf("delete organization: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return out, err
	}
	out.Deleted = true
	return out, nil
}
