package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var seq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

type env struct {
	pool  *pgxpool.Pool
	rdb   *redis.Client
	store *sessions.Store
	prov  *agentsim.Provider
	org   string
	user  string
}

func newEnv(t testing.TB, simOpts agentsim.Options) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{pool: pool, rdb: testenv.Redis(t), store: &sessions.Store{Pool: pool, Codec: codec}, prov: agentsim.NewProvider(simOpts)}
	t.Cleanup(e.prov.Close)
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ('Org', $1) RETURNING id::text`, unique("org-")).Scan(&e.org); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, name) VALUES ($1, 'U') RETURNING id::text`, unique("u-")+"@x.test").Scan(&e.user); err != nil {
		t.Fatal(err)
	}
	return e
}

// newEnvSession is newEnv with the simulator's defaults and one session
// (sessionstest's defaults) of its user.
func newEnvSession(t testing.TB) (*env, string) {
	t.Helper()
	e := newEnv(t, agentsim.Options{})
	return e, e.session(t, sessionstest.Options{})
}

func (e *env) session(t testing.TB, o sessionstest.Options) string {
	t.Helper()
	if o.CreatedBy == "" {
		o.CreatedBy = e.user
	}
	return sessionstest.New(t, e.pool, e.org, o)
}

func (e *env) principal() *auth.Principal {
	return &auth.Principal{Kind: auth.KindUser, UserID: e.user, OrgID: e.org, Role: "member"}
}

func (e *env) deps(instance string) hub.Deps {
	return hub.Deps{
		Sessions: e.store, Provider: e.prov, Redis: e.rdb, InstanceID: instance,
		Log:        slog.New(slog.NewTextHandler(testWriter{}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		GatewayURL: "http://gateway.test",
		OwnerTTL:   3 * time.Second, RenewEvery: 50 * time.Millisecond, RuntimeTTL: 2 * time.Second,
		TokenBatch: 20 * time.Millisecond, SSEHeartbeatTimeout: 5 * time.Second,
		ReconnectDelays: []time.Duration{10 * time.Millisecond, 50 * time.Millisecond},
	}
}

func (e *env) manager(t testing.TB, d hub.Deps) *hub.Manager {
	m := hub.NewManager(d)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

// recClient records every frame; it never blocks.
type recClient struct {
	mu     sync.Mutex
	frames []map[string]any
	raw    [][]byte
	code   int
	reason string
	closed bool
}

func (c *recClient) Send(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return hub.ErrClosed
	}
	c.frames = append(c.frames, m)
	c.raw = append(c.raw, b)
	return nil
}

func (c *recClient) Close(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed, c.code, c.reason = true, code, reason
	}
}

func (c *recClient) closedWith() (bool, int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed, c.code, c.reason
}

func (c *recClient) all() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string]any(nil), c.frames...)
}

func (c *recClient) types() []string {
	var out []string
	for _, f := range c.all() {
		out = append(out, f["type"].(string))
	}
	return out
}

// has reports whether a frame of type typ matching the optional predicate
// arrived.
func (c *recClient) has(typ string, pred func(map[string]any) bool) bool {
	for _, f := range c.all() {
		if f["type"] == typ && (pred == nil || pred(f)) {
			return true
		}
	}
	return false
}

func (c *recClient) wait(t testing.TB, typ string, pred func(map[string]any) bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "a "+typ+" frame", func() bool { return c.has(typ, pred) })
}

func (c *recClient) count(typ string) int {
	n := 0
	for _, f := range c.all() {
		if f["type"] == typ {
			n++
		}
	}
	return n
}

// tokens joins every token frame's text.
func (c *recClient) tokens() string {
	var sb strings.Builder
	for _, f := range c.all() {
		if f["type"] == protocol.MsgToken {
			sb.WriteString(f["token"].(string))
		}
	}
	return sb.String()
}

func running(f map[string]any) bool { return f["status"] == "running" }

func agentIdle(f map[string]any) bool { return f["status"] == "running" && f["agent"] == "idle" }

// attach creates the hub and attaches a recording client, waiting for the
// runtime to be up.
func attach(t testing.TB, m *hub.Manager, id string, p *auth.Principal) (*hub.Hub, *recClient) {
	t.Helper()
	h, c, _ := attachOnly(t, m, id, p)
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatalf("EnsureRuntimeReady: %v", err)
	}
	return h, c
}

// attachOnly creates the hub and attaches a recording client without
// asking for the runtime; detach (run again, harmlessly, when the test
// ends) detaches the client.
func attachOnly(t testing.TB, m *hub.Manager, id string, p *auth.Principal) (h *hub.Hub, c *recClient, detach func()) {
	t.Helper()
	ctx := context.Background()
	h, err := m.Hub(ctx, id)
	if err != nil {
		t.Fatalf("Hub: %v", err)
	}
	c = &recClient{}
	detach, err = h.Attach(ctx, c, p)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(detach)
	return h, c, detach
}
