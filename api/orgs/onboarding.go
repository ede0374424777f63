package orgs

import (
	"fmt"
	"net/http"
	"regexp"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/orgs"
)

type trialReq struct {
	Plan string `json:"plan" binding:"required,max=32"`
}

var planRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

func (r *trialReq) Validate() []httpapi.FieldError {
	if !planRE.MatchString(r.Plan) {
		return []httpapi.FieldError{{Field: "plan", Problem: "must be a plan name: lowercase letters, digits, dashes and underscores"}}
	}
	return nil
}

func (h *handlers) registerOnboarding() {
	// Person, not OrgMember: a person without an active organization gets
	// has_org=false (what the onboarding screen needs) instead of a 403.
	h.handle(api.Route{Method: "GET", Path: "/onboarding", Tag: TagOnboarding, Access: api.Person,
		Summary:  "Onboarding state of my active organization (has_org=false without one)",
		Response: orgs.Onboarding{}, Handler: h.onboarding})
	h.handle(api.Route{Method: "POST", Path: "/onboarding/complete", Tag: TagOnboarding, Access: api.OrgAdmin,
		Summary:  "Mark the active organization's onboarding complete (idempotent)",
		Response: orgs.Onboarding{}, Handler: h.completeOnboarding})
	h.handle(api.Route{Method: "POST", Path: "/onboarding/start-trial", Tag: TagOnboarding, Access: api.OrgOwner, Status: http.StatusCreated,
		Summary: "Record the trial request of the active organization for billing (201 the first time; 200 with the same record after)",
		Request: trialReq{}, Response: orgs.TrialRequest{}, Handler: h.startTrial})
}

func (h *handlers) onboarding(c *api.Ctx) error {
	o, err := h.store.OnboardingStatus(c.Request.Context(), c.OrgID())
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, o)
}

func (h *handlers) completeOnboarding(c *api.Ctx) error {
	if err := h.store.CompleteOnboarding(c.Request.Context(), actor(c), c.OrgID()); err != nil {
		return err
	}
	return h.onboarding(c)
}

func (h *handlers) startTrial(c *api.Ctx) error {
	var req trialReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	tr, created, err := h.store.RequestTrial(c.Request.Context(), actor(c), c.OrgID(), req.Plan)
	if err != nil {
		return err
	}
	if err := h.startBillingTrial(c, tr.Plan); err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.Reply(status, tr)
}

// startBillingTrial starts the organization's trial in the billing ledger
// (TrialCredits, state trial) with the recorded plan as the plan to
// activate when the trial runs out; a recorded plan that is not a billing
// plan starts the trial on the dev plan. Idempotent: the ledger starts a
// trial only from unconfigured and grants its credits once per
// organization, so a retry after a failure here completes the trial.
func (h *handlers) startBillingTrial(c *api.Ctx, plan string) error {
	if _, ok := billing.PlanByID(plan); !ok {
		plan = billing.PlanDev.ID
	}
	codec, err := h.s.EventCodec()
	if err != nil {
		return fmt.Errorf("start trial: %w", err)
	}
	l := &billing.Ledger{Pool: h.s.Pool, Codec: codec, Grace: h.s.Cfg.GracePeriod, Now: h.s.Now, Log: h.s.Log}
	if _, err := l.StartTrial(c.Request.Context(), c.OrgID(), plan, c.UserID()); err != nil {
		return fmt.Errorf("start trial of %s: %w", c.OrgID(), err)
	}
	return nil
}
