package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

// decode reads a JSON body strictly with the API's convention
// (httpapi.DecodeJSON): not JSON is 400, an unknown field or a wrong type 422.
func decode(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return httpapi.DecodeJSON(body, v)
}

// decodeOptional is decode for an optional body: an empty (or blank) body
// leaves v as it is.
func decodeOptional(r *http.Request, v any) error {
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	body, err := readBody(r)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return err
	}
	return httpapi.DecodeJSON(body, v)
}

// readBody reads the (size-limited) request body: 413 past the limit.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge, Message: "request body too large"}
		}
		return nil, httpapi.BadRequest("unreadable request body")
	}
	return body, nil
}

func invalid(field, problem string) error {
	return httpapi.Invalid(httpapi.FieldError{Field: field, Problem: problem})
}

// view is the wire form of a session.
func (s *Server) view(sess sessions.Session) protocol.Session {
	var busy *bool
	if h, ok := s.d.Hubs.Get(sess.ID); ok {
		if st := h.Status(); st.Agent == protocol.AgentBusy || st.Agent == protocol.AgentIdle {
			b := st.Agent == protocol.AgentBusy
			busy = &b
		}
	}
	pr := sess.PRURLs
	if pr == nil {
		pr = []string{}
	}
	return protocol.Session{
		ID: sess.ID, OrgID: sess.OrgID, CreatedBy: sess.CreatedBy, ConfigurationID: sess.ConfigurationID,
		SessionType: sess.SessionType, ClientType: sess.ClientType, SandboxMode: sess.SandboxMode,
		Status: sess.Status, DisplayStatus: sessions.DisplayStatus(sess, busy, s.d.Now()),
		Title: sess.Title, ModelID: sess.ModelID, AutomationID: sess.AutomationID, RunID: sess.RunID,
		SandboxProvider: sess.SandboxProvider, SandboxID: sess.SandboxID, SnapshotID: sess.SnapshotID,
		Outcome: sess.Outcome, Summary: sess.Summary, PauseReason: sess.PauseReason, StopReason: sess.StopReason,
		PRURLs: pr, ToolCalls: sess.ToolCalls, MessagesExchanged: sess.MessagesExchanged,
		ActiveSeconds: sess.ActiveSeconds, LatestTask: sess.LatestTask, StartedAt: sess.StartedAt,
		LastActivityAt: sess.LastActivityAt, PausedAt: sess.PausedAt, EndedAt: sess.EndedAt, CreatedAt: sess.CreatedAt,
	}
}

// denialError is a billing denial as the API's error: 402 with the
// denial's stable code and the action the user should take in details.
func denialError(d *billing.Denial) *httpapi.Error {
	return &httpapi.Error{Status: d.Status(), Code: d.Code, Message: d.Message, Details: map[string]string{"action": d.Action}}
}

