// Package api is the REST API the dashboard and CLI use, under /api/v1. It
// fixes the conventions every feature follows, once:
//
//   - one error shape (Error) with a stable code, for every failure;
//   - strict JSON binding with per-field validation errors (Ctx.Bind);
//   - cursor pagination with a maximum page size (Ctx.Page);
//   - a request id on every response and log line;
//   - CORS only for configured origins, a request body size limit;
//   - an access level on every route (Access), checked before the handler;
//   - every route declared through Server.Handle, which also documents it in
//     the OpenAPI 3.1 document served at /api/v1/openapi.json.
//
// Features live in packages below this one and register their routes with
// Register(*Server); the handlers stay thin and call domain code.
package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/proliferate/proliferate/schemas"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/secretbox"
)

// Prefix is the path prefix of every API route.
const Prefix = "/api/v1"

// Deps are what feature packages build on.
type Deps struct {
	Cfg    *config.Config
	Log    *slog.Logger
	Pool   *pgxpool.Pool
	Redis  *redis.Client
	Tokens *auth.Tokens
	Box    *secretbox.Box
	Mailer mailer.Mailer
	// Codec encodes the events modules write through the outbox; nil builds
	// one from the configuration on first use (EventCodec).
	Codec *schemas.Codec
	// Now is the clock (tests move it).
	Now func() time.Time
}

// Server is the API: a Gin engine plus the route registry.
type Server struct {
	Deps
	engine    *gin.Engine
	v1        *gin.RouterGroup
	mu        sync.Mutex
	routes    []Route
	authn     *httpapi.Authenticator
	codecOnce sync.Once
	codecErr  error
}

// EventCodec is the codec every module of this server writes events with:
// Deps.Codec, or one built once from SCHEMA_REGISTRY_URL.
func (s *Server) EventCodec() (*schemas.Codec, error) {
	s.codecOnce.Do(func() {
		if s.Codec == nil {
			s.Codec, s.codecErr = schemas.NewCodecFor(s.Cfg.SchemaRegistryURL)
		}
	})
	return s.Codec, s.codecErr
}

// New builds the server with the cross-cutting middleware.
func New(d Deps) *Server {
	gin.SetMode(gin.ReleaseMode)
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Mailer == nil {
		d.Mailer = mailer.FromConfig(d.Cfg, d.Log)
	}
	s := &Server{Deps: d, engine: gin.New()}
	// Only configured proxies may set the client IP (per-IP rate limits);
	// gin would otherwise believe X-Forwarded-For from anyone.
	if err := s.engine.SetTrustedProxies(d.Cfg.APITrustedProxies); err != nil {
		d.Log.Error("API_TRUSTED_PROXIES is invalid; trusting no proxy", "error", err)
		_ = s.engine.SetTrustedProxies(nil)
	}
	s.engine.HandleMethodNotAllowed = true
	s.engine.Use(s.requestID, s.logRequests, s.recover, s.cors, s.limitBody)
	s.engine.NoRoute(func(c *gin.Context) { s.writeError(c, httpapi.NotFound("route")) })
	s.engine.NoMethod(func(c *gin.Context) {
		s.writeError(c, &httpapi.Error{Status: http.StatusMethodNotAllowed, Code: httpapi.CodeMethodNotAllowed, Message: "method not allowed on this route"})
	})
	s.authn = httpapi.NewAuthenticator(s.sandboxVerifier, s.AccessTokenVerifier())
	s.v1 = s.engine.Group(Prefix)
	s.v1.GET("/openapi.json", func(c *gin.Context) { c.JSON(http.StatusOK, s.OpenAPI()) })
	return s
}

// Handler is the http.Handler to serve.
func (s *Server) Handler() http.Handler { return s.engine }

// Engine exposes the Gin engine (tests list its routes).
func (s *Server) Engine() *gin.Engine { return s.engine }

// AddVerifier adds a credential kind to the authentication chain.
func (s *Server) AddVerifier(v httpapi.Verifier) { s.authn.Add(v) }

// Authenticator verifies credentials exactly as this server does, for the
// other front doors (the gateway).
func (s *Server) Authenticator() *httpapi.Authenticator { return s.authn }

// Access is what a route demands of its caller.
type Access int

const (
	// Public routes need no credential (signup, login, accept-by-token…).
	Public Access = iota
	// Person routes need a human caller (access token or API key), no org.
	Person
	// OrgMember, OrgAdmin and OrgOwner need a human caller whose active
	// organization grants at least that role.
	OrgMember
	OrgAdmin
	OrgOwner
	// SuperAdmin routes are for platform operators.
	SuperAdmin
	// Service routes are for the platform's own roles only.
	Service
	// Sandbox routes are for an agent's sandbox (session-scoped token).
	Sandbox
)

func (a Access) String() string {
	return [...]string{"public", "person", "org member", "org admin", "org owner", "super-admin", "service", "sandbox"}[a]
}

// HandlerFunc handles a request; a returned error is written in the error shape.
type HandlerFunc func(c *Ctx) error

