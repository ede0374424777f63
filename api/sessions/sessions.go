// Package sessions is the dashboard REST API of sessions (under /api/v1, for
// members of the organization): create (scratch or from a configuration,
// deferred or immediate sandbox), list with filters and cursor pages, read,
// rename, delete, pause, snapshot, and completion notifications. Handlers are
// thin; the domain lives in internal/sessions.
//
// Decisions:
//   - Every route is for members of the organization; ids of another
//     organization (or malformed ids) are 404, and lists never show them.
//   - Mutations (rename, delete, pause, snapshot) are for the session's
//     creator or an admin/owner; headless sessions (no creator: automation,
//     Slack) are for admins. Subscribing to notifications is for any member
//     who can see the session: it only concerns the caller.
//   - POST /sessions is idempotent per organization with an Idempotency-Key
//     header: the first request creates (201), repeats return the same
//     session (200), whatever their bodies. The concurrent-session limit
//     answers 409 session_limit. A configuration that is not the
//     organization's is a validation error on configuration_id.
//   - Immediate sessions are started through the gateway (Options.Runtime)
//     right after creation; a failed start is logged, not fatal: the session
//     starts on first connect like a deferred one.
//   - Pausing a session with a live sandbox (running, or starting with a
//     sandbox) goes through the gateway (503 without one); any other
//     starting session is just marked paused. Pausing a paused session is a
//     no-op; stopped and failed sessions answer 409 invalid_transition.
//   - Snapshots need a running session and the gateway.
//   - system_prompt at creation (at most 20000 characters) replaces the
//     mode's system prompt of the agent; the gateway still appends what the
//     session works on and the mode-critical instructions
//     (prompts.Resolve), so an automation still reports its outcome.
//   - GET /sessions/:id/evidence lists the verify tool's evidence; its
//     content route serves one file as an attachment (nosniff, sandboxing
//     CSP) from the blob store, within the organization (another
//     organization's session or evidence is 404).
//   - Every session carries display_status (internal/sessions.DisplayStatus):
//     what the status means to a person (an idle-paused session is idle, not
//     paused).
package sessions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessionnotify"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
)

const tag = "sessions"

// Runtime is the running gateway, for the operations that need the live
// sandbox (the lead passes the gateway client).
type Runtime interface {
	// Start brings the session's sandbox up (sandbox_mode immediate).
	Start(ctx context.Context, orgID, sessionID string) error
	// Pause snapshots and stops a live session's sandbox and marks the
	// session paused.
	Pause(ctx context.Context, orgID, sessionID string) error
	// Snapshot saves a snapshot of a live session's sandbox, which keeps
	// running, and returns its id.
	Snapshot(ctx context.Context, orgID, sessionID string) (string, error)
}

// Options configure the routes.
type Options struct {
	// Runtime reaches the gateway; nil: pause of a session with a live
	// sandbox and snapshots answer 503, and immediate sessions start on
	// first connect.
	Runtime Runtime
	// Codec encodes session events; default: the server's
	// (api.Server.EventCodec).
	Codec *schemas.Codec
	// MaxConcurrent is the per-organization live-session limit; 0 takes
	// the configured MAX_CONCURRENT_SESSIONS (whose 0 is unlimited), a
	// negative value means unlimited.
	MaxConcurrent int
	// Admit is the billing gate of session creation (billing.Gate{Enabled:
	// cfg.BillingEnabled}); a refusal answers 402 with the denial's code and
	// action. nil: no billing gate.
	Admit sessions.Admitter
	// Prebuilt records a finalized setup session's snapshot as its
	// configuration's (POST /sessions/:id/finalize); nil: finalization
	// answers 503.
	Prebuilt Prebuilt
	// Blobs holds the verify tool's evidence files (GET
	// /sessions/:id/evidence/:evidence_id/content); nil: the store the
	// configuration names (blobstore.OpenConfig), opened at the first
	// download.
	Blobs blobstore.Store
}

