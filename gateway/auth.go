package gateway

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

// OrgHeader lets a service credential scope a session lookup to an
// organization (the run pipeline sends its run's org): a session of another
// organization is then 404, as for people.
const OrgHeader = "X-Proliferate-Org-Id"

// principal authenticates the request's bearer credential (the
// Authorization header; also ?token= when allowQuery, for WebSocket clients
// that cannot set headers).
func (s *Server) principal(r *http.Request, allowQuery bool) (*auth.Principal, error) {
	tok := ""
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		tok = strings.TrimSpace(t)
	}
	if tok == "" && allowQuery {
		tok = r.URL.Query().Get("token")
	}
	if tok == "" {
		return nil, httpapi.Unauthenticated()
	}
	p, err := s.d.Authenticator.Authenticate(r.Context(), tok)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			return nil, httpapi.Unauthenticated()
		}
		return nil, err
	}
	return p, nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// session loads the session a principal may see: people see their active
// organization's sessions, sandboxes and terminals only their own,
// services any (or their OrgHeader organization's). Everything else is
// 404.
func (s *Server) session(r *http.Request, p *auth.Principal, id string) (sessions.Session, error) {
	notFound := httpapi.NotFound("session")
	if !uuidRE.MatchString(id) {
		return sessions.Session{}, notFound
	}
	org := ""
	switch p.Kind {
	case auth.KindUser, auth.KindAPIKey:
		if p.OrgID == "" {
			return sessions.Session{}, notFound
		}
		org = p.OrgID
	case auth.KindSandbox, auth.KindTerminal:
		if !strings.EqualFold(p.SessionID, id) {
			return sessions.Session{}, notFound
		}
		org = p.OrgID
	case auth.KindService:
		org = r.Header.Get(OrgHeader)
		if org != "" && !uuidRE.MatchString(org) {
			return sessions.Session{}, notFound
		}
	default:
		return sessions.Session{}, notFound
	}
	sess, err := s.d.Sessions.Get(r.Context(), org, id)
	if errors.Is(err, sessions.ErrNotFound) {
		return sessions.Session{}, notFound
	}
	return sess, err
}

// canMutate: the creator, anyone allowed to see a headless session (no
// creator), and platform services. Never a sandbox.
func canMutate(p *auth.Principal, sess sessions.Session) error {
	switch {
	case p.Kind == auth.KindService:
		return nil
	case p.Kind == auth.KindSandbox:
		return httpapi.Forbidden("sandbox credentials cannot act on sessions")
	case !p.IsPerson():
		return httpapi.Forbidden("not allowed")
	case sess.CreatedBy == nil || *sess.CreatedBy == p.UserID:
		return nil
	}
	return httpapi.Forbidden("only the session's creator can do this")
}