// hubError maps hub errors to API errors.
func hubError(w http.ResponseWriter, err error) error {
	if d, ok := billing.AsDenial(err); ok {
		return denialError(d)
	}
	switch {
	case errors.Is(err, hub.ErrForbidden):
		return httpapi.Forbidden("only the session's creator can do this")
	case errors.Is(err, hub.ErrNotOwner):
		w.Header().Set("Retry-After", "1")
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: "not_owner", Message: protocol.ReasonNotOwner}
	case errors.Is(err, hub.ErrClosed):
		w.Header().Set("Retry-After", "1")
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, Message: "session hub is restarting; retry"}
	case errors.Is(err, hub.ErrSessionEnded):
		return httpapi.Conflict("session_ended", "the session has ended")
	case errors.Is(err, hub.ErrEmptyPrompt):
		return invalid("content", "required")
	}
	return err
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	if p.Kind == auth.KindSandbox {
		return httpapi.Forbidden("sandbox credentials cannot create sessions")
	}
	var req protocol.CreateSessionRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if key == "" {
		key = strings.TrimSpace(req.IdempotencyKey)
	}
	if len(key) > 200 {
		return invalid("idempotency_key", "at most 200 characters")
	}
	in := sessions.CreateInput{
		ConfigurationID: req.ConfigurationID, SessionType: req.SessionType, ClientType: req.ClientType,
		SandboxMode: req.SandboxMode, ModelID: req.ModelID, Title: req.Title, InitialPrompt: req.InitialPrompt,
		ClientMetadata: req.ClientMetadata,
	}
	if in.ClientType == "" {
		in.ClientType = sessions.ClientAPI
	}
	if key != "" {
		in.IdempotencyKey = &key
	}
	switch p.Kind {
	case auth.KindService:
		if !uuidRE.MatchString(req.OrgID) {
			return invalid("org_id", "required (a service creates sessions for an organization)")
		}
		in.OrgID = req.OrgID
		in.AutomationID, in.RunID, in.TriggerEventID = req.AutomationID, req.RunID, req.TriggerEventID
	default: // people
		if p.OrgID == "" {
			return httpapi.Forbidden("no active organization: create one or switch to one first")
		}
		if req.OrgID != "" && req.OrgID != p.OrgID {
			return invalid("org_id", "sessions are created in your active organization")
		}
		if req.AutomationID != nil || req.RunID != nil || req.TriggerEventID != nil {
			return invalid("run_id", "automation_id, run_id and trigger_event_id are set by the platform only")
		}
		if req.SessionType == sessions.TypeAutomation || req.ClientType == sessions.ClientAutomation {
			return invalid("session_type", "automation sessions are started by runs")
		}
		in.OrgID = p.OrgID
		uid := p.UserID
		in.CreatedBy = &uid
	}
	sess, created, err := s.d.Sessions.Create(r.Context(), in)
	if d, ok := billing.AsDenial(err); ok {
		return denialError(d)
	}
	switch {
	case errors.Is(err, sessions.ErrLimit):
		return httpapi.Conflict("session_limit", "the organization has reached its concurrent session limit")
	case errors.Is(err, sessions.ErrOrgPendingDeletion):
		return httpapi.Conflict("org_pending_deletion", "the organization is scheduled for deletion; an owner can restore it")
	case errors.Is(err, sessions.ErrConfigurationNotFound):
		return invalid("configuration_id", "no such configuration in this organization")
	case errors.Is(err, sessions.ErrInvalid):
		return &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: httpapi.CodeValidation, Message: err.Error()}
	case err != nil:
		return fmt.Errorf("create session: %w", err)
	}
	if sess.SandboxMode == sessions.ModeImmediate && sess.Status == sessions.StatusStarting {
		id := sess.ID
		s.background(func(ctx context.Context) {
			h, err := s.d.Hubs.Hub(ctx, id)
			if err == nil {
				err = h.EnsureRuntimeReady(ctx)
			}
			if err != nil && !errors.Is(err, hub.ErrNotOwner) {
				s.d.Log.Error("immediate sandbox start failed", "session_id", id, "error", err)
			}
		})
	}
	v := s.view(sess)
	v.Created = created
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	httpapi.WriteJSON(w, status, v)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	if websocket.IsWebSocketUpgrade(r) {
		return s.owned("id", s.serveWS)(w, r)
	}
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, s.view(sess))
	return nil
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	v := s.view(sess)
	st := protocol.SessionStatus{ID: sess.ID, Status: sess.Status, DisplayStatus: v.DisplayStatus}
	if h, ok := s.d.Hubs.Get(sess.ID); ok {
		hs := h.Status()
		hs.EnvRequests = h.PendingEnvRequests()
		st.SandboxAlive = hs.RuntimeReady
		st.Runtime = &hs
	}
	if !st.SandboxAlive {
		alive, err := hub.RuntimeAlive(r.Context(), s.d.Redis, sess.ID)
		if err != nil {
			return fmt.Errorf("runtime lease of %s: %w", sess.ID, err)
		}
		st.SandboxAlive = alive
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
	return nil
}

// mutable authenticates a prompt/cancel request and loads the session the
// caller may act on.
func (s *Server) mutable(r *http.Request) (*auth.Principal, sessions.Session, error) {
	p, err := s.principal(r, false)
	if err != nil {
		return nil, sessions.Session{}, err
	}
	if p.Kind == auth.KindSandbox {
		return nil, sessions.Session{}, httpapi.Forbidden("sandbox credentials cannot act on sessions")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return nil, sessions.Session{}, err
	}
	if err := canMutate(p, sess); err != nil {
		return nil, sessions.Session{}, err
	}
	return p, sess, nil
}

// messageKey is the Redis key remembering a message Idempotency-Key.
func messageKey(sessionID, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "gateway:message:" + sessionID + ":" + hex.EncodeToString(sum[:16])
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) error {
	p, sess, err := s.mutable(r)
	if err != nil {
		return err
	}
	var req protocol.MessageRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Content) == "" {
		return invalid("content", "required")
	}
	if len(req.Content) > 100_000 {
		return invalid("content", "at most 100000 characters")
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(key) > 200 {
		return invalid("Idempotency-Key", "at most 200 characters")
	}
	var rkey string
	if key != "" {
		rkey = messageKey(sess.ID, key)
		ok, err := s.d.Redis.SetNX(r.Context(), rkey, "1", s.d.MessageKeyTTL).Result()
		if err != nil {
			return fmt.Errorf("message idempotency key: %w", err)
		}
		if !ok {
			httpapi.WriteJSON(w, http.StatusOK, protocol.MessageResponse{Sent: false})
			return nil
		}
	}
	err = s.prompt(r.Context(), p, sess.ID, req.Content)
	if err != nil {
		if rkey != "" {
			// Not sent: a retry with the same key must try again.
			_ = s.d.Redis.Del(context.WithoutCancel(r.Context()), rkey).Err()
		}
		return hubError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusAccepted, protocol.MessageResponse{Sent: true})
	return nil
}

