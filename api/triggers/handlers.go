package triggers

import (
	"net/http"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/store"
)

// --- triggers --------------------------------------------------------------------

func (h *handlers) createTrigger(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	var req CreateTriggerRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	t, err := h.st.CreateTrigger(c.Request.Context(), c.OrgID(), id, store.TriggerInput{
		TriggerType: req.TriggerType, Provider: req.Provider, Config: req.Config, IntegrationID: req.IntegrationID,
		Enabled: req.Enabled == nil || *req.Enabled,
	}, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusCreated, t)
}

func (h *handlers) listTriggers(c *api.Ctx) error {
	p, sp, err := page(c)
	if err != nil {
		return err
	}
	var q queryErrs
	f := store.TriggerFilter{
		AutomationID: q.uuid(c, "automation_id"), Provider: q.provider(c),
		TriggerType: q.oneOf(c, "trigger_type", store.TypeWebhook, store.TypePolling, store.TypeScheduled, store.TypeManual),
	}
	if err := q.err(); err != nil {
		return err
	}
	rows, err := h.st.ListTriggers(c.Request.Context(), c.OrgID(), c.UserID(), f, sp)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(t store.Trigger) (time.Time, string) { return t.CreatedAt, t.ID }))
}

func (h *handlers) getTrigger(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "trigger")
	if err != nil {
		return err
	}
	t, err := h.st.GetTrigger(c.Request.Context(), c.OrgID(), c.UserID(), id)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, t)
}

func (h *handlers) updateTrigger(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "trigger")
	if err != nil {
		return err
	}
	var req UpdateTriggerRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	t, err := h.st.UpdateTrigger(c.Request.Context(), c.OrgID(), id, store.TriggerPatch{Config: req.Config, Enabled: req.Enabled}, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, t)
}

func (h *handlers) deleteTrigger(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "trigger")
	if err != nil {
		return err
	}
	if err := h.st.DeleteTrigger(c.Request.Context(), c.OrgID(), id, audit(c)); err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) rotateSecret(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "trigger")
	if err != nil {
		return err
	}
	t, err := h.st.RotateSecret(c.Request.Context(), c.OrgID(), id, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, t)
}

// --- events ----------------------------------------------------------------------

func (h *handlers) listEvents(c *api.Ctx) error {
	p, sp, err := page(c)
	if err != nil {
		return err
	}
	var q queryErrs
	f := store.EventFilter{
		TriggerID: q.uuid(c, "trigger_id"), AutomationID: q.uuid(c, "automation_id"),
		Status: q.oneOf(c, "status", store.EventStatuses...), Provider: q.provider(c),
		Since: q.time(c, "since"), Until: q.time(c, "until"),
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		q = append(q, httpapi.FieldError{Field: "until", Problem: "must be after since"})
	}
	if err := q.err(); err != nil {
		return err
	}
	rows, err := h.st.ListEvents(c.Request.Context(), c.OrgID(), f, sp)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(e store.Event) (time.Time, string) { return e.CreatedAt, e.ID }))
}

func (h *handlers) getEvent(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "trigger event")
	if err != nil {
		return err
	}
	ev, err := h.st.GetEvent(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, ev)
}

func (h *handlers) skipEvent(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "trigger event")
	if err != nil {
		return err
	}
	ev, err := h.st.SkipEvent(c.Request.Context(), c.OrgID(), id, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, ev)
}

// --- schedules -------------------------------------------------------------------

func (h *handlers) createSchedule(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	var req CreateScheduleRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	in := store.ScheduleInput{CronExpression: req.CronExpression, Enabled: req.Enabled == nil || *req.Enabled}
	if req.Name != nil {
		in.Name = strings.TrimSpace(*req.Name)
	}
	if req.Timezone != nil {
		in.Timezone = strings.TrimSpace(*req.Timezone)
	}
	sc, err := h.st.CreateSchedule(c.Request.Context(), c.OrgID(), id, in, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusCreated, sc)
}

func (h *handlers) listSchedules(c *api.Ctx) error {
	p, sp, err := page(c)
	if err != nil {
		return err
	}
	var q queryErrs
	f := store.ScheduleFilter{AutomationID: q.uuid(c, "automation_id")}
	if err := q.err(); err != nil {
		return err
	}
	rows, err := h.st.ListSchedules(c.Request.Context(), c.OrgID(), f, sp)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(s store.Schedule) (time.Time, string) { return s.CreatedAt, s.ID }))
}

func (h *handlers) getSchedule(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "schedule")
	if err != nil {
		return err
	}
	sc, err := h.st.GetSchedule(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, sc)
}

func (h *handlers) updateSchedule(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "schedule")
	if err != nil {
		return err
	}
	var req UpdateScheduleRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	p := store.SchedulePatch{CronExpression: req.CronExpression, Enabled: req.Enabled}
	if req.Name != nil {
		name := strings.TrimSpace(*req.Name)
		p.Name = &name
	}
	if req.Timezone != nil {
		tz := strings.TrimSpace(*req.Timezone)
		p.Timezone = &tz
	}
	sc, err := h.st.UpdateSchedule(c.Request.Context(), c.OrgID(), id, p, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, sc)
}

func (h *handlers) deleteSchedule(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "schedule")
	if err != nil {
		return err
	}
	if err := h.st.DeleteSchedule(c.Request.Context(), c.OrgID(), id, audit(c)); err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

// --- providers -------------------------------------------------------------------

func (h *handlers) listProviders(c *api.Ctx) error {
	return c.Reply(http.StatusOK, providerList())
}
