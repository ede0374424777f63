package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Action routes:
//
//	GET  /proliferate/{id}/actions/available                          sandbox, terminal, people of the org
//	GET  /proliferate/{id}/actions/guide/{integration}                sandbox, terminal, people of the org
//	POST /proliferate/{id}/actions/invoke                             the session's sandbox and terminals
//	GET  /proliferate/{id}/actions/invocations                        sandbox, terminal, people of the org
//	GET  /proliferate/{id}/actions/invocations/{invocationId}         sandbox, terminal, people of the org
//	POST /proliferate/{id}/actions/invocations/{invocationId}/approve org admins and owners
//	POST /proliferate/{id}/actions/invocations/{invocationId}/deny    org admins and owners
//
// "terminal" is the token of a terminal a person opened in the session
// (terminal_tokens.go): it acts as that person (an invocation records
// them in invoked_by) but never approves or denies (403).
//
// The lifecycle itself (validation, the mode cascade, the Redis rate limit
// shared by every instance, the pending cap, execution, expiry) is the
// invocations.Service; these handlers authenticate, scope everything to
// the session in the path (an invocation of another session is 404, as is
// a session of another organization) and map outcomes and errors to
// statuses:
//
//	invoke:  200 {invocation, result} executed · 202 {invocation, message} pending ·
//	         403 {invocation, error} denied · 502 {invocation, error} failed
//	approve: 200 {invocation, result} executed · 200 {invocation, error} the
//	         approved execution failed (recorded on the invocation; the
//	         approval itself succeeded) · 409 definition_changed / 422
//	         definition_hash / 502 connector_unavailable for a connector
//	         tool (see CodeDefinitionChanged); nothing stored
//	errors:  400 bad_request (a body that is not JSON) · 422 validation_failed
//	         (details: one {field, problem} per bad field; params failing the
//	         action's JSON Schema name the value as "params" + its JSON
//	         pointer, e.g. params/title) · 404 unknown integration, action or
//	         invocation · 409 already decided · 410 expired (before and after
//	         the sweeper marked it) · 429 rate_limited (Retry-After: when the
//	         sliding window frees a slot) / pending_limit
//
// Platform services get 403 on every action route: they neither act as
// the agent nor approve on a person's behalf (an approval records who
// approved; a service is nobody).

// CodePendingLimit is the 429 code when a session has too many pending
// invocations (CodeRateLimited is the per-minute limit).
const CodePendingLimit = "pending_limit"

// Approval refusals of connector tools (invocations/review.go): 409
// definition_changed (details: invocation_hash, current_hash,
// approved_hash) when the tool is no longer the definition the invocation
// was made against or the approver was shown another; 502
// connector_unavailable when its server could not be asked.
const (
	CodeDefinitionChanged    = "definition_changed"
	CodeConnectorUnavailable = "connector_unavailable"
)

const (
	defaultInvocationList = 50
	maxInvocationList     = 100
)

// actionRoutes registers the action routes and starts this instance's
// relay of cross-instance session frames (broadcast.go; Close stops it).
func (s *Server) actionRoutes() {
	s.frames = startFrameRelay(NewSessionFrames(s.d.Hubs, s.d.Redis, s.d.Log))
	s.handle("GET /proliferate/{id}/actions/available", s.actionsAvailable)
	s.handle("GET /proliferate/{id}/actions/guide/{integration}", s.actionsGuide)
	s.handle("POST /proliferate/{id}/actions/invoke", s.actionsInvoke)
	s.handle("GET /proliferate/{id}/actions/invocations", s.actionsList)
	s.handle("GET /proliferate/{id}/actions/invocations/{invocationId}", s.actionsGet)
	s.handle("POST /proliferate/{id}/actions/invocations/{invocationId}/approve", s.actionsApprove)
	s.handle("POST /proliferate/{id}/actions/invocations/{invocationId}/deny", s.actionsDeny)
}

// Wire forms of the action routes.
type (
	// AvailableResponse lists the session's integrations and actions.
	AvailableResponse struct {
		Integrations []invocations.Available `json:"integrations"`
	}
	// GuideResponse is an integration's markdown guide.
	GuideResponse struct {
		Integration string `json:"integration"`
		Guide       string `json:"guide"`
	}
	// InvocationResponse carries one invocation and, depending on the
	// outcome, its result (executed), a message (pending) or an error
	// (denied, failed).
	InvocationResponse struct {
		Invocation invocations.Invocation `json:"invocation"`
		Result     json.RawMessage        `json:"result,omitempty"`
		Message    string                 `json:"message,omitempty"`
		Error      string                 `json:"error,omitempty"`
		// Reason says why a pending invocation waits:
		// definition_changed (a connector tool changed since it was
		// reviewed; the invocation carries the diff) or policy.
		Reason string `json:"reason,omitempty"`
	}
	// InvocationsResponse lists a session's invocations, newest first.
	InvocationsResponse struct {
		Invocations []invocations.Invocation `json:"invocations"`
	}
	// ApproveRequest is the approve body; Mode is once (default) or always.
	ApproveRequest struct {
		Mode string `json:"mode"`
		// DefinitionHash is the invocation's definition_hash the approver
		// was shown (a connector tool's): the approval is refused (409
		// definition_changed) when it is not the tool's current one.
		// Required for mode always on a drifted invocation.
		DefinitionHash string `json:"definition_hash,omitempty"`
	}
)

