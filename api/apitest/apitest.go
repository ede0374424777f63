// Package apitest runs the real API over HTTP against the test Postgres and
// Redis, with helpers to create people and organizations and to assert the
// error shape. Every feature's API tests use it.
package apitest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Env is a running API.
type Env struct {
	Server *api.Server
	Deps   api.Deps
	URL    string
	// Logs captures every log line the API wrote (to assert secrets never
	// appear in them).
	Logs *LogBuffer
	// Mail reads the emails the API queued: each read first delivers
	// everything due in the package's mail queue (with MAILER=smtp through
	// the server's SMTP mailer, and reads then find nothing).
	Mail *Mailbox
}

// Mailbox delivers the mail queue on demand, for tests to read what the
// API sent without waiting for a background sender.
type Mailbox struct {
	sender *mailqueue.Sender
	mem    *mailer.Memory
}

// packageMail is the one in-memory mailer of the test binary: the package's
// Envs share its database, so a drain by one Env may deliver another's
// email; sharing the mailer (and serialising drains) keeps every email
// readable by recipient from any Env.
var packageMail struct {
	sync.Mutex
	mem *mailer.Memory
}

// Drain delivers every email due now.
func (m *Mailbox) Drain(t testing.TB) mailqueue.Result {
	t.Helper()
	packageMail.Lock()
	defer packageMail.Unlock()
	res, err := m.sender.Drain(context.Background())
	if err != nil {
		t.Fatalf("apitest: drain the mail queue: %v", err)
	}
	return res
}

// Sent delivers what is due and returns the emails to an address, oldest
// first (nil with MAILER=smtp).
func (m *Mailbox) Sent(to string) []mailer.Message {
	packageMail.Lock()
	defer packageMail.Unlock()
	if _, err := m.sender.Drain(context.Background()); err != nil {
		panic(fmt.Sprintf("apitest: drain the mail queue: %v", err))
	}
	if m.mem == nil {
		return nil
	}
	return m.mem.Sent(to)
}

// Option changes the environment before the server starts.
type Option func(env map[string]string)

// WithEnv sets configuration variables.
func WithEnv(kv ...string) Option {
	return func(env map[string]string) {
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
	}
}

// New starts the API with the given feature registrations. The package's
// TestMain must call testenv.Main.
func New(t testing.TB, register []func(*api.Server) error, opts ...Option) *Env {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL":     testenv.DatabaseURL(t),
		"REDIS_URL":        testenv.RedisURL(t),
		"API_CORS_ORIGINS": "https://app.example.com",
		"LOG_LEVEL":        "debug",
	}
	for _, o := range opts {
		o(vars)
	}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens(cfg.AuthSigningKeys, cfg.AccessTokenTTL)
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(cfg.EncryptionKeys)
	if err != nil {
		t.Fatal(err)
	}
	logs := &LogBuffer{}
	packageMail.Lock()
	if packageMail.mem == nil {
		packageMail.mem = &mailer.Memory{}
	}
	mem := packageMail.mem
	packageMail.Unlock()
	deps := api.Deps{
		Cfg: cfg, Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Pool: testenv.Postgres(t), Redis: testenv.Redis(t), Tokens: tokens, Box: box, Mailer: mem,
	}
	if cfg.Mailer == "smtp" {
		deps.Mailer = nil // the server's own, from the settings
		mem = nil
	}
	s := api.New(deps)
	sender := mailqueue.NewSender(deps.Pool, box, s.Mailer, mailqueue.Options{MaxAttempts: cfg.MailMaxAttempts,
		InitialBackoff: cfg.MailBackoffInitial, MaxBackoff: cfg.MailBackoffMax}, deps.Log)
	for _, r := range register {
		if err := r(s); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &Env{Server: s, Deps: deps, URL: srv.URL, Logs: logs, Mail: &Mailbox{sender: sender, mem: mem}}
}

// Modules lists the modules New registers, for callers that need not name
// api.Server (the gateway's tests).
func Modules(register ...func(*api.Server) error) []func(*api.Server) error { return register }

// LogBuffer is the concurrency-safe log sink of testenv.
type LogBuffer = testenv.LogBuffer

// User is a person created directly in the database with an org.
type User struct {
	ID, Email, OrgID, Token, SessionID string
}

var seq struct {
	mu sync.Mutex
	n  int
}

// Unique returns a string unique within the test binary (emails, slugs).
func Unique(prefix string) string {
	seq.mu.Lock()
	defer seq.mu.Unlock()
	seq.n++
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s%d%s", prefix, seq.n, hex.EncodeToString(b))
}

