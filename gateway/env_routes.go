package gateway

import (
	"errors"
	"net/http"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// postEnv answers the agent's pending request_env_variables call with a
// member's values, the REST twin of
// the WebSocket message submit_env:
//
//	POST /proliferate/{id}/env
//	{"tool_call_id": "…" (optional when one request is pending),
//	 "secrets": [{"key": "STRIPE_KEY", "value": "…", "persist": true, "repo_id": "…" (optional)}],
//	 "env_file": ".env.local" (optional)}
//
// 200 {tool_call_id, submitted, keys, results: [{key, persisted,
// already_existed}], env_file}; never a value. 422 (nothing changed) for
// keys the agent did not request, invalid names, values too long, a repo
// not of the session or an env file path outside the workspace; 404
// env_request_not_found; 409 sandbox_unavailable. Served by the session's
// owner (forwarded).
func (s *Server) postEnv(w http.ResponseWriter, r *http.Request) error {
	p, sess, err := s.mutable(r)
	if err != nil {
		return err
	}
	var req protocol.EnvSubmission
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.ToolCallID) > 200 {
		return invalid("tool_call_id", "at most 200 characters")
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	res, err := h.SubmitEnv(r.Context(), p, req)
	var inv *hub.EnvInvalidError
	switch {
	case errors.As(err, &inv):
		fields := make([]httpapi.FieldError, 0, len(inv.Problems))
		for _, pr := range inv.Problems {
			fields = append(fields, httpapi.FieldError{Field: pr.Field, Problem: pr.Problem})
		}
		return httpapi.Invalid(fields...)
	case errors.Is(err, hub.ErrNoEnvRequest):
		return &httpapi.Error{Status: http.StatusNotFound, Code: "env_request_not_found",
			Message: "no pending environment request of this session with this tool_call_id"}
	case errors.Is(err, hub.ErrEnvUnavailable):
		return httpapi.Conflict("sandbox_unavailable", "the session's sandbox cannot take the values now (it is not running)")
	case err != nil:
		return hubError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
	return nil
}