// actionsService is the configured service or a 503.
func (s *Server) actionsService(w http.ResponseWriter) (invocations.Service, error) {
	if s.d.Actions == nil {
		return nil, unavailable(w, "actions are not configured on this gateway")
	}
	return s.d.Actions, nil
}

// actionReader authenticates a reader of the session's actions: the
// session's own sandbox or a person of its organization.
// actionsRead is the prologue of the read routes: the service and the
// session the caller (its sandbox or a person of its org) may read.
func (s *Server) actionsRead(w http.ResponseWriter, r *http.Request) (invocations.Service, sessions.Session, error) {
	svc, err := s.actionsService(w)
	if err != nil {
		return nil, sessions.Session{}, err
	}
	_, sess, err := s.actionReader(r)
	if err != nil {
		return nil, sessions.Session{}, err
	}
	return svc, sess, nil
}

func (s *Server) actionReader(r *http.Request) (*auth.Principal, sessions.Session, error) {
	p, err := s.actionPrincipal(r)
	if err != nil {
		return nil, sessions.Session{}, err
	}
	if p.Kind != auth.KindSandbox && p.Kind != auth.KindTerminal && !p.IsPerson() {
		return nil, sessions.Session{}, httpapi.Forbidden("only the session's sandbox and people of its organization can use action routes")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	return p, sess, err
}

// approver authenticates an admin or owner of the session's organization.
func (s *Server) approver(r *http.Request) (invocations.Approver, sessions.Session, error) {
	p, err := s.actionPrincipal(r)
	if err != nil {
		return invocations.Approver{}, sessions.Session{}, err
	}
	if p.Kind == auth.KindTerminal {
		// Whatever runs in the sandbox could use it: never an approval.
		return invocations.Approver{}, sessions.Session{}, httpapi.Forbidden("a terminal's credential cannot approve or deny actions: approve with your own credential (the dashboard or the API)")
	}
	if !p.IsPerson() {
		return invocations.Approver{}, sessions.Session{}, httpapi.Forbidden("only people can approve or deny actions")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return invocations.Approver{}, sessions.Session{}, err
	}
	if !p.Role.AtLeast(auth.RoleAdmin) {
		return invocations.Approver{}, sessions.Session{}, httpapi.Forbidden("only org admins and owners can approve or deny actions")
	}
	return invocations.Approver{UserID: p.UserID, OrgID: p.OrgID, Role: string(p.Role)}, sess, nil
}

// sessionInvocation loads an invocation of the session in the path (404
// for another session's, or a malformed id).
func (s *Server) sessionInvocation(r *http.Request, svc invocations.Service, sessionID string) (invocations.Invocation, error) {
	id := r.PathValue("invocationId")
	if !uuidRE.MatchString(id) {
		return invocations.Invocation{}, httpapi.NotFound("invocation")
	}
	inv, err := svc.Get(r.Context(), sessionID, id)
	if err != nil {
		return invocations.Invocation{}, actionError(nil, err)
	}
	if inv.SessionID != sessionID {
		return invocations.Invocation{}, httpapi.NotFound("invocation")
	}
	return inv, nil
}

func (s *Server) actionsAvailable(w http.ResponseWriter, r *http.Request) error {
	svc, sess, err := s.actionsRead(w, r)
	if err != nil {
		return err
	}
	list, err := svc.Available(r.Context(), sess)
	if err != nil {
		return actionError(w, err)
	}
	if list == nil {
		list = []invocations.Available{}
	}
	httpapi.WriteJSON(w, http.StatusOK, AvailableResponse{Integrations: list})
	return nil
}

func (s *Server) actionsGuide(w http.ResponseWriter, r *http.Request) error {
	svc, sess, err := s.actionsRead(w, r)
	if err != nil {
		return err
	}
	integration := r.PathValue("integration")
	guide, err := svc.Guide(r.Context(), sess, integration)
	if err != nil {
		return actionError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, GuideResponse{Integration: integration, Guide: guide})
	return nil
}

func (s *Server) actionsInvoke(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.actionsService(w)
	if err != nil {
		return err
	}
	p, err := s.actionPrincipal(r)
	if err != nil {
		return err
	}
	if p.Kind != auth.KindSandbox && p.Kind != auth.KindTerminal {
		return httpapi.Forbidden("only the session's sandbox and its terminals can invoke actions")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	if sess.Status == sessions.StatusStopped || sess.Status == sessions.StatusFailed {
		// A sandbox token outlives its sandbox; an ended session acts no more.
		return httpapi.Conflict("session_ended", "the session has ended")
	}
	var in invocations.InvokeInput
	if err := decode(r, &in); err != nil {
		return err
	}
	switch {
	case in.Integration == "":
		return invalid("integration", "required")
	case in.Action == "":
		return invalid("action", "required")
	}
	if len(bytes.TrimSpace(in.Params)) == 0 || bytes.Equal(bytes.TrimSpace(in.Params), []byte("null")) {
		in.Params = json.RawMessage(`{}`)
	}
	if p.Kind == auth.KindTerminal {
		in.InvokedBy = p.UserID // a person in their terminal, not the agent
	}
	out, err := svc.Invoke(r.Context(), sess, in)
	if err != nil {
		return actionError(w, err)
	}
	writeOutcome(w, out)
	return nil
}

// writeOutcome answers an invoke or approve outcome by the invocation's
// status.
func writeOutcome(w http.ResponseWriter, out invocations.Outcome) {
	inv := out.Invocation
	switch inv.Status {
	case invocations.StatusPending:
		reason, msg := invocations.PendingReason(inv), "Action requires approval"
		if reason == invocations.ReasonDefinitionChanged {
			msg += ": the tool's definition changed since an admin reviewed it (see invocation.definition_diff)"
		}
		httpapi.WriteJSON(w, http.StatusAccepted, InvocationResponse{Invocation: inv, Message: msg, Reason: reason})
	case invocations.StatusDenied:
		msg := "action denied"
		if inv.DeniedReason != nil && *inv.DeniedReason == "policy" {
			msg = "action denied by policy"
		} else if inv.DeniedReason != nil {
			msg = "action denied: " + *inv.DeniedReason
		}
		httpapi.WriteJSON(w, http.StatusForbidden, InvocationResponse{Invocation: inv, Error: msg})
	case invocations.StatusFailed:
		httpapi.WriteJSON(w, http.StatusBadGateway, InvocationResponse{Invocation: inv, Error: failureText(inv)})
	default:
		httpapi.WriteJSON(w, http.StatusOK, InvocationResponse{Invocation: inv, Result: out.Result})
	}
}

// failureText is the error of a failed invocation (already redacted).
func failureText(inv invocations.Invocation) string {
	if inv.Error != nil && *inv.Error != "" {
		return *inv.Error
	}
	return "action failed"
}

func (s *Server) actionsList(w http.ResponseWriter, r *http.Request) error {
	svc, sess, err := s.actionsRead(w, r)
	if err != nil {
		return err
	}
	limit := defaultInvocationList
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxInvocationList {
			return invalid("limit", "an integer from 1 to "+strconv.Itoa(maxInvocationList))
		}
		limit = n
	}
	list, err := svc.ListSession(r.Context(), sess.ID, limit)
	if err != nil {
		return actionError(w, err)
	}
	if list == nil {
		list = []invocations.Invocation{}
	}
	httpapi.WriteJSON(w, http.StatusOK, InvocationsResponse{Invocations: list})
	return nil
}

func (s *Server) actionsGet(w http.ResponseWriter, r *http.Request) error {
	svc, sess, err := s.actionsRead(w, r)
	if err != nil {
		return err
	}
	inv, err := s.sessionInvocation(r, svc, sess.ID)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, InvocationResponse{Invocation: inv})
	return nil
}