// NewUser creates a verified person with a personal organization they own
// (active), a login session and an access token: the state a signup and
// login leave behind, without going through those endpoints.
func (e *Env) NewUser(t testing.TB) *User {
	t.Helper()
	ctx := context.Background()
	u := &User{Email: Unique("user") + "@example.com"}
	err := e.Deps.Pool.QueryRow(ctx, `WITH o AS (
			INSERT INTO organizations (name, slug, is_personal) VALUES ('Personal', $2, true) RETURNING id),
		u AS (INSERT INTO users (email, name, email_verified, active_org_id)
			SELECT $1, 'Test User', true, o.id FROM o RETURNING id, active_org_id),
		m AS (INSERT INTO members (org_id, user_id, role) SELECT active_org_id, id, 'owner' FROM u)
		SELECT id::text, active_org_id::text FROM u`, u.Email, Unique("personal-")).Scan(&u.ID, &u.OrgID)
	if err != nil {
		t.Fatal(err)
	}
	u.SessionID, u.Token = e.Login(t, u.ID)
	return u
}

// Login creates a login session for a user and returns it with an access token.
func (e *Env) Login(t testing.TB, userID string) (sessionID, token string) {
	t.Helper()
	refresh := Unique("refresh")
	sum := sha256.Sum256([]byte(refresh))
	err := e.Deps.Pool.QueryRow(context.Background(), `INSERT INTO auth_sessions (user_id, refresh_token_hash, expires_at)
		VALUES ($1, $2, now() + interval '1 day') RETURNING id::text`, userID, hex.EncodeToString(sum[:])).Scan(&sessionID)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err = e.Deps.Tokens.Issue(userID, sessionID, "")
	if err != nil {
		t.Fatal(err)
	}
	return sessionID, token
}

// AddMember adds user to org with role and makes it their active org.
func (e *Env) AddMember(t testing.TB, u *User, orgID string, role auth.Role) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Deps.Pool.Exec(ctx, `INSERT INTO members (org_id, user_id, role) VALUES ($1, $2, $3)
		ON CONFLICT (org_id, user_id) DO UPDATE SET role = EXCLUDED.role`, orgID, u.ID, string(role)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Deps.Pool.Exec(ctx, `UPDATE users SET active_org_id = $1 WHERE id = $2`, orgID, u.ID); err != nil {
		t.Fatal(err)
	}
	u.OrgID = orgID
}

// Org is an organization with an owner (whose personal organization it
// is), an admin and a member, each logged in.
type Org struct {
	ID                   string
	Owner, Admin, Member *User
}

// NewOrg creates an organization with an owner, an admin and a member.
func (e *Env) NewOrg(t testing.TB) *Org {
	t.Helper()
	owner := e.NewUser(t)
	admin, member := e.NewUser(t), e.NewUser(t)
	e.AddMember(t, admin, owner.OrgID, auth.RoleAdmin)
	e.AddMember(t, member, owner.OrgID, auth.RoleMember)
	return &Org{ID: owner.OrgID, Owner: owner, Admin: admin, Member: member}
}

// SandboxToken creates a running session of orgID and returns its sandbox
// token, minted as a gateway's boot does (sessionstest.SandboxToken).
func (e *Env) SandboxToken(t testing.TB, orgID string) (sessionID, token string) {
	t.Helper()
	sessionID = sessionstest.New(t, e.Deps.Pool, orgID, sessionstest.Options{})
	return sessionID, sessionstest.SandboxToken(t, e.Deps.Pool, sessionID)
}

// Response is a finished request.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test if it does not decode.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %d response %s: %v", r.Status, r.Body, err)
	}
}

// Do sends a request. body may be nil, a string (sent raw as JSON), []byte, or
// any value (JSON-encoded). token may be "".
func (e *Env) Do(t testing.TB, method, path, token string, body any) *Response {
	t.Helper()
	return e.DoWith(t, method, path, token, body, nil)
}

// DoWith is Do with extra headers.
func (e *Env) DoWith(t testing.TB, method, path, token string, body any, headers map[string]string) *Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.URL+api.Prefix+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// ExpectError asserts the status and the stable error code of an error
// response, and that it carries the request id.
func (r *Response) ExpectError(t testing.TB, status int, code string) httpapi.ErrorBody {
	t.Helper()
	var body httpapi.ErrorBody
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.Error.Code != code {
		t.Fatalf("error code %q, want %q; body %s", body.Error.Code, code, r.Body)
	}
	if body.Error.RequestID == "" || body.Error.RequestID != r.Header.Get("X-Request-Id") {
		t.Fatalf("error body lacks the request id: %s", r.Body)
	}
	return body
}

// Expect asserts a success status and decodes the body into v (if non-nil).
func (r *Response) Expect(t testing.TB, status int, v any) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	if v != nil {
		r.JSON(t, v)
	}
}

// Exec runs a statement on the test database (state no route sets up).
func (e *Env) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := e.Deps.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// Scalar runs a query of one row and one column on the test database.
func Scalar[T any](t testing.TB, e *Env, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := e.Deps.Pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// CountRows counts rows of a table matching a condition (to prove that a
// rejected request wrote nothing).
func (e *Env) CountRows(t testing.TB, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.Deps.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
