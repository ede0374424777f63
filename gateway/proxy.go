package gateway

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Proxy routes:
//
//	ANY  /proxy/{sid}/{token}/opencode/{path...}  the sandbox's OpenCode API
//	GET  /proxy/{sid}/{token}/terminal            terminal WebSocket (terminal.go)
//	POST /proliferate/{id}/heartbeat              UI heartbeat (keeps the session from idling)
//
// The proxy routes carry the credential in the path because EventSource and
// some WebSocket clients cannot set headers. The token is authenticated
// exactly like a bearer credential; it never reaches a log line: the
// request log records the route pattern only, the upstream request is
// rewritten to the sandbox path, and proxy errors log the session id and
// the upstream error (whose URL has no token).
//
// Every proxied request follows the idle-snapshot order: load the hub,
// TouchActivity (before anything that can wait, so an idle snapshot
// deciding meanwhile sees the activity), EnsureRuntimeReady, then hold a
// proxy connection for the request's lifetime so the session never idles
// under an open stream.
//
// The heartbeat is POST /proliferate/{id}/heartbeat rather than the
// TypeScript system's /sessions/{id}/heartbeat: that pattern would overlap
// POST /proliferate/{id}/tools/{tool} in http.ServeMux (neither more
// specific), and /proliferate/{id}/… is this gateway's shape for every
// per-session route.

// proxyRoutes registers the proxy and heartbeat routes.
func (s *Server) proxyRoutes() {
	ap := newAgentProxy(s)
	s.handle("/proxy/{sid}/{token}/opencode/{path...}", s.owned("sid", ap.serve))
	s.handle("GET /proxy/{sid}/{token}/terminal", s.owned("sid", s.serveTerminal))
	s.handle("POST /proliferate/{id}/heartbeat", s.owned("id", s.postHeartbeat))
}

// proxyPrincipal authenticates a proxy route's path token and loads the
// session: sandboxes never proxy (to themselves or anything else), people
// see their organization's sessions only (404 otherwise), and only
// principals allowed to mutate the session may proxy to it (the OpenCode
// API and the terminal can drive the agent).
func (s *Server) proxyPrincipal(r *http.Request) (*auth.Principal, sessions.Session, error) {
	tok := r.PathValue("token")
	if tok == "" {
		return nil, sessions.Session{}, httpapi.Unauthenticated()
	}
	p, err := s.d.Authenticator.Authenticate(r.Context(), tok)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			return nil, sessions.Session{}, httpapi.Unauthenticated()
		}
		return nil, sessions.Session{}, err
	}
	if p.Kind == auth.KindSandbox {
		return nil, sessions.Session{}, httpapi.Forbidden("sandbox credentials cannot use the session proxy")
	}
	sess, err := s.session(r, p, r.PathValue("sid"))
	if err != nil {
		return nil, sessions.Session{}, err
	}
	if err := canMutate(p, sess); err != nil {
		return nil, sessions.Session{}, err
	}
	return p, sess, nil
}

// readyHub loads the session's hub, records activity and waits for the
// runtime. The error is the API error to answer (hub errors as on the
// other routes; any other readiness failure is a 503 whose cause is
// logged, never shown).
func (s *Server) readyHub(w http.ResponseWriter, r *http.Request, sessionID string) (*hub.Hub, error) {
	ctx := r.Context()
	h, err := s.d.Hubs.Hub(ctx, sessionID)
	if err != nil {
		return nil, hubError(w, err)
	}
	h.TouchActivity() // before EnsureRuntimeReady: it may wait on a boot or a snapshot
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, Message: "request cancelled"}
		}
		if mapped := hubError(w, err); mapped != err {
			return nil, mapped
		}
		s.d.Log.Warn("proxy: session runtime not ready", "request_id", requestID(r), "session_id", sessionID, "error", err)
		return nil, unavailable(w, "the session's sandbox is not ready; retry")
	}
	return h, nil
}

// unavailable is a retryable 503.
func unavailable(w http.ResponseWriter, msg string) error {
	w.Header().Set("Retry-After", "1")
	return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, Message: msg}
}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey).(string)
	return id
}

// agentProxy forwards requests to a sandbox's OpenCode server.
type agentProxy struct {
	s         *Server
	transport http.RoundTripper
	errorLog  *log.Logger
}

func newAgentProxy(s *Server) *agentProxy {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// No response-header timeout: a synchronous prompt answers when the
	// agent's turn ends. The client's context bounds every request.
	t.MaxIdleConnsPerHost = 16
	t.IdleConnTimeout = 90 * time.Second
	return &agentProxy{s: s, transport: t, errorLog: slog.NewLogLogger(s.d.Log.Handler(), slog.LevelWarn)}
}

// clientOnlyHeaders are the client's credentials and ambient state, never
// sent to the sandbox (the proxy authenticates with the sandbox's own
// password).
var clientOnlyHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization", OrgHeader}

// upstreamOnlyHeaders are the sandbox's answers that must not reach the
// browser: its CORS policy (the gateway's applies), cookies for the
// gateway's origin, and Basic-auth challenges (a browser would prompt).
var upstreamOnlyHeaders = []string{"Set-Cookie", "WWW-Authenticate", "Access-Control-Allow-Origin",
	"Access-Control-Allow-Credentials", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods",
	"Access-Control-Expose-Headers", "Access-Control-Max-Age"}