func (s *Server) actionsApprove(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.actionsService(w)
	if err != nil {
		return err
	}
	a, sess, err := s.approver(r)
	if err != nil {
		return err
	}
	req, err := decodeApprove(r)
	if err != nil {
		return err
	}
	inv, err := s.sessionInvocation(r, svc, sess.ID)
	if err != nil {
		return err
	}
	out, err := svc.Approve(r.Context(), a, inv.ID, invocations.Approval{Mode: req.Mode, DefinitionHash: req.DefinitionHash})
	if err != nil {
		return actionError(w, err)
	}
	if out.Invocation.Status == invocations.StatusFailed {
		// The approval succeeded; the execution it started failed. That
		// outcome is the invocation's (recorded, published, seen by the
		// waiting agent), not an error of the approver's request.
		httpapi.WriteJSON(w, http.StatusOK, InvocationResponse{Invocation: out.Invocation, Error: failureText(out.Invocation)})
		return nil
	}
	writeOutcome(w, out)
	return nil
}

// decodeApprove reads the optional approve body (empty = once).
func decodeApprove(r *http.Request) (ApproveRequest, error) {
	req := ApproveRequest{Mode: invocations.ApproveOnce}
	if err := decodeOptional(r, &req); err != nil {
		return req, err
	}
	switch req.Mode {
	case "":
		req.Mode = invocations.ApproveOnce
	case invocations.ApproveOnce, invocations.ApproveAlways:
	default:
		return req, invalid("mode", "once or always")
	}
	return req, nil
}

