package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// countingProvider counts snapshots taken through the simulated provider.
// When hold is set (before the gateways start), every sandbox creation
// waits until it is closed.
type countingProvider struct {
	*agentsim.Provider
	snapshots atomic.Int32
	hold      chan struct{}
}

func (p *countingProvider) EnsureSandbox(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if p.hold != nil {
		select {
		case <-p.hold:
		case <-ctx.Done():
			return sandbox.Sandbox{}, ctx.Err()
		}
	}
	return p.Provider.EnsureSandbox(ctx, spec)
}

func (p *countingProvider) Snapshot(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	p.snapshots.Add(1)
	return p.Provider.Snapshot(ctx, sessionID, sandboxID)
}

// world is the shared state of one test: the API (for credentials), the
// session store, a simulated sandbox provider, and the gateways started.
type world struct {
	api   *apitest.Env
	codec *schemas.Codec
	store *sessions.Store
	prov  *countingProvider
	logs  *testenv.LogBuffer

	t      *testing.T
	mu     sync.Mutex
	tokens map[string]string // sandbox tokens minted without a boot, by session
}

func newWorld(t *testing.T) *world {
	t.Helper()
	e := apitest.New(t, apitest.Modules(identity.Register))
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	prov := &countingProvider{Provider: agentsim.NewProvider(agentsim.Options{TokenDelay: 2 * time.Millisecond})}
	t.Cleanup(prov.Close)
	return &world{api: e, codec: codec, store: &sessions.Store{Pool: e.Deps.Pool, Codec: codec}, prov: prov,
		logs: &testenv.LogBuffer{}, t: t, tokens: map[string]string{}}
}

// newSessionWorld is a world with gateway "a" started and one session of a
// new user, its owner.
func newSessionWorld(t *testing.T) (w *world, g *gw, owner *apitest.User, sid string) {
	t.Helper()
	w = newWorld(t)
	g = w.start(t, "a")
	owner = w.api.NewUser(t)
	return w, g, owner, sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
}

// gw is one running gateway instance.
type gw struct {
	srv  *gateway.Server
	hubs *hub.Manager
	hs   *httptest.Server
	url  string
	c    func(token string) *client.Client
}

// gwOptions configure startGateway; the zero value is a gateway over w's
// simulated provider.
type gwOptions struct {
	// Instance prefixes the hub manager's instance id.
	Instance string
	// Provider runs the sandboxes [w's simulated provider].
	Provider sandbox.Provider
	// LogLevel of the instance's log [info].
	LogLevel slog.Level
	// Hub adjusts the hub manager's deps.
	Hub func(*hub.Deps)
	// Advertise registers the instance's address (AdvertiseURL), as a
	// gateway of several does.
	Advertise bool
	// Gateway adjusts the server's deps (Log and Hubs are the instance's).
	Gateway func(*gateway.Deps)
}

// startGateway runs a gateway instance on its own listener, with its own
// hub manager (like a process), shut down when the test ends.
func (w *world) startGateway(t *testing.T, o gwOptions) *gw {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	url := "http://" + hs.Listener.Addr().String()
	log := slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: o.LogLevel}))
	hd := hub.Deps{Sessions: w.store, Provider: o.Provider, Redis: w.api.Deps.Redis,
		InstanceID: o.Instance + "-" + uuid.NewString(), Log: log, GatewayURL: url}
	if hd.Provider == nil {
		hd.Provider = w.prov
	}
	if o.Hub != nil {
		o.Hub(&hd)
	}
	hubs := hub.NewManager(hd)
	gd := gateway.Deps{Cfg: w.api.Deps.Cfg, Log: log, Pool: w.api.Deps.Pool, Redis: w.api.Deps.Redis,
		Codec: w.codec, Hubs: hubs, Sessions: w.store, Authenticator: w.api.Server.Authenticator()}
	if o.Advertise {
		gd.AdvertiseURL = url
	}
	if o.Gateway != nil {
		o.Gateway(&gd)
	}
	srv, err := gateway.New(gd)
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = srv.Handler()
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hubs.Shutdown(ctx)
		srv.Close(ctx)
		hs.CloseClientConnections()
		hs.Close()
	})
	return &gw{srv: srv, hubs: hubs, hs: hs, url: url, c: func(tok string) *client.Client { return client.New(url, tok) }}
}

