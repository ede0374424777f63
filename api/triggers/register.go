// Package triggers is the REST API of automations (every setting of the
// spec, enable/disable, integration connections), triggers, trigger events,
// cron schedules, "Run Now" and the provider catalog. Handlers are thin; the domain lives in
// internal/triggers/store, which filters every query on the caller's
// organization (ids of another organization are 404, like missing ones).
//
// Decisions:
//   - Reads are for every member; writes (automations, triggers, schedules,
//     secret rotation, skipping an event) need an admin. "Run Now" is open to
//     every member, as in the original (orgProcedure), and the run is
//     attributed to them.
//   - A webhook trigger without an integration (provider custom, or a
//     PostHog/Linear/Sentry/GitHub webhook pointed straight at the trigger)
//     gets its own URL (webhook_path t_ + 24 base62 characters) and a
//     32-byte secret; the secret is shown once, in the create response (and
//     once per rotation), stored sealed bound to the trigger id, and no other
//     response or log line carries it. Triggers with an integration receive
//     its webhooks (GitHub App, Nango) and have neither.
//   - Schedule triggers and the Run Now trigger belong to their schedule and
//     automation: PATCH/DELETE /triggers/:id refuse them (409 managed_trigger).
//   - Skipping a queued event cancels its run (status canceled). The
//     runs.lifecycle Avro enum has no "canceled" symbol, so that event says
//     to_status failed with status_reason manual_skip and error_code canceled.
//   - Deleting a trigger, schedule or automation deletes its events and runs
//     (the schema cascades), as the original did.
//   - Automation settings are validated whole before anything is written
//     (422 naming every bad field): shapes here, cross-field rules and
//     references in the store under a row lock on the merged result, so a
//     schema check constraint never answers a request. Referenced
//     configurations and Slack installations of another organization are
//     422 on the field; the installation must be active whenever
//     notifications are pointed at it; agent_decide needs a non-empty
//     allowlist (at most 50). PATCH keeps absent fields; null clears the
//     nullable ones.
//   - Integration connections: members list them; admins bind (PUT,
//     idempotent) and unbind. The integration must be visible to the caller
//     (another member's private integration is 404, like another org's) and
//     active to be bound (409 integration_inactive).
package triggers

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	auditlog "github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/triggers/store"
	"github.com/proliferate/proliferate/schemas"
)

// Route tags.
const (
	tagAutomations = "automations"
	tagTriggers    = "triggers"
	tagSchedules   = "schedules"
)

// Options override what Register derives from the configuration.
type Options struct {
	// Codec encodes outbox events; default: the server's
	// (api.Server.EventCodec).
	Codec *schemas.Codec
	// IngestURL is the public base URL of the ingest role, for custom
	// webhook URLs; default PUBLIC_URL.
	IngestURL string
	// Integrations binds integrations to automations; default: built from
	// the server's dependencies like api/integrations builds it.
	Integrations *integrations.Service
}

// Register registers the routes with the configured codec and URLs.
func Register(s *api.Server) error { return RegisterWith(Options{})(s) }

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		if o.Codec == nil {
			var err error
			if o.Codec, err = s.EventCodec(); err != nil {
				return fmt.Errorf("triggers: %w", err)
			}
		}
		if o.IngestURL == "" {
			o.IngestURL = s.Cfg.PublicURL
		}
		if o.Integrations == nil {
			svc, err := integrations.New(integrations.Options{Cfg: s.Cfg, Pool: s.Pool, Redis: s.Redis, Box: s.Box, Log: s.Log, Now: s.Now})
			if err != nil {
				return fmt.Errorf("triggers: integrations service: %w", err)
			}
			o.Integrations = svc
		}
		h := &handlers{st: &store.Store{Pool: s.Pool, Box: s.Box, Codec: o.Codec, IngestURL: o.IngestURL, Now: s.Now}, integ: o.Integrations}
		for _, r := range h.routes() {
			s.Handle(r)
		}
		return nil
	}
}