// upstreamPath is the request's path after /proxy/{sid}/{token}/opencode/,
// still escaped (so %2F stays one segment upstream).
func upstreamPath(r *http.Request) string {
	parts := strings.SplitN(r.URL.EscapedPath(), "/", 6) // "", proxy, sid, token, opencode, rest
	if len(parts) < 6 {
		return ""
	}
	return parts[5]
}

func (ap *agentProxy) serve(w http.ResponseWriter, r *http.Request) error {
	s := ap.s
	if r.ContentLength > s.d.MaxBodyBytes {
		return &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge, Message: "request body too large"}
	}
	_, sess, err := s.proxyPrincipal(r)
	if err != nil {
		return err
	}
	h, err := s.readyHub(w, r, sess.ID)
	if err != nil {
		return err
	}
	remove := h.AddProxyConnection()
	defer remove()
	sb, ok := h.Sandbox()
	if !ok {
		return unavailable(w, "the session's sandbox stopped; retry")
	}
	target, err := url.Parse(sb.AgentURL)
	if err != nil || target.Host == "" {
		s.d.Log.Error("proxy: bad agent URL", "session_id", sess.ID, "error", err)
		return unavailable(w, "the session's sandbox is not reachable")
	}
	rest := upstreamPath(r)
	unescaped, err := url.PathUnescape(rest)
	if err != nil {
		return httpapi.BadRequest("malformed path")
	}
	base := strings.TrimSuffix(target.Path, "/")
	var failed error
	rp := &httputil.ReverseProxy{
		Transport:     ap.transport,
		FlushInterval: -1, // SSE (GET /event) streams through unbuffered
		ErrorLog:      ap.errorLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = target.Scheme, target.Host
			out.URL.Path = base + "/" + unescaped
			out.URL.RawPath = base + "/" + rest
			out.URL.User = nil
			out.Host = ""
			for _, k := range clientOnlyHeaders {
				out.Header.Del(k)
			}
			out.SetBasicAuth(opencode.BasicAuthUser, sb.AgentPassword)
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode >= 500 {
				// The agent failed: its body (a stack, internal paths)
				// is not the client's; the gateway answers 502.
				return &agentFailure{status: resp.StatusCode}
			}
			for _, k := range upstreamOnlyHeaders {
				resp.Header.Del(k)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = err
		},
	}
	// The upstream activity (a long SSE stream) keeps the session alive
	// through the proxy connection; touching again at the end restarts the
	// idle grace from the moment the client left.
	defer h.TouchActivity()
	// A request (a stream) ends with the hub: paused, ended or owned
	// elsewhere now, its client reconnects to wherever the session lives.
	clientCtx := r.Context()
	serveWhileHub(h, rp, w, r)
	if failed == nil {
		return nil
	}
	var mbe *http.MaxBytesError
	var af *agentFailure
	switch {
	case errors.As(failed, &af):
		s.d.Log.Warn("proxy: the session's agent failed", "request_id", requestID(r), "session_id", sess.ID, "status", af.status)
		return &httpapi.Error{Status: http.StatusBadGateway, Code: "agent_failed",
			Message: fmt.Sprintf("the session's agent failed to answer (HTTP %d); retry", af.status)}
	case errors.As(failed, &mbe):
		return &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge, Message: "request body too large"}
	case errors.Is(failed, context.Canceled) && clientCtx.Err() != nil:
		// The client left before the sandbox answered: nobody to tell.
		return &httpapi.Error{Status: 499, Code: "client_closed", Message: "client closed the request"}
	case errors.Is(failed, context.Canceled):
		return hubError(w, hub.ErrClosed)
	}
	s.d.Log.Warn("proxy: sandbox request failed", "request_id", requestID(r), "session_id", sess.ID, "error", failed)
	return &httpapi.Error{Status: http.StatusBadGateway, Code: "sandbox_unreachable", Message: "the session's sandbox did not answer"}
}

// agentFailure is a 5xx answer of the sandbox's OpenCode server.
type agentFailure struct{ status int }

func (e *agentFailure) Error() string { return fmt.Sprintf("agent answered HTTP %d", e.status) }

// postHeartbeat keeps a session from idling while a person looks at it
// outside the session stream (preview, terminal tabs…): it touches the
// hub's activity and never starts the runtime. Anyone who may see the
// session may send it (people of its organization, services); sandboxes
// may not.
//
// Heartbeats must reach the session's owner instance, like prompts and
// streams do: a heartbeat for a session another instance owns is forwarded
// there (forward.go) and only lands here when that instance registered no
// address or cannot be reached. So: a hub here that owns the session is
// touched (204); no owner anywhere means nothing is running to keep alive
// (204, nothing is created); an owner elsewhere that the forward could not
// reach is 503 not_owner, so the heartbeat is retried where it counts
// instead of being silently lost.
func (s *Server) postHeartbeat(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	if p.Kind == auth.KindSandbox {
		return httpapi.Forbidden("sandbox credentials cannot send heartbeats")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	h, ok := s.d.Hubs.Get(sess.ID)
	if ok {
		h.TouchActivity()
		if h.Owner() {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	owner, err := hub.OwnerOf(r.Context(), s.d.Redis, sess.ID)
	if err != nil {
		return err
	}
	if owner != "" && owner != s.d.Hubs.InstanceID() {
		return hubError(w, hub.ErrNotOwner)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// serveWhileHub serves r through rp until the client leaves or the hub
// ends (paused, ended or owned elsewhere now: the client reconnects to
// wherever the session lives).
func serveWhileHub(h interface{ Done() <-chan struct{} }, rp http.Handler, w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-h.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	rp.ServeHTTP(w, r.WithContext(ctx))
}
