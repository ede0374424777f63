package orgs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
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
	st, err := orgsdb.New(s.Pool).OnboardingState(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, nil
	}
	if err != nil {
		return o, err
	}
	o.IsPersonal, o.OnboardingComplete, o.BillingState = st.IsPersonal, st.OnboardingComplete, st.BillingState
	o.RepoCount, o.MemberCount = int(st.RepoCount), int(st.MemberCount)
	o.HasOrg, o.OrgID = true, orgID
	if st.TrialID != nil {
		o.TrialRequested = true
		o.Trial = &TrialRequest{ID: *st.TrialID, Plan: *st.TrialPlan, RequestedBy: st.TrialRequestedBy, CreatedAt: *st.TrialCreatedAt}
	}
	return o, nil
}

// CompleteOnboarding marks orgID's onboarding complete (idempotent).
func (s *Store) CompleteOnboarding(ctx context.Context, a Actor, orgID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		n, err := orgsdb.New(tx).CompleteOnboarding(ctx, orgID)
		if err != nil || n == 0 {
			return err
		}
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "onboarding.complete", TargetType: "organization", TargetID: orgID})
	})
}

// RequestTrial records the trial request of orgID once. A repeated request
// returns the first record (whatever plan it names) and created=false.
func (s *Store) RequestTrial(ctx context.Context, a Actor, orgID, plan string) (tr TrialRequest, created bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		q := orgsdb.New(tx)
		row, err := q.InsertTrialRequest(ctx, orgsdb.InsertTrialRequestParams{OrgID: orgID, RequestedBy: &a.UserID, Plan: plan})
		if errors.Is(err, pgx.ErrNoRows) {
			prev, err := q.TrialRequestOf(ctx, orgID)
			tr = TrialRequest{ID: prev.ID, Plan: prev.Plan, RequestedBy: prev.RequestedBy, CreatedAt: prev.CreatedAt}
			return err
		}
		if err != nil {
			return err
		}
		tr = TrialRequest{ID: row.ID, Plan: row.Plan, RequestedBy: row.RequestedBy, CreatedAt: row.CreatedAt}
		created = true
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "onboarding.trial_request", TargetType: "trial_request", TargetID: tr.ID,
			Details: map[string]any{"plan": plan}})
	})
	return tr, created, err
}