type handlers struct {
	st    *store.Store
	integ *integrations.Service
}

func (h *handlers) routes() []api.Route {
	idQuery := func(name, what string) api.Param {
		return api.Param{Name: name, Description: "only " + what + " (UUID)"}
	}
	return append(h.automationRoutes(), []api.Route{
		// triggers
		{Method: http.MethodPost, Path: "/automations/:id/triggers", Summary: "Create a trigger (webhook triggers without an integration: URL and secret, shown once)",
			Tag: tagTriggers, Access: api.OrgAdmin, Request: CreateTriggerRequest{}, Response: store.CreatedTrigger{},
			Status: http.StatusCreated, Handler: h.createTrigger},
		{Method: http.MethodGet, Path: "/triggers", Summary: "List triggers with pending event counts", Tag: tagTriggers,
			Access: api.OrgMember, Response: api.Page[store.Trigger]{}, Handler: h.listTriggers,
			Query: append([]api.Param{idQuery("automation_id", "this automation's triggers"),
				{Name: "provider", Description: "only this provider's triggers"},
				{Name: "trigger_type", Description: "webhook, polling, scheduled or manual"}}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/triggers/:id", Summary: "Get a trigger with its recent events and status counts",
			Tag: tagTriggers, Access: api.OrgMember, Response: store.TriggerDetail{}, Handler: h.getTrigger},
		{Method: http.MethodPatch, Path: "/triggers/:id", Summary: "Update a trigger's config or enabled flag", Tag: tagTriggers,
			Access: api.OrgAdmin, Request: UpdateTriggerRequest{}, Response: store.Trigger{}, Handler: h.updateTrigger},
		{Method: http.MethodDelete, Path: "/triggers/:id", Summary: "Delete a trigger with its events", Tag: tagTriggers,
			Access: api.OrgAdmin, Status: http.StatusNoContent, Handler: h.deleteTrigger},
		{Method: http.MethodPost, Path: "/triggers/:id/rotate-secret", Summary: "Give a trigger with its own webhook URL a new secret (shown once)",
			Tag: tagTriggers, Access: api.OrgAdmin, Response: store.CreatedTrigger{}, Handler: h.rotateSecret},

		// events
		{Method: http.MethodGet, Path: "/trigger-events", Summary: "List trigger events", Tag: tagTriggers, Access: api.OrgMember,
			Response: api.Page[store.Event]{}, Handler: h.listEvents,
			Query: append([]api.Param{idQuery("trigger_id", "this trigger's events"), idQuery("automation_id", "this automation's events"),
				{Name: "status", Description: "queued, processing, completed, failed or skipped"},
				{Name: "provider", Description: "only this provider's events"},
				{Name: "since", Description: "created at or after (RFC 3339)"},
				{Name: "until", Description: "created before (RFC 3339)"}}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/trigger-events/:id", Summary: "Get a trigger event with its parsed context", Tag: tagTriggers,
			Access: api.OrgMember, Response: store.Event{}, Handler: h.getEvent},
		{Method: http.MethodPost, Path: "/trigger-events/:id/skip", Summary: "Skip a queued event (its queued run is canceled)",
			Tag: tagTriggers, Access: api.OrgAdmin, Response: store.Event{}, Handler: h.skipEvent},

		// schedules
		{Method: http.MethodPost, Path: "/automations/:id/schedules", Summary: "Create a cron schedule", Tag: tagSchedules,
			Access: api.OrgAdmin, Request: CreateScheduleRequest{}, Response: store.Schedule{}, Status: http.StatusCreated,
			Handler: h.createSchedule},
		{Method: http.MethodGet, Path: "/schedules", Summary: "List schedules", Tag: tagSchedules, Access: api.OrgMember,
			Response: api.Page[store.Schedule]{}, Handler: h.listSchedules,
			Query: append([]api.Param{idQuery("automation_id", "this automation's schedules")}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/schedules/:id", Summary: "Get a schedule", Tag: tagSchedules, Access: api.OrgMember,
			Response: store.Schedule{}, Handler: h.getSchedule},
		{Method: http.MethodPatch, Path: "/schedules/:id", Summary: "Update a schedule (next_run_at is recomputed)", Tag: tagSchedules,
			Access: api.OrgAdmin, Request: UpdateScheduleRequest{}, Response: store.Schedule{}, Handler: h.updateSchedule},
		{Method: http.MethodDelete, Path: "/schedules/:id", Summary: "Delete a schedule and its trigger", Tag: tagSchedules,
			Access: api.OrgAdmin, Status: http.StatusNoContent, Handler: h.deleteSchedule},

		// providers
		{Method: http.MethodGet, Path: "/providers", Summary: "Trigger providers with their trigger types and config JSON Schemas",
			Tag: tagTriggers, Access: api.OrgMember, Response: ProvidersResponse{}, Handler: h.listProviders},
	}...)
}

// mapErr turns domain errors into API errors (others become a 500).
func mapErr(err error) error {
	var nf *store.NotFoundError
	var ve *store.ValidationError
	var ce *store.ConflictError
	switch {
	case errors.As(err, &nf):
		return httpapi.NotFound(nf.What)
	case errors.As(err, &ve):
		fes := make([]httpapi.FieldError, len(ve.Fields))
		for i, f := range ve.Fields {
			fes[i] = httpapi.FieldError{Field: f.Field, Problem: f.Problem}
		}
		return httpapi.Invalid(fes...)
	case errors.As(err, &ce):
		return httpapi.Conflict(ce.Code, ce.Message)
	}
	return err
}

// page parses ?limit and ?cursor into the store's list position.
func page(c *api.Ctx) (api.PageParams, store.Page, error) {
	p, err := c.Page()
	if err != nil {
		return p, store.Page{}, err
	}
	at, id := p.CursorArgs()
	return p, store.Page{Limit: p.Limit, At: at, ID: id}, nil
}

// audit is the caller of the request, for the audit trail.
func audit(c *api.Ctx) store.Audit {
	a := auditlog.ActorFrom(c.Request.Context())
	return store.Audit{UserID: c.UserID(), RequestID: c.RequestID(), APIKeyID: a.APIKeyID, ImpersonatorID: a.ImpersonatorID}
}

var providerRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// query filters ----------------------------------------------------------------

type queryErrs []httpapi.FieldError

func (q *queryErrs) uuid(c *api.Ctx, name string) string {
	v := c.Query(name)
	if v != "" && !api.IsUUID(v) {
		*q = append(*q, httpapi.FieldError{Field: name, Problem: "must be a UUID"})
		return ""
	}
	return v
}

func (q *queryErrs) provider(c *api.Ctx) string {
	v := c.Query("provider")
	if v != "" && !providerRE.MatchString(v) {
		*q = append(*q, httpapi.FieldError{Field: "provider", Problem: "must be a provider id (lower-case letters, digits, - and _, at most 32)"})
		return ""
	}
	return v
}

func (q *queryErrs) oneOf(c *api.Ctx, name string, allowed ...string) string {
	v := c.Query(name)
	if v == "" {
		return ""
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	*q = append(*q, httpapi.FieldError{Field: name, Problem: "must be one of " + strings.Join(allowed, ", ")})
	return ""
}

func (q *queryErrs) time(c *api.Ctx, name string) *time.Time {
	v := c.Query(name)
	if v == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		*q = append(*q, httpapi.FieldError{Field: name, Problem: "must be an RFC 3339 time such as 2025-01-02T15:04:05Z"})
		return nil
	}
	return &t
}

func (q queryErrs) err() error {
	if len(q) > 0 {
		return httpapi.Invalid(q...)
	}
	return nil
}