// Register registers the routes without a runtime.
func Register(s *api.Server) error { return RegisterWith(Options{})(s) }

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		if o.Codec == nil {
			var err error
			if o.Codec, err = s.EventCodec(); err != nil {
				return fmt.Errorf("sessions: %w", err)
			}
		}
		limit := o.MaxConcurrent
		if limit == 0 {
			limit = s.Cfg.MaxConcurrentSessions
		}
		h := &handlers{store: &sessions.Store{Pool: s.Pool, Codec: o.Codec, MaxConcurrent: max(limit, 0), Admit: o.Admit}, rt: o.Runtime,
			now: s.Now, prebuilt: o.Prebuilt}
		h.evidence = &evidence.Store{Pool: s.Pool}
		h.blobs = sync.OnceValues(func() (blobstore.Store, error) {
			if o.Blobs != nil {
				return o.Blobs, nil
			}
			return blobstore.OpenConfig(s.Cfg)
		})
		for _, r := range h.routes() {
			s.Handle(r)
		}
		return nil
	}
}

type handlers struct {
	store *sessions.Store
	rt    Runtime
	now   func() time.Time
	// prebuilt records finalized setup sessions' snapshots (finalize.go).
	prebuilt Prebuilt
	// evidence lists the verify tool's evidence; blobs opens its store.
	evidence *evidence.Store
	blobs    func() (blobstore.Store, error)
}

