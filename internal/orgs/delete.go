package orgs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Codes of the deletion lifecycle.
const (
	// CodePendingDeletion refuses what would start or change work in an
	// organization scheduled for deletion (restore it first).
	CodePendingDeletion = "org_pending_deletion"
	// CodeNotPendingDeletion refuses restoring an organization that is not
	// scheduled for deletion.
	CodeNotPendingDeletion = "org_not_pending_deletion"
	// CodeDeletionGraceOver refuses restoring an organization whose grace
	// period is over (its deletion is under way).
	CodeDeletionGraceOver = "org_deletion_grace_over"
)

// ErrPendingDeletion is returned by the checks of work that would start in
// an organization scheduled for deletion (PendingDeletion callers wrap it).
var ErrPendingDeletion = errors.New("orgs: the organization is scheduled for deletion")

// DefaultDeletionGrace is the grace period when none is configured.
const DefaultDeletionGrace = 7 * 24 * time.Hour

// Deletion is an organization's scheduled deletion.
type Deletion struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// ScheduledAt is when its owner asked; DeleteAfter when the deletion
	// happens (until then an owner may restore it).
	ScheduledAt time.Time `json:"deletion_scheduled_at"`
	DeleteAfter time.Time `json:"delete_after"`
	ScheduledBy *string   `json:"deletion_scheduled_by"`
}

// PendingDeletion reports whether orgID is scheduled for deletion, holding
// a key-share lock on its row in q's transaction: a schedule committing
// meanwhile waits for it, so work admitted here is seen as live by the
// org-deletion job. A missing organization is not pending.
func PendingDeletion(ctx context.Context, q orgsdb.DBTX, orgID string) (bool, error) {
	return orgsdb.New(q).OrgDeletionPending(ctx, orgID)
}

// ScheduleDeletion schedules the deletion of an organization grace from
// now. Only an owner may, confirming with the organization's exact name;
// personal organizations are not deleted (each person keeps theirs); a
// caller who is not a member gets not found, as if it did not exist.
// Scheduling an organization already scheduled returns its schedule
// unchanged.
//
// From the schedule on, its live sessions are paused by the org-deletion
// job, nothing new starts (sessions, runs, trigger events), API keys cannot
// act in it and its people may only read; DeleteAfter on, the job deletes
// it for good (Reaper.Finalize).
func (s *Store) ScheduleDeletion(ctx context.Context, a Actor, orgID, confirmName string, grace time.Duration) (Deletion, error) {
	if grace <= 0 {
		grace = DefaultDeletionGrace
	}
	var out Deletion
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		row, err := s.lockForOwner(ctx, tx, a, orgID, "delete")
		if err != nil {
			return err
		}
		out = Deletion{ID: orgID, Name: row.Name}
		if row.IsPersonal {
			return conflict(CodePersonalOrg, "a personal organization cannot be deleted")
		}
		if strings.TrimSpace(confirmName) != row.Name {
			return invalid("confirm_name", "must be the organization's name exactly, to confirm the deletion")
		}
		if row.DeleteAfter != nil {
			out.ScheduledAt, out.DeleteAfter, out.ScheduledBy = *row.DeletionScheduledAt, *row.DeleteAfter, row.DeletionScheduledBy
			return nil
		}
		now := s.now().UTC().Truncate(time.Microsecond)
		out.ScheduledAt, out.DeleteAfter, out.ScheduledBy = now, now.Add(grace), &a.UserID
		if err := orgsdb.New(tx).ScheduleOrgDeletion(ctx, orgsdb.ScheduleOrgDeletionParams{ID: orgID, ScheduledAt: &now,
			DeleteAfter: &out.DeleteAfter, ScheduledBy: &a.UserID}); err != nil {
			return err
		}
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "org.deletion_schedule", TargetType: "organization", TargetID: orgID,
			Details: map[string]any{"name": row.Name, "delete_after": out.DeleteAfter.Format(time.RFC3339)}})
	})
	return out, err
}

// RestoreDeletion cancels an organization's scheduled deletion: owners
// only, within the grace period. Its paused sessions resume on their next
// connect, its API keys act again.
func (s *Store) RestoreDeletion(ctx context.Context, a Actor, orgID string) (Membership, error) {
	var out Membership
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		row, err := s.lockForOwner(ctx, tx, a, orgID, "restore")
		if err != nil {
			return err
		}
		if row.DeleteAfter == nil {
			return conflict(CodeNotPendingDeletion, "the organization is not scheduled for deletion")
		}
		if !s.now().Before(*row.DeleteAfter) {
			return conflict(CodeDeletionGraceOver, "the grace period is over: the organization is being deleted")
		}
		if err := orgsdb.New(tx).CancelOrgDeletion(ctx, orgID); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "org.deletion_cancel", TargetType: "organization", TargetID: orgID,
			Details: map[string]any{"name": row.Name}}); err != nil {
			return err
		}
		out, err = membership(ctx, tx, orgID, a.UserID)
		return err
	})
	return out, err
}

// lockForOwner locks the organization's row for an owner's deletion or
// restore: not found for a missing organization and for one the actor is
// not a member of (its existence is not revealed), forbidden for members
// and admins.
func (s *Store) lockForOwner(ctx context.Context, tx pgx.Tx, a Actor, orgID, verb string) (orgsdb.LockOrgForDeletionRow, error) {
	row, err := orgsdb.New(tx).LockOrgForDeletion(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, notFound("organization")
	}
	if err != nil {
		return row, fmt.Errorf("lock organization: %w", err)
	}
	role, err := roleIn(ctx, tx, orgID, a.UserID)
	if err != nil {
		return row, err
	}
	if role == "" {
		return row, notFound("organization")
	}
	if role != auth.RoleOwner {
		return row, forbidden("only owners can " + verb + " an organization")
	}
	return row, nil
}

// BootGate gates the gateway's resumes and CLI connects (hub.Deps.Gate):
// an organization scheduled for deletion boots nothing (its sessions were
// paused for it and resume after a restore), refused as a gate denial with
// code org_pending_deletion; otherwise next decides (the billing gate).
func BootGate(q orgsdb.DBTX, next func(ctx context.Context, orgID string, op billing.Operation) error) func(ctx context.Context, orgID string, op billing.Operation) error {
	return func(ctx context.Context, orgID string, op billing.Operation) error {
		pending, err := PendingDeletion(ctx, q, orgID)
		if err != nil {
			return err
		}
		if pending {
			return &billing.Denial{Code: CodePendingDeletion, Action: "restore_org",
				Message: "the organization is scheduled for deletion; an owner can restore it"}
		}
		if next == nil {
			return nil
		}
		return next(ctx, orgID, op)
	}
}
