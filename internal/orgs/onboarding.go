package orgs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Onboarding is where an organization stands in its first steps.
type Onboarding struct {
	// HasOrg is false for a person without an active organization (they
	// must create or join one first); the other fields are then zero.
	HasOrg             bool          `json:"has_org"`
	OrgID              string        `json:"org_id,omitempty"`
	IsPersonal         bool          `json:"is_personal"`
	OnboardingComplete bool          `json:"onboarding_complete"`
	TrialRequested     bool          `json:"trial_requested"`
	Trial              *TrialRequest `json:"trial"`
	BillingState       string        `json:"billing_state"`
	RepoCount          int           `json:"repo_count"`
	MemberCount        int           `json:"member_count"`
}

// TrialRequest is an owner's request to start the trial, recorded once per
// organization. Billing grants the trial credits from it.
type TrialRequest struct {
	ID          string    `json:"id"`
	Plan        string    `json:"plan"`
	RequestedBy *string   `json:"requested_by"`
	CreatedAt   time.Time `json:"created_at"`
}

// OnboardingStatus reads orgID's onboarding state ("" orgID: no org).
func (s *Store) OnboardingStatus(ctx context.Context, orgID string) (Onboarding, error) {
	var o Onboarding
	if orgID == "" {
		return o, nil
	}
	var tid, plan, by *string
	var tat *time.Time
	err := s.Pool.QueryRow(ctx, `SELECT o.is_personal, o.onboarding_complete, o.billing_state,
			(SELECT count(*) FROM repos r WHERE r.org_id = o.id),
			(SELECT count(*) FROM members m WHERE m.org_id = o.id),
			t.id::text, t.plan, t.requested_by::text, t.created_at
		FROM organizations o LEFT JOIN trial_requests t ON t.org_id = o.id WHERE o.id = $1`, orgID).
		Scan(&o.IsPersonal, &o.OnboardingComplete, &o.BillingState, &o.RepoCount, &o.MemberCount, &tid, &plan, &by, &tat)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, nil
	}
	if err != nil {
		return o, err
	}
	o.HasOrg, o.OrgID = true, orgID
	if tid != nil {
		o.TrialRequested = true
		o.Trial = &TrialRequest{ID: *tid, Plan: *plan, RequestedBy: by, CreatedAt: *tat}
	}
	return o, nil
}

// CompleteOnboarding marks orgID's onboarding complete (idempotent).
func (s *Store) CompleteOnboarding(ctx context.Context, a Actor, orgID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE organizations SET onboarding_complete = true, updated_at = now()
			WHERE id = $1 AND NOT onboarding_complete`, orgID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "onboarding.complete", TargetType: "organization", TargetID: orgID})
	})
}

// RequestTrial records the trial request of orgID once. A repeated request
// returns the first record (whatever plan it names) and created=false.
func (s *Store) RequestTrial(ctx context.Context, a Actor, orgID, plan string) (tr TrialRequest, created bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO trial_requests (org_id, requested_by, plan) VALUES ($1, $2, $3)
			ON CONFLICT (org_id) DO NOTHING RETURNING id::text, plan, requested_by::text, created_at`, orgID, a.UserID, plan).
			Scan(&tr.ID, &tr.Plan, &tr.RequestedBy, &tr.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return tx.QueryRow(ctx, `SELECT id::text, plan, requested_by::text, created_at FROM trial_requests WHERE org_id = $1`, orgID).
				Scan(&tr.ID, &tr.Plan, &tr.RequestedBy, &tr.CreatedAt)
		}
		if err != nil {
			return err
		}
		created = true
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "onboarding.trial_request", TargetType: "trial_request", TargetID: tr.ID,
			Details: map[string]any{"plan": plan}})
	})
	return tr, created, err
}