// Route declares one endpoint: how it is reached, who may call it, what it
// takes and returns (for the OpenAPI document), and its handler.
type Route struct {
	Method  string
	Path    string // relative to /api/v1, Gin syntax: /repos/:id
	Summary string
	Tag     string
	Access  Access
	// Request is a zero value of the JSON body type (nil: no body).
	Request any
	// Response is a zero value of the success body (nil: no body).
	Response any
	// Status is the success status (default 200).
	Status int
	// Query documents query parameters.
	Query []Param
	// WhilePendingDeletion lets people call a writing organization route
	// while their organization is scheduled for deletion (leaving it);
	// others answer 409 org_pending_deletion then (reads stay open).
	WhilePendingDeletion bool
	Handler              HandlerFunc
}

// Param documents a query parameter.
type Param struct {
	Name, Description string
	Required          bool
}

// Handle registers r.
func (s *Server) Handle(r Route) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	s.mu.Lock()
	s.routes = append(s.routes, r)
	s.mu.Unlock()
	s.v1.Handle(r.Method, r.Path, func(gc *gin.Context) {
		c := &Ctx{Context: gc, s: s}
		if err := s.authorize(c, r.Access); err != nil {
			s.writeError(gc, err)
			return
		}
		if err := s.refusePendingDeletion(c, r); err != nil {
			s.writeError(gc, err)
			return
		}
		if err := r.Handler(c); err != nil {
			s.writeError(gc, err)
		}
	})
}

// Routes returns the declared routes.
func (s *Server) Routes() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.routes)
}

// Ctx is the request context handlers get.
type Ctx struct {
	*gin.Context
	s *Server
}

// Principal is the authenticated caller (nil on public routes without one).
func (c *Ctx) Principal() *auth.Principal { return auth.FromContext(c.Request.Context()) }

// OrgID is the caller's active organization (set on Org* routes).
func (c *Ctx) OrgID() string {
	if p := c.Principal(); p != nil {
		return p.OrgID
	}
	return ""
}

// UserID is the calling person.
func (c *Ctx) UserID() string {
	if p := c.Principal(); p != nil {
		return p.UserID
	}
	return ""
}

// RequestID is this request's id.
func (c *Ctx) RequestID() string { return c.GetString(requestIDKey) }

// Log is the request-scoped logger.
func (c *Ctx) Log() *slog.Logger { return c.s.Log.With("request_id", c.RequestID()) }

// JSONOK writes v with the given status.
func (c *Ctx) Reply(status int, v any) error {
	if v == nil {
		c.Status(status)
		return nil
	}
	c.JSON(status, v)
	return nil
}

// UUIDParam returns a path parameter that must be a UUID; anything else is a
// 404 (a malformed id names nothing).
func (c *Ctx) UUIDParam(name, what string) (string, error) {
	v := c.Param(name)
	if !uuidRE.MatchString(v) {
		return "", httpapi.NotFound(what)
	}
	return v, nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// IsUUID reports whether s is a UUID.
func IsUUID(s string) bool { return uuidRE.MatchString(s) }

// --- middleware --------------------------------------------------------------

const requestIDKey = "request_id"

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{8,64}$`)

// requestID accepts a sane incoming X-Request-Id or makes one.
func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if !requestIDRE.MatchString(id) {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	c.Set(requestIDKey, id)
	c.Request = c.Request.WithContext(audit.WithRequestID(c.Request.Context(), id))
	c.Header("X-Request-Id", id)
	c.Next()
}

// logRequests logs one line per request: never bodies, queries or headers.
func (s *Server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	attrs := []any{"request_id", c.GetString(requestIDKey), "method", c.Request.Method, "route", c.FullPath(),
		"status", c.Writer.Status(), "duration_ms", time.Since(start).Milliseconds()}
	if p := auth.FromContext(c.Request.Context()); p != nil {
		attrs = append(attrs, "principal", string(p.Kind), "user_id", p.UserID, "org_id", p.OrgID)
	}
	level := slog.LevelInfo
	if c.Writer.Status() >= 500 {
		level = slog.LevelError
	}
	s.Log.Log(c.Request.Context(), level, "api request", attrs...)
}

func (s *Server) recover(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.Log.Error("api handler panicked", "request_id", c.GetString(requestIDKey), "route", c.FullPath(), "panic", r)
			s.writeError(c, errors.New("panic"))
		}
	}()
	c.Next()
}

// cors allows only configured origins; without configuration no browser
// origin may call the API cross-site.
func (s *Server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin != "" && slices.Contains(s.Cfg.APICORSOrigins, origin) {
		h := c.Writer.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id")
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
		h.Set("Access-Control-Max-Age", "600")
		if c.Request.Method == http.MethodOptions {
			c.AbortWithStatus(http.StatusNoContent)
			return
		}
	}
	c.Next()
}

func (s *Server) limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, int64(s.Cfg.APIMaxBodyBytes))
	}
	c.Next()
}

// writeError writes the one error shape and aborts.
func (s *Server) writeError(c *gin.Context, err error) {
	e := httpapi.AsError(err)
	if e.Status >= 500 {
		s.Log.Error("api error", "request_id", c.GetString(requestIDKey), "route", c.FullPath(), "error", err)
	}
	httpapi.SetErrorHeaders(c.Writer.Header(), e)
	c.AbortWithStatusJSON(e.Status, httpapi.NewErrorBody(e, c.GetString(requestIDKey)))
}

// SetRetryAfter sets the Retry-After header in whole seconds (at least 1).
func (c *Ctx) SetRetryAfter(d time.Duration) {
	c.Header("Retry-After", strconv.Itoa(int(max(1, (d+time.Second-1)/time.Second))))
}