func (s *Server) actionsDeny(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.actionsService(w)
	if err != nil {
		return err
	}
	a, sess, err := s.approver(r)
	if err != nil {
		return err
	}
	inv, err := s.sessionInvocation(r, svc, sess.ID)
	if err != nil {
		return err
	}
	inv, err = svc.Deny(r.Context(), a, inv.ID)
	if err != nil {
		return actionError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, InvocationResponse{Invocation: inv})
	return nil
}

// paramsInvalid is the 422 of params that fail the action's JSON Schema:
// one field error per failing value, named "params" followed by the
// value's JSON pointer ("params" itself for a problem of the whole object).
func paramsInvalid(pe *actions.ParamsError) error {
	fes := make([]httpapi.FieldError, 0, len(pe.Details))
	for _, d := range pe.Details {
		fes = append(fes, httpapi.FieldError{Field: "params" + d.Pointer, Problem: d.Message})
	}
	if len(fes) == 0 {
		fes = append(fes, httpapi.FieldError{Field: "params", Problem: "invalid"})
	}
	return httpapi.Invalid(fes...)
}

// actionError maps the invocations service's errors to API errors (w, when
// set, receives Retry-After on 429s); anything else passes through (500).
func actionError(w http.ResponseWriter, err error) error {
	var pe *actions.ParamsError
	switch {
	case errors.As(err, &pe):
		return paramsInvalid(pe)
	case errors.Is(err, invocations.ErrNotFound):
		return httpapi.NotFound("invocation")
	case errors.Is(err, invocations.ErrUnknownIntegration):
		return httpapi.NotFound("integration")
	case errors.Is(err, invocations.ErrUnknownAction):
		return httpapi.NotFound("action")
	case errors.Is(err, invocations.ErrRateLimited):
		retry := invocations.RateWindow
		var rle *invocations.RateLimitError
		if errors.As(err, &rle) {
			retry = rle.RetryAfter
		}
		secs := max(1, int((retry+time.Second-1)/time.Second))
		if w != nil {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
		return &httpapi.Error{Status: http.StatusTooManyRequests, Code: httpapi.CodeRateLimited,
			Message: fmt.Sprintf("more than %d action invocations of this session in the last minute; retry in %d s",
				invocations.RatePerMinute, secs)}
	case errors.Is(err, invocations.ErrSourceUnavailable):
		return httpapi.Unavailable("the integration could not be reached; retry later")
	case errors.As(err, new(*actions.ExecError)):
		// The integration's credentials could not be obtained (the broker
		// is down) or its remote side failed before anything ran; the
		// message names the provider, never the credential.
		var ee *actions.ExecError
		errors.As(err, &ee)
		return httpapi.Unavailable(ee.Message + "; retry later")
	case errors.Is(err, actions.ErrInvalidSchema):
		// The action's own schema does not compile: a fault of the
		// integration (an MCP server's tool), not of the caller.
		return httpapi.Unavailable("the action's parameter schema is invalid; the integration must fix its definition")
	case errors.Is(err, invocations.ErrPendingLimit):
		if w != nil {
			w.Header().Set("Retry-After", "30")
		}
		return &httpapi.Error{Status: http.StatusTooManyRequests, Code: CodePendingLimit,
			Message: "too many action invocations of this session await approval"}
	case errors.Is(err, invocations.ErrDefinitionChanged):
		var dce *invocations.DefinitionChangedError
		errors.As(err, &dce)
		return &httpapi.Error{Status: http.StatusConflict, Code: CodeDefinitionChanged, Message: err.Error() +
			"; nothing was approved: deny this invocation and let the agent invoke the tool again", Details: dce}
	case errors.Is(err, invocations.ErrDefinitionHashRequired):
		return invalid("definition_hash", "required to approve a changed tool with mode always: send the invocation's definition_hash")
	case errors.Is(err, invocations.ErrDefinitionUnverifiable):
		return &httpapi.Error{Status: http.StatusBadGateway, Code: CodeConnectorUnavailable,
			Message: "the tool's current definition could not be fetched from its server to check the approval; nothing was approved, retry"}
	case errors.Is(err, invocations.ErrConflict):
		return httpapi.Conflict(httpapi.CodeConflict, "the invocation is not pending")
	case errors.Is(err, invocations.ErrExpired):
		return &httpapi.Error{Status: http.StatusGone, Code: "expired", Message: "the invocation expired before a decision was made"}
	case errors.Is(err, invocations.ErrForbidden):
		return httpapi.Forbidden("only org admins and owners can approve or deny actions")
	}
	return err
}
