package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/schemas"
)

// Deps are what the gateway needs. Cfg, Log, Pool, Redis, Codec, Hubs,
// Sessions and Authenticator are required.
type Deps struct {
	Cfg      *config.Config
	Log      *slog.Logger
	Pool     *pgxpool.Pool
	Redis    *redis.Client
	Codec    *schemas.Codec
	Hubs     *hub.Manager
	Sessions *sessions.Store
	// Authenticator verifies credentials exactly as the REST API does (the
	// API server's, api.Server.Authenticator).
	Authenticator *httpapi.Authenticator
	// Tools executes platform tool callbacks; nil builds the platform
	// registry (tools.New).
	Tools *tools.Registry
	// MessageKeyTTL is how long a message Idempotency-Key is remembered [24h].
	MessageKeyTTL time.Duration
	// MaxBodyBytes bounds request bodies [Cfg.APIMaxBodyBytes].
	MaxBodyBytes int64
	// WSMaxBufferedBytes is a WebSocket client's outbound budget [1 MiB].
	WSMaxBufferedBytes int
	// Actions is the action invocation lifecycle behind the action routes
	// (actions.go); nil answers them with 503.
	Actions invocations.Service
	// Repos gives sandboxes their repositories' git credentials and pull
	// requests (sandbox_git.go); nil answers those routes with 503.
	Repos RepoAccess
	// Prebuilt records a setup session's snapshot as its configuration's
	// (save_snapshot); nil: recorded without a version key.
	Prebuilt *prebuilds.Resolver
	// Builds runs configuration builds (POST /configuration-builds/{id}/run,
	// build_routes.go); nil answers that route with 503.
	Builds Builds
	// Evidence stores the verify tool's files (blob store and rows); nil:
	// verify answers that evidence is unavailable.
	Evidence *evidence.Store
	// Redactors gives an organization's redactor, for what agents report
	// through platform tools (tools.Deps.Redactors) and the pull requests
	// they open (title, body); nil: token formats and the session's own
	// values only.
	Redactors tools.Redactors
	// AfterTimeout bounds tools' After hooks (session termination) [2m].
	AfterTimeout time.Duration
	// Now is the clock [time.Now].
	Now func() time.Time
	// AdvertiseURL is the base URL other gateway instances reach this one
	// at (GATEWAY_ADVERTISE_URL): registered in Redis under the hub
	// manager's instance id so they forward commands for the sessions this
	// instance owns (forward.go). "" = not registered: other instances
	// answer such commands with 503 not_owner.
	AdvertiseURL string
}

// Server is the gateway's HTTP handler.
type Server struct {
	d     Deps
	mux   *http.ServeMux
	tools *tools.Registry

	bg     sync.WaitGroup
	bgCtx  context.Context
	bgStop context.CancelFunc

	frames *frameRelay // cross-instance session frames (broadcast.go)
	fwd    *forwarder  // session commands to their owner (forward.go)
	adv    *advertiser // this instance's address registration; nil = none
}