// start runs a plain gateway instance whose clients reconnect quickly.
func (w *world) start(t *testing.T, instance string) *gw {
	t.Helper()
	g := w.startGateway(t, gwOptions{Instance: instance})
	g.c = func(tok string) *client.Client {
		c := client.New(g.url, tok)
		c.Reconnect = client.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 3}
		return c
	}
	return g
}

func (w *world) serviceToken(t *testing.T) string {
	t.Helper()
	tok, err := identity.IssueServiceToken(w.api.Deps.Cfg.ServiceToken, "worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// sandboxToken is the session's sandbox token: the one a gateway's boot
// gave its sandbox (the provider's spec; waited for until the session runs
// on it), else one minted as a boot does for a session no gateway booted
// (kept, so repeated calls agree).
func (w *world) sandboxToken(sessionID string) string {
	w.t.Helper()
	var booted []string
	for _, spec := range w.prov.Specs() {
		if spec.SessionID == sessionID {
			booted = append(booted, spec.SandboxToken)
		}
	}
	if len(booted) > 0 {
		tok := ""
		testenv.Eventually(w.t, 10*time.Second, "the session running on a sandbox a boot gave a token", func() bool {
			for _, b := range booted {
				_, _, err := sessions.VerifySandboxToken(context.Background(), w.api.Deps.Pool, b)
				if err == nil {
					tok = b
					return true
				}
				if !errors.Is(err, auth.ErrUnauthenticated) {
					w.t.Fatal(err)
				}
			}
			return false
		})
		return tok
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if tok, ok := w.tokens[sessionID]; ok {
		return tok
	}
	tok := sessionstest.SandboxToken(w.t, w.api.Deps.Pool, sessionID)
	w.tokens[sessionID] = tok
	return tok
}

func (w *world) apiKey(t *testing.T, u *apitest.User) string {
	t.Helper()
	var k identity.CreatedAPIKey
	w.api.Do(t, "POST", "/api-keys", u.Token, map[string]any{"name": "cli"}).Expect(t, http.StatusCreated, &k)
	return k.Key
}

// call is one raw HTTP request to a gateway.
func call(t *testing.T, method, url, token string, body any, hdr map[string]string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// dialWS opens the session stream and returns the handshake status (101 on
// success, with the open connection).
func dialWS(t *testing.T, g *gw, sessionID, token string, inQuery bool, extra ...map[string]string) (int, *websocket.Conn) {
	t.Helper()
	url := "ws" + g.url[len("http"):] + "/proliferate/" + sessionID
	hdr := http.Header{}
	for _, m := range extra {
		for k, v := range m {
			hdr.Set(k, v)
		}
	}
	if inQuery {
		url += "?token=" + token
	} else if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, url, hdr)
	if errors.Is(err, websocket.ErrBadHandshake) && resp != nil {
		return resp.StatusCode, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return http.StatusSwitchingProtocols, c
}

// readToEnd reads c until a read fails (its close, or within elapsing)
// and returns that error.
func readToEnd(c *websocket.Conn, within time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(within))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			return err
		}
	}
}

// readUntil reads frames until one of type typ (or fails after the deadline).
func readUntil(t *testing.T, c *websocket.Conn, typ string) json.RawMessage {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		var head struct{ Type string }
		_ = json.Unmarshal(data, &head)
		if head.Type == typ {
			return data
		}
	}
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e httpapi.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not the error shape: %s", body)
	}
	if e.Error.RequestID == "" {
		t.Fatalf("error without request id: %s", body)
	}
	return e.Error.Code
}

// registerEcho adds a side-effect-free tool that counts its executions.
func registerEcho(g *gw, n *atomic.Int32) {
	g.srv.Tools().Register(tools.Tool{Name: "echo_test", Execute: func(_ context.Context, c tools.Call) (tools.Result, error) {
		k := n.Add(1)
		return tools.Result{Success: true, Result: "echo " + string(c.Args), Data: map[string]any{"execution": k}}, nil
	}})
}