func (s *Server) prompt(ctx context.Context, p *auth.Principal, id, content string) error {
	h, err := s.d.Hubs.Hub(ctx, id)
	if err != nil {
		return err
	}
	return h.Prompt(ctx, p, content)
}

func (s *Server) postCancel(w http.ResponseWriter, r *http.Request) error {
	p, sess, err := s.mutable(r)
	if err != nil {
		return err
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	if err := h.Cancel(r.Context(), p); err != nil {
		return hubError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusAccepted, map[string]bool{"cancelled": true})
	return nil
}

func (s *Server) postTool(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if p.Kind != auth.KindSandbox {
		return httpapi.Forbidden("tool callbacks are for the session's sandbox only")
	}
	if !strings.EqualFold(p.SessionID, id) {
		return httpapi.Forbidden("this sandbox token belongs to another session")
	}
	sess, err := s.session(r, p, id)
	if err != nil {
		return err
	}
	var req protocol.ToolCallRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	name := r.PathValue("tool")
	if _, ok := s.tools.Lookup(name); !ok {
		return httpapi.NotFound("tool " + name)
	}
	var secrets []string
	if h, ok := s.d.Hubs.Get(sess.ID); ok {
		done := h.ToolCallStarted()
		defer done()
		secrets = h.Secrets()
	}
	call := tools.Call{Session: sess, ToolCallID: req.ToolCallID, Args: req.Args, Secrets: secrets,
		Runtime: func(ctx context.Context) (tools.Runtime, error) {
			h, err := s.d.Hubs.Hub(ctx, sess.ID)
			if err != nil {
				return nil, err
			}
			return h, nil
		}}
	res, fresh, err := s.tools.Invoke(r.Context(), name, call)
	switch {
	case errors.Is(err, tools.ErrInvalidCall):
		return invalid("tool_call_id", "required, at most 200 characters")
	case errors.Is(err, tools.ErrInFlight):
		w.Header().Set("Retry-After", "1")
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: "tool_call_in_flight",
			Message: "the same tool call is still executing; retry with the same tool_call_id"}
	case err != nil:
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
	if fresh {
		s.background(func(ctx context.Context) {
			s.tools.RunAfter(ctx, name, call, res, s.d.AfterTimeout)
		})
	}
	return nil
}

// postStart starts the session's runtime in the background (the owner
// instance provisions it; 202 at once).
func (s *Server) postStart(w http.ResponseWriter, r *http.Request) error {
	_, sess, err := s.mutable(r)
	if err != nil {
		return err
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	if sess.Status == sessions.StatusStopped || sess.Status == sessions.StatusFailed {
		return httpapi.Conflict("session_ended", "the session has ended")
	}
	s.background(func(ctx context.Context) {
		if err := h.EnsureRuntimeReady(ctx); err != nil && !errors.Is(err, hub.ErrNotOwner) {
			s.d.Log.Error("session start failed", "session_id", sess.ID, "error", err)
		}
	})
	httpapi.WriteJSON(w, http.StatusAccepted, map[string]bool{"starting": true})
	return nil
}

// pauseReasons are the pause reasons a service may ask for (people always
// pause with "manual").
var pauseReasons = map[string]bool{manualPause: true, sessions.PauseCreditLimit: true, sessions.PausePaymentFailed: true,
	sessions.PauseOverageCap: true, sessions.PauseOrgDeletion: true}

// manualPause is the pause reason of a person's pause.
const manualPause = "manual"

// postPause snapshots and stops the sandbox and marks the session paused.
// An optional body {"reason": "credit_limit"} records why; only the
// platform's services (the billing enforcer) may give one.
func (s *Server) postPause(w http.ResponseWriter, r *http.Request) error {
	p, sess, err := s.mutable(r)
	if err != nil {
		return err
	}
	reason := manualPause
	var req protocol.PauseRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	if req.Reason != "" && req.Reason != reason {
		if p.Kind != auth.KindService {
			return httpapi.Forbidden("only the platform may pause a session with a reason")
		}
		if !pauseReasons[req.Reason] {
			return invalid("reason", "unknown pause reason")
		}
		reason = req.Reason
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	if err := h.Pause(r.Context(), reason); err != nil {
		return hubError(w, err)
	}
	sess, err = s.d.Sessions.Get(r.Context(), "", sess.ID)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, s.view(sess))
	return nil
}

// postSnapshot snapshots the running sandbox (it keeps running).
func (s *Server) postSnapshot(w http.ResponseWriter, r *http.Request) error {
	_, sess, err := s.mutable(r)
	if err != nil {
		return err
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	id, err := h.SaveSnapshot(r.Context())
	if err != nil {
		return hubError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, protocol.SnapshotResponse{SnapshotID: id})
	return nil
}