// New builds the server.
func New(d Deps) (*Server, error) {
	switch {
	case d.Cfg == nil, d.Pool == nil, d.Redis == nil, d.Codec == nil, d.Hubs == nil, d.Sessions == nil, d.Authenticator == nil:
		return nil, errors.New("gateway: Cfg, Pool, Redis, Codec, Hubs, Sessions and Authenticator are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.MessageKeyTTL <= 0 {
		d.MessageKeyTTL = 24 * time.Hour
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = int64(d.Cfg.APIMaxBodyBytes)
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = 1 << 20
	}
	if d.AfterTimeout <= 0 {
		d.AfterTimeout = 2 * time.Minute
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Server{d: d, mux: http.NewServeMux(), tools: d.Tools}
	if s.tools == nil {
		s.tools = tools.New(tools.Deps{Pool: d.Pool, Codec: d.Codec, Sessions: d.Sessions, Log: d.Log, Prebuilt: d.Prebuilt,
			Evidence: d.Evidence, Redactors: d.Redactors})
	}
	s.bgCtx, s.bgStop = context.WithCancel(context.Background())
	s.fwd = newForwarder(d.Log)
	s.routes()
	if d.AdvertiseURL != "" {
		s.adv = s.advertise(d.AdvertiseURL)
	}
	return s, nil
}

// Handler is the http.Handler to serve.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// Tools is the server's tool registry (to register more tools).
func (s *Server) Tools() *tools.Registry { return s.tools }

// Close waits for background work (immediate sandbox starts, post-tool
// hooks) to finish, cancelling it when ctx ends.
func (s *Server) Close(ctx context.Context) {
	s.adv.stop()
	s.frames.stop()
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.bgStop()
		<-done
	}
}

// background runs f detached from any request, tracked by Close.
func (s *Server) background(f func(ctx context.Context)) {
	s.bg.Go(func() { f(s.bgCtx) })
}

const requestIDKey ctxKey = "request_id"

type ctxKey string

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{8,64}$`)

// serve adds a request id, a body limit, panic recovery and one log line
// per request (never bodies, queries or headers: ?token= stays out of logs).
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	start := s.d.Now()
	id := r.Header.Get("X-Request-Id")
	if !requestIDRE.MatchString(id) {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	w.Header().Set("X-Request-Id", id)
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, s.d.MaxBodyBytes)
	}
	if s.cors(w, r) {
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.d.Log.Error("gateway panic", "request_id", id, "panic", fmt.Sprint(p))
			if sw.status == 0 {
				s.writeError(sw, r, fmt.Errorf("panic: %v", p))
			}
		}
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		s.d.Log.Log(r.Context(), level, "gateway request", "request_id", id, "method", r.Method,
			"route", r.Pattern, "status", sw.status, "duration_ms", s.d.Now().Sub(start).Milliseconds())
	}()
	s.mux.ServeHTTP(sw, r)
}

// cors allows the configured browser origins (API_CORS_ORIGINS, as the
// REST API) and answers preflights; it reports whether it answered.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !slices.Contains(s.d.Cfg.APICORSOrigins, origin) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, X-Request-Id")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
	h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
	h.Set("Access-Control-Max-Age", "600")
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// statusWriter records the status; Unwrap keeps http.ResponseController
// (WebSocket hijacking, flushing) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeError writes the error shape (httpapi.WriteError); unknown errors are
// a 500 that reveals nothing (the cause is logged with the request id).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if e := httpapi.WriteError(w, requestID(r), err); e.Status >= 500 {
		s.d.Log.Error("gateway error", "request_id", requestID(r), "route", r.Pattern, "error", err)
	}
}

// handlerFunc is a route handler returning an error to write.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handle(pattern string, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

func (s *Server) routes() {
	s.handle("POST /proliferate/sessions", s.createSession)
	s.handle("GET /proliferate/{id}", s.getSession)
	s.handle("GET /proliferate/{id}/status", s.getStatus)
	// Session commands are served by the session's owner (forward.go).
	s.handle("POST /proliferate/{id}/message", s.owned("id", s.postMessage))
	s.handle("POST /proliferate/{id}/cancel", s.owned("id", s.postCancel))
	s.handle("POST /proliferate/{id}/tools/{tool}", s.owned("id", s.postTool))
	s.handle("POST /proliferate/{id}/start", s.owned("id", s.postStart))
	s.handle("POST /proliferate/{id}/pause", s.owned("id", s.postPause))
	s.handle("POST /proliferate/{id}/snapshot", s.owned("id", s.postSnapshot))
	s.handle("POST /proliferate/{id}/env", s.owned("id", s.postEnv))
	s.gitRoutes()
	s.sandboxGitRoutes()
	s.proxyRoutes()
	s.previewRoutes()
	s.actionRoutes()
	s.buildRoutes()
	s.handle("GET /healthz", func(w http.ResponseWriter, _ *http.Request) error {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, httpapi.NotFound("route"))
	})
}