func (h *handlers) routes() []api.Route {
	return append([]api.Route{
		{Method: http.MethodPost, Path: "/sessions", Summary: "Create a session (scratch or from a configuration)", Tag: tag,
			Access: api.OrgMember, Request: CreateRequest{}, Response: Session{}, Status: http.StatusCreated, Handler: h.create},
		{Method: http.MethodGet, Path: "/sessions", Summary: "List the organization's sessions, newest first", Tag: tag,
			Access: api.OrgMember, Response: api.Page[Session]{}, Handler: h.list,
			Query: append([]api.Param{
				{Name: "status", Description: "only sessions in this stored status: " + strings.Join(statuses, ", ")},
				{Name: "type", Description: "only sessions of this type: " + strings.Join(types, ", ")},
				{Name: "mine", Description: "true: only sessions the caller created"},
				{Name: "origin", Description: "automation: only automations' sessions; manual: only the others"},
				{Name: "needs_input", Description: "true: only sessions with an action waiting for a person's approval"},
			}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/sessions/:id", Summary: "A session", Tag: tag, Access: api.OrgMember,
			Response: Session{}, Handler: h.get},
		{Method: http.MethodPatch, Path: "/sessions/:id", Summary: "Rename a session", Tag: tag, Access: api.OrgMember,
			Request: RenameRequest{}, Response: Session{}, Handler: h.rename},
		{Method: http.MethodDelete, Path: "/sessions/:id", Summary: "Delete a session", Tag: tag, Access: api.OrgMember,
			Status: http.StatusNoContent, Handler: h.delete},
		{Method: http.MethodPost, Path: "/sessions/:id/pause", Summary: "Pause a session (snapshot and stop its sandbox)", Tag: tag,
			Access: api.OrgMember, Response: Session{}, Handler: h.pause},
		{Method: http.MethodPost, Path: "/sessions/:id/snapshot", Summary: "Snapshot a running session's sandbox", Tag: tag,
			Access: api.OrgMember, Response: SnapshotResponse{}, Handler: h.snapshot},
		{Method: http.MethodPost, Path: "/sessions/:id/finalize", Summary: "Finalize a running setup session: its snapshot becomes its configuration's ready snapshot",
			Tag: tag, Access: api.OrgMember, Response: FinalizeResponse{}, Handler: h.finalize},
		{Method: http.MethodPost, Path: "/sessions/:id/notifications", Summary: "Be told in Slack when the session completes",
			Tag: tag, Access: api.OrgMember, Request: SubscribeRequest{}, Response: Subscription{}, Status: http.StatusCreated,
			Handler: h.subscribe},
		{Method: http.MethodDelete, Path: "/sessions/:id/notifications", Summary: "Stop being told when the session completes",
			Tag: tag, Access: api.OrgMember, Status: http.StatusNoContent, Handler: h.unsubscribe},
	}, h.evidenceRoutes()...)
}

var (
	statuses = []string{sessions.StatusStarting, sessions.StatusRunning, sessions.StatusPaused, sessions.StatusStopped, sessions.StatusFailed}
	types    = []string{sessions.TypeSetup, sessions.TypeCoding, sessions.TypeAutomation}
)

// Metrics are a session's telemetry counters.
type Metrics struct {
	ToolCalls         int `json:"tool_calls"`
	MessagesExchanged int `json:"messages_exchanged"`
	ActiveSeconds     int `json:"active_seconds"`
}

// Session is a session as the dashboard sees it (no sandbox internals).
type Session struct {
	ID              string     `json:"id"`
	OrgID           string     `json:"org_id"`
	CreatedBy       *string    `json:"created_by"`
	ConfigurationID *string    `json:"configuration_id"`
	SessionType     string     `json:"session_type"`
	Status          string     `json:"status"`
	DisplayStatus   string     `json:"display_status"`
	ClientType      string     `json:"client_type"`
	SandboxMode     string     `json:"sandbox_mode"`
	SandboxProvider string     `json:"sandbox_provider"`
	HasSnapshot     bool       `json:"has_snapshot"`
	ModelID         string     `json:"model_id"`
	Title           string     `json:"title"`
	InitialPrompt   *string    `json:"initial_prompt"`
	SystemPrompt    *string    `json:"system_prompt"`
	AutomationID    *string    `json:"automation_id"`
	AutomationName  *string    `json:"automation_name,omitempty"` // while the automation exists
	RunID           *string    `json:"run_id"`
	TriggerEventID  *string    `json:"trigger_event_id"`
	StartedAt       time.Time  `json:"started_at"`
	LastActivityAt  time.Time  `json:"last_activity_at"`
	PausedAt        *time.Time `json:"paused_at"`
	EndedAt         *time.Time `json:"ended_at"`
	PauseReason     *string    `json:"pause_reason"`
	StopReason      *string    `json:"stop_reason"`
	Outcome         *string    `json:"outcome"`
	Summary         *string    `json:"summary"`
	PRURLs          []string   `json:"pr_urls"`
	Metrics         Metrics    `json:"metrics"`
	LatestTask      *string    `json:"latest_task"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
}

func view(s sessions.Session, now time.Time) Session {
	urls := s.PRURLs
	if urls == nil {
		urls = []string{}
	}
	return Session{ID: s.ID, OrgID: s.OrgID, CreatedBy: s.CreatedBy, ConfigurationID: s.ConfigurationID,
		SessionType: s.SessionType, Status: s.Status, DisplayStatus: sessions.DisplayStatus(s, nil, now),
		ClientType: s.ClientType, SandboxMode: s.SandboxMode, SandboxProvider: s.SandboxProvider,
		HasSnapshot: s.SnapshotID != nil, ModelID: s.ModelID, Title: s.Title, InitialPrompt: s.InitialPrompt, SystemPrompt: s.SystemPrompt,
		AutomationID: s.AutomationID, RunID: s.RunID, TriggerEventID: s.TriggerEventID, StartedAt: s.StartedAt,
		LastActivityAt: s.LastActivityAt, PausedAt: s.PausedAt, EndedAt: s.EndedAt, PauseReason: s.PauseReason,
		StopReason: s.StopReason, Outcome: s.Outcome, Summary: s.Summary, PRURLs: urls,
		Metrics:    Metrics{ToolCalls: s.ToolCalls, MessagesExchanged: s.MessagesExchanged, ActiveSeconds: s.ActiveSeconds},
		LatestTask: s.LatestTask, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// CreateRequest creates a session. Without configuration_id it is a scratch
// session (no repositories); setup sessions need one.
type CreateRequest struct {
	ConfigurationID *string `json:"configuration_id" binding:"omitempty,uuid"`
	SessionType     string  `json:"session_type" binding:"omitempty,oneof=coding setup"`
	SandboxMode     string  `json:"sandbox_mode" binding:"omitempty,oneof=deferred immediate"`
	ClientType      string  `json:"client_type" binding:"omitempty,oneof=web api cli"`
	ModelID         string  `json:"model_id" binding:"omitempty,max=100"`
	Title           string  `json:"title" binding:"max=300"`
	InitialPrompt   *string `json:"initial_prompt" binding:"omitempty,max=100000"`
	// SystemPrompt replaces the mode's system prompt of the agent; the
	// platform still appends what the session works on and the
	// mode-critical instructions (prompts.Resolve).
	SystemPrompt *string `json:"system_prompt" binding:"omitempty,max=20000"`
}

// Validate checks what tags cannot.
func (r *CreateRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if r.SessionType == sessions.TypeSetup && r.ConfigurationID == nil {
		fes = append(fes, httpapi.FieldError{Field: "configuration_id", Problem: "is required for a setup session"})
	}
	for name, v := range map[string]string{"title": r.Title, "model_id": r.ModelID} {
		if strings.ContainsRune(v, 0) {
			fes = append(fes, httpapi.FieldError{Field: name, Problem: "must not contain NUL characters"})
		}
	}
	if r.InitialPrompt != nil && strings.ContainsRune(*r.InitialPrompt, 0) {
		fes = append(fes, httpapi.FieldError{Field: "initial_prompt", Problem: "must not contain NUL characters"})
	}
	if r.SystemPrompt != nil && strings.ContainsRune(*r.SystemPrompt, 0) {
		fes = append(fes, httpapi.FieldError{Field: "system_prompt", Problem: "must not contain NUL characters"})
	}
	return fes
}

// RenameRequest renames a session.
type RenameRequest struct {
	Title string `json:"title" binding:"required,max=300"`
}

// Validate checks what tags cannot.
func (r *RenameRequest) Validate() []httpapi.FieldError {
	if strings.TrimSpace(r.Title) == "" || strings.ContainsRune(r.Title, 0) {
		return []httpapi.FieldError{{Field: "title", Problem: "must be non-blank text without NUL characters"}}
	}
	return nil
}

// SnapshotResponse is the id of the snapshot taken.
type SnapshotResponse struct {
	SnapshotID string `json:"snapshot_id"`
}

// SubscribeRequest says where in Slack to tell the caller.
type SubscribeRequest struct {
	SlackInstallationID string `json:"slack_installation_id" binding:"required,uuid"`
	SlackUserID         string `json:"slack_user_id" binding:"required,max=64"`
}

// Subscription is the caller's subscription to a session's completion.
type Subscription struct {
	ID                  string    `json:"id"`
	SessionID           string    `json:"session_id"`
	UserID              string    `json:"user_id"`
	SlackInstallationID string    `json:"slack_installation_id"`
	SlackUserID         string    `json:"slack_user_id"`
	EventTypes          []string  `json:"event_types"`
	CreatedAt           time.Time `json:"created_at"`
}

// mapErr turns domain errors into API errors (others become a 500).
func mapErr(err error) error {
	if d, ok := billing.AsDenial(err); ok {
		return DenialError(d)
	}
	switch {
	case errors.Is(err, sessions.ErrNotFound):
		return httpapi.NotFound("session")
	case errors.Is(err, sessions.ErrLimit):
		return httpapi.Conflict("session_limit", "the organization has reached its limit of concurrent sessions")
	case errors.Is(err, sessions.ErrOrgPendingDeletion):
		return httpapi.Conflict("org_pending_deletion", "the organization is scheduled for deletion; an owner can restore it")
	case errors.Is(err, sessions.ErrInvalidTransition):
		return httpapi.Conflict("invalid_transition", err.Error())
	case errors.Is(err, sessions.ErrConfigurationNotFound):
		return httpapi.Invalid(httpapi.FieldError{Field: "configuration_id", Problem: "no such configuration in this organization"})
	case errors.Is(err, sessions.ErrInvalid):
		return httpapi.Invalid(httpapi.FieldError{Field: "(body)", Problem: err.Error()})
	}
	return err
}

// DenialError is a billing denial as the API's error: 402 with the
// denial's stable code, and the action the user should take in details:
//
//	{"error": {"code": "credits_exhausted", "message": "…", "details": {"action": "buy_credits"}}}
func DenialError(d *billing.Denial) *httpapi.Error {
	return &httpapi.Error{Status: d.Status(), Code: d.Code, Message: d.Message, Details: map[string]string{"action": d.Action}}
}

func unavailable(msg string) error {
	return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, Message: msg}
}

func (h *handlers) create(c *api.Ctx) error {
	var req CreateRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	var key *string
	if k := c.GetHeader("Idempotency-Key"); k != "" {
		if len(k) > 200 {
			return httpapi.Invalid(httpapi.FieldError{Field: "Idempotency-Key", Problem: "must be at most 200 bytes"})
		}
		key = &k
	}
	p := c.Principal()
	clientType := req.ClientType
	if clientType == "" {
		clientType = sessions.ClientWeb
		if p.Kind == auth.KindAPIKey {
			clientType = sessions.ClientAPI
		}
	}
	uid := c.UserID()
	sess, created, err := h.store.Create(c.Request.Context(), sessions.CreateInput{
		OrgID: c.OrgID(), CreatedBy: &uid, ConfigurationID: req.ConfigurationID, SessionType: req.SessionType,
		ClientType: clientType, SandboxMode: req.SandboxMode, ModelID: req.ModelID, Title: req.Title,
		InitialPrompt: req.InitialPrompt, SystemPrompt: req.SystemPrompt, IdempotencyKey: key,
	})
	if err != nil {
		return mapErr(err)
	}
	if !created {
		return c.Reply(http.StatusOK, view(sess, h.now()))
	}
	if sess.SandboxMode == sessions.ModeImmediate && h.rt != nil {
		if err := h.rt.Start(c.Request.Context(), sess.OrgID, sess.ID); err != nil {
			c.Log().Warn("immediate session start failed; it starts on first connect", "session_id", sess.ID, "error", err)
		}
	}
	return c.Reply(http.StatusCreated, view(sess, h.now()))
}

func (h *handlers) list(c *api.Ctx) error {
	p, err := c.Page()
	if err != nil {
		return err
	}
	f := sessions.ListFilter{Status: c.Query("status"), SessionType: c.Query("type")}
	var fes []httpapi.FieldError
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		fes = append(fes, httpapi.FieldError{Field: "status", Problem: "must be one of " + strings.Join(statuses, ", ")})
	}
	if f.SessionType != "" && !slices.Contains(types, f.SessionType) {
		fes = append(fes, httpapi.FieldError{Field: "type", Problem: "must be one of " + strings.Join(types, ", ")})
	}
	switch c.Query("mine") {
	case "", "false":
	case "true":
		f.CreatedBy = c.UserID()
	default:
		fes = append(fes, httpapi.FieldError{Field: "mine", Problem: "must be true or false"})
	}
	switch f.Origin = c.Query("origin"); f.Origin {
	case "", sessions.OriginAutomation, sessions.OriginManual:
	default:
		fes = append(fes, httpapi.FieldError{Field: "origin", Problem: "must be automation or manual"})
	}
	needsInput := false
	switch c.Query("needs_input") {
	case "", "false":
	case "true":
		needsInput = true
	default:
		fes = append(fes, httpapi.FieldError{Field: "needs_input", Problem: "must be true or false"})
	}
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	if needsInput {
		if f.IDs, err = invocations.PendingSessionIDs(c.Request.Context(), h.store.Pool, c.OrgID()); err != nil {
			return err
		}
	}
	at, id := p.CursorArgs()
	rows, err := h.store.List(c.Request.Context(), c.OrgID(), f, sessions.Page{Limit: p.Limit, At: at, ID: id})
	if err != nil {
		return err
	}
	now := h.now()
	views := make([]Session, len(rows))
	for i, r := range rows {
		views[i] = view(r, now)
	}
	if err := h.nameAutomations(c.Request.Context(), c.OrgID(), views); err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(views, p.Limit, func(s Session) (time.Time, string) { return s.CreatedAt, s.ID }))
}

// load reads the session of the path in the caller's organization.
func (h *handlers) load(c *api.Ctx) (sessions.Session, error) {
	id, err := c.UUIDParam("id", "session")
	if err != nil {
		return sessions.Session{}, err
	}
	s, err := h.store.Get(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return s, mapErr(err)
	}
	return s, nil
}

// loadForChange reads the session and checks the caller may change it: its
// creator, or an admin (the only ones for headless sessions).
func (h *handlers) loadForChange(c *api.Ctx) (sessions.Session, error) {
	s, err := h.load(c)
	if err != nil {
		return s, err
	}
	p := c.Principal()
	if p.Role.AtLeast(auth.RoleAdmin) || (s.CreatedBy != nil && *s.CreatedBy == c.UserID()) {
		return s, nil
	}
	return s, httpapi.Forbidden("only the session's creator or an admin can change it")
}

func (h *handlers) get(c *api.Ctx) error {
	s, err := h.load(c)
	if err != nil {
		return err
	}
	v := []Session{view(s, h.now())}
	if err := h.nameAutomations(c.Request.Context(), c.OrgID(), v); err != nil {
		return err
	}
	return c.Reply(http.StatusOK, v[0])
}

// nameAutomations sets the automation's name on sessions of automations
// (one query per distinct automation; a deleted automation has none).
func (h *handlers) nameAutomations(ctx context.Context, orgID string, views []Session) error {
	names := map[string]*string{}
	q := triggersdb.New(h.store.Pool)
	for i := range views {
		id := views[i].AutomationID
		if id == nil {
			continue
		}
		name, seen := names[*id]
		if !seen {
			n, err := q.AutomationName(ctx, triggersdb.AutomationNameParams{ID: *id, OrgID: orgID})
			switch {
			case err == nil:
				name = &n
			case !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("automation name: %w", err)
			}
			names[*id] = name
		}
		views[i].AutomationName = name
	}
	return nil
}

func (h *handlers) rename(c *api.Ctx) error {
	s, err := h.loadForChange(c)
	if err != nil {
		return err
	}
	var req RenameRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	s, err = h.store.Rename(c.Request.Context(), c.OrgID(), s.ID, req.Title)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, view(s, h.now()))
}

func (h *handlers) delete(c *api.Ctx) error {
	s, err := h.loadForChange(c)
	if err != nil {
		return err
	}
	if err := h.store.Delete(c.Request.Context(), c.OrgID(), s.ID); err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

// hasSandbox reports whether a live sandbox may exist, so pausing must go
// through the gateway that owns it.
func hasSandbox(s sessions.Session) bool {
	return s.Status == sessions.StatusRunning || (s.Status == sessions.StatusStarting && s.SandboxID != nil)
}

func (h *handlers) pause(c *api.Ctx) error {
	s, err := h.loadForChange(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	switch {
	case s.Status == sessions.StatusStopped || s.Status == sessions.StatusFailed:
		return httpapi.Conflict("invalid_transition", "the session has ended ("+s.Status+")")
	case s.Status == sessions.StatusPaused:
		return c.Reply(http.StatusOK, view(s, h.now()))
	case !hasSandbox(s):
		// Nothing runs: only the row changes.
		s, err = h.store.MarkPaused(ctx, s.ID, "", "")
	case h.rt == nil:
		return unavailable("the session's sandbox is live and no gateway is reachable to pause it")
	default:
		if err := h.rt.Pause(ctx, s.OrgID, s.ID); err != nil {
			if errors.Is(err, sessions.ErrNotFound) || errors.Is(err, sessions.ErrInvalidTransition) {
				return mapErr(err)
			}
			c.Log().Error("pause through gateway failed", "session_id", s.ID, "error", err)
			return httpapi.Unavailable("the gateway could not pause the session")
		}
		s, err = h.store.Get(ctx, c.OrgID(), s.ID)
	}
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, view(s, h.now()))
}

func (h *handlers) snapshot(c *api.Ctx) error {
	s, err := h.loadForChange(c)
	if err != nil {
		return err
	}
	if s.Status != sessions.StatusRunning {
		return httpapi.Conflict("invalid_transition", "only a running session can be snapshotted (it is "+s.Status+")")
	}
	if h.rt == nil {
		return unavailable("no gateway is reachable to snapshot the session")
	}
	id, err := h.rt.Snapshot(c.Request.Context(), s.OrgID, s.ID)
	if err != nil {
		if errors.Is(err, sessions.ErrNotFound) || errors.Is(err, sessions.ErrInvalidTransition) {
			return mapErr(err)
		}
		c.Log().Error("snapshot through gateway failed", "session_id", s.ID, "error", err)
		return httpapi.Unavailable("the gateway could not snapshot the session")
	}
	return c.Reply(http.StatusOK, SnapshotResponse{SnapshotID: id})
}

func (h *handlers) subscribe(c *api.Ctx) error {
	s, err := h.load(c)
	if err != nil {
		return err
	}
	var req SubscribeRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	sub, err := sessionnotify.Subscribe(c.Request.Context(), h.store.Pool, c.OrgID(), s.ID, c.UserID(),
		req.SlackInstallationID, req.SlackUserID)
	if errors.Is(err, sessionnotify.ErrNotFound) {
		return httpapi.Invalid(httpapi.FieldError{Field: "slack_installation_id", Problem: "no such Slack installation in this organization"})
	}
	if err != nil {
		return err
	}
	return c.Reply(http.StatusCreated, Subscription{ID: sub.ID, SessionID: sub.SessionID, UserID: sub.UserID,
		SlackInstallationID: sub.SlackInstallationID, SlackUserID: sub.SlackUserID, EventTypes: sub.EventTypes,
		CreatedAt: sub.CreatedAt})
}

func (h *handlers) unsubscribe(c *api.Ctx) error {
	s, err := h.load(c)
	if err != nil {
		return err
	}
	if _, err := sessionnotify.Unsubscribe(c.Request.Context(), h.store.Pool, c.OrgID(), s.ID, c.UserID()); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}
