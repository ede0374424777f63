package gateway_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// simPassword is the simulated sandboxes' OpenCode Basic-auth password.
const simPassword = "sandbox-secret-pw"

// seenRequest is a request as the sandbox's OpenCode server received it.
type seenRequest struct {
	path, rawQuery string
	header         http.Header
}

// recordingProvider is the simulated provider with a recording front in
// front of every sandbox's OpenCode server, so tests see exactly what the
// gateway sent upstream.
type recordingProvider struct {
	*agentsim.Provider

	mu     sync.Mutex
	fronts map[string]*httptest.Server // session id → front
	seen   []seenRequest
}

func newRecordingProvider(t *testing.T) *recordingProvider {
	p := &recordingProvider{Provider: agentsim.NewProvider(agentsim.Options{Password: simPassword, TokenDelay: time.Millisecond}),
		fronts: map[string]*httptest.Server{}}
	t.Cleanup(func() {
		p.mu.Lock()
		for _, f := range p.fronts {
			f.CloseClientConnections()
			f.Close()
		}
		p.mu.Unlock()
		p.Provider.Close()
	})
	return p
}

func (p *recordingProvider) EnsureSandbox(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := p.Provider.EnsureSandbox(ctx, spec)
	if err != nil {
		return sb, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	front, ok := p.fronts[spec.SessionID]
	if !ok {
		target, _ := url.Parse(sb.AgentURL)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1
		front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if st := r.Header.Get("X-Test-Agent-Status"); st != "" {
				// The agent failing as OpenCode does (a JSON error naming
				// internals), for the gateway's mapping of upstream failures.
				code, _ := strconv.Atoi(st)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_, _ = io.WriteString(w, `{"name":"UnknownError","data":{"message":"agent-internal-stack at /root/.opencode/bin"}}`)
				return
			}
			if r.Header.Get("X-Test-Marker") != "" {
				p.mu.Lock()
				p.seen = append(p.seen, seenRequest{path: r.URL.EscapedPath(), rawQuery: r.URL.RawQuery, header: r.Header.Clone()})
				p.mu.Unlock()
			}
			rp.ServeHTTP(w, r)
		}))
		p.fronts[spec.SessionID] = front
	}
	sb.AgentURL = front.URL
	return sb, nil
}

// seenWith returns the recorded upstream requests carrying marker.
func (p *recordingProvider) seenWith(marker string) []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []seenRequest
	for _, s := range p.seen {
		if s.header.Get("X-Test-Marker") == marker {
			out = append(out, s)
		}
	}
	return out
}

// startWith runs a gateway instance over prov, logging at debug level
// with 64 KiB request bodies; mod adjusts its hub settings.
func (w *world) startWith(t *testing.T, instance string, prov sandbox.Provider, mod func(*hub.Deps)) *gw {
	t.Helper()
	return w.startGateway(t, gwOptions{Instance: instance, Provider: prov, LogLevel: slog.LevelDebug, Hub: mod,
		Gateway: func(d *gateway.Deps) { d.MaxBodyBytes = 64 << 10 }})
}

func proxyURL(g *gw, sid, token, rest string) string {
	return g.url + "/proxy/" + sid + "/" + token + "/opencode/" + rest
}

// The OpenCode API passes through to the session's sandbox: path rewritten,
// query kept, the sandbox's own Basic credentials instead of anything the
// client sent, no cookies; the sandbox's CORS and auth challenges stay out
// of the answer.
func TestProxyPassesThroughToTheSandbox(t *testing.T) {
	w := newWorld(t)
	prov := newRecordingProvider(t)
	g := w.startWith(t, "a", prov, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})

	marker := uuid.NewString()
	clientBasic := "Basic " + base64.StdEncoding.EncodeToString([]byte("opencode:client-guess"))
	resp, body := testenv.Request(t, "GET", proxyURL(g, sid, owner.Token, "session/status?directory=%2Fworkspace&x=1"), "",
		map[string]string{"Authorization": clientBasic, "Cookie": "dash=secret-cookie", "X-Test-Marker": marker,
			gateway.OrgHeader: uuid.NewString()})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET session/status through the proxy: %d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(body)), "{") {
		t.Fatalf("not OpenCode's JSON: %s", body)
	}
	seen := prov.seenWith(marker)
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d marked requests, want 1", len(seen))
	}
	up := seen[0]
	if up.path != "/session/status" || up.rawQuery != "directory=%2Fworkspace&x=1" {
		t.Fatalf("upstream path %q query %q", up.path, up.rawQuery)
	}
	req := &http.Request{Header: up.header}
	user, pw, ok := req.BasicAuth()
	if !ok || user != "opencode" || pw != simPassword {
		t.Fatalf("upstream credentials %q/%q (ok %v), want the sandbox's own", user, pw, ok)
	}
	if got := up.header.Values("Authorization"); len(got) != 1 {
		t.Fatalf("upstream Authorization headers: %q", got)
	}
	if c := up.header.Get("Cookie"); c != "" {
		t.Fatalf("client cookies reached the sandbox: %q", c)
	}
	if up.header.Get(gateway.OrgHeader) != "" {
		t.Fatal("the org header reached the sandbox")
	}
	for k := range up.header {
		if strings.Contains(strings.Join(up.header.Values(k), " "), owner.Token) {
			t.Fatalf("the client's token reached the sandbox in %s", k)
		}
	}

	// Another method with a body passes through too; finished requests
	// hold no proxy connection.
	resp, body = testenv.Request(t, "POST", proxyURL(g, sid, owner.Token, "session"), `{"title":"via proxy"}`,
		map[string]string{"Content-Type": "application/json", "X-Test-Marker": marker})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id"`) {
		t.Fatalf("POST session through the proxy: %d %s", resp.StatusCode, body)
	}
	h, ok := g.hubs.Get(sid)
	if !ok {
		t.Fatal("no hub after proxying")
	}
	// The handler releases its connection after the response is written,
	// so the client can read the body a moment before that.
	testenv.Eventually(t, 5*time.Second, "no proxy connection once the requests ended", func() bool {
		return h.ProxyConnections() == 0
	})

	// A body over the gateway's limit never reaches the sandbox.
	before := len(prov.seenWith(marker))
	resp, body = testenv.Request(t, "POST", proxyURL(g, sid, owner.Token, "session"), `{"title":"`+strings.Repeat("x", 70<<10)+`"}`,
		map[string]string{"Content-Type": "application/json", "X-Test-Marker": marker})
	if resp.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, body) != "body_too_large" {
		t.Fatalf("oversized body: %d %s", resp.StatusCode, body)
	}
	if len(prov.seenWith(marker)) != before {
		t.Fatal("an oversized body reached the sandbox")
	}

	if strings.Contains(w.logs.String(), owner.Token) {
		t.Fatal("the path token was logged")
	}
}

// An SSE stream (GET /event) streams through unbuffered: an event the
// agent publishes arrives while the stream holds one proxy connection on
// the hub, and the connection is released when the client goes away.
func TestProxyStreamsServerSentEvents(t *testing.T) {
	w := newWorld(t)
	prov := newRecordingProvider(t)
	g := w.startWith(t, "a", prov, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", proxyURL(g, sid, owner.Token, "event"), nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET event: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	waitLine := func(what string, match func(string) bool) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stream ended waiting for %s", what)
				}
				if match(l) {
					return
				}
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitLine("server.connected", func(l string) bool { return strings.Contains(l, "server.connected") })
	h, ok := g.hubs.Get(sid)
	if !ok {
		t.Fatal("no hub")
	}
	if n := h.ProxyConnections(); n != 1 {
		t.Fatalf("proxy connections with the stream open: %d, want 1", n)
	}

	// The agent works on a prompt: its events arrive through the proxy.
	if st, b := call(t, "POST", g.url+"/proliferate/"+sid+"/message", owner.Token, map[string]string{"content": "[[tokens:5]] hi"}, nil); st != http.StatusAccepted {
		t.Fatalf("prompt: %d %s", st, b)
	}
	waitLine("a message event", func(l string) bool { return strings.HasPrefix(l, "data: ") && strings.Contains(l, `"message.`) })
	if n := h.ProxyConnections(); n != 1 {
		t.Fatalf("proxy connections while streaming: %d, want 1", n)
	}

	cancel()
	testenv.Eventually(t, 10*time.Second, "the proxy connection to be released", func() bool { return h.ProxyConnections() == 0 })

	// A stream ends with the session's hub: pausing the session closes it.
	req2, _ := http.NewRequest("GET", proxyURL(g, sid, owner.Token, "event"), nil)
	resp2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("second stream: %d", resp2.StatusCode)
	}
	if n := h.ProxyConnections(); n != 1 {
		t.Fatalf("proxy connections with the second stream open: %d, want 1", n)
	}
	if st, b := call(t, "POST", g.url+"/proliferate/"+sid+"/pause", owner.Token, nil, nil); st != http.StatusOK {
		t.Fatalf("pause: %d %s", st, b)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = io.Copy(io.Discard, resp2.Body)
	}()
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatal("the proxied stream outlived the paused session")
	}
	testenv.Eventually(t, 10*time.Second, "the stream's proxy connection to be released", func() bool { return h.ProxyConnections() == 0 })
}

// Who may proxy: the token is a bearer credential in the path; wrong is
// 401, another organization's session 404, a sandbox token 403 (even its
// own session's), a member who is not the creator 403; the creator and
// platform services pass.
func TestProxyAuthorization(t *testing.T) {
	w := newWorld(t)
	prov := newRecordingProvider(t)
	g := w.startWith(t, "a", prov, nil)
	owner := w.api.NewUser(t)
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, auth.RoleMember)
	stranger := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})

	for _, c := range []struct {
		name, token string
		status      int
		code        string
	}{
		{"wrong token", "not-a-token", http.StatusUnauthorized, "unauthenticated"},
		{"another org's person", stranger.Token, http.StatusNotFound, "not_found"},
		{"sandbox token of this session", w.sandboxToken(sid), http.StatusForbidden, "forbidden"},
		{"member who is not the creator", member.Token, http.StatusForbidden, "forbidden"},
		{"the creator", owner.Token, http.StatusOK, ""},
		{"a platform service", w.serviceToken(t), http.StatusOK, ""},
	} {
		resp, body := testenv.Request(t, "GET", proxyURL(g, sid, c.token, "session/status"), "", nil)
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s, want %d", c.name, resp.StatusCode, body, c.status)
		}
		if c.code != "" && errorCode(t, body) != c.code {
			t.Fatalf("%s: code %s", c.name, body)
		}
	}
	// Refused requests never started anything: only the passing ones did.
	if prov.Created() != 1 {
		t.Fatalf("sandboxes created: %d, want 1", prov.Created())
	}
	if strings.Contains(w.logs.String(), owner.Token) || strings.Contains(w.logs.String(), member.Token) {
		t.Fatal("a path token was logged")
	}
}

// A session owned by another gateway instance is 503 not_owner (retry on
// the owner), as on the other routes; this instance starts nothing.
func TestProxyOnNonOwnerInstance(t *testing.T) {
	w := newWorld(t)
	prov := newRecordingProvider(t)
	a := w.startWith(t, "a", prov, nil)
	b := w.startWith(t, "b", prov, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	if resp, body := testenv.Request(t, "GET", proxyURL(a, sid, owner.Token, "session/status"), "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("owner: %d %s", resp.StatusCode, body)
	}
	resp, body := testenv.Request(t, "GET", proxyURL(b, sid, owner.Token, "session/status"), "", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != "not_owner" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("non-owner: %d %s", resp.StatusCode, body)
	}
	if prov.Created() != 1 {
		t.Fatalf("sandboxes created: %d, want 1", prov.Created())
	}
}

// fakeClock is a settable clock for the hub's activity bookkeeping.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The heartbeat touches the session's hub here and nothing else: it
// starts no runtime and creates no hub; people of the org and services may
// send it, sandboxes may not; an instance that does not own a live session
// answers not_owner so the heartbeat is retried where it counts.
func TestHeartbeat(t *testing.T) {
	w := newWorld(t)
	prov := newRecordingProvider(t)
	clock := &fakeClock{now: time.Now()}
	// MaxHubs 3: a fourth hub evicts the least recently used idle one,
	// which shows whether a heartbeat counted as use. Long TTLs and grace
	// periods keep the background checks and the lease lag guard out of
	// the fake clock's way.
	mod := func(d *hub.Deps) {
		d.Now, d.MaxHubs, d.IdleTTL, d.OwnerTTL = clock.Now, 3, 24*time.Hour, time.Hour
		d.IdleGrace, d.HeadlessIdleGrace = 24*time.Hour, 24*time.Hour
	}
	a := w.startWith(t, "a", prov, mod)
	b := w.startWith(t, "b", prov, mod)
	owner := w.api.NewUser(t)
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, auth.RoleMember)
	stranger := w.api.NewUser(t)
	beat := func(g *gw, sid, tok string) (int, []byte) {
		return call(t, "POST", g.url+"/proliferate/"+sid+"/heartbeat", tok, nil, nil)
	}
	newSession := func() string {
		return sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	}

	// A session nobody runs: 204, and nothing is created or started.
	idle := newSession()
	if st, body := beat(a, idle, member.Token); st != http.StatusNoContent {
		t.Fatalf("heartbeat of an idle session: %d %s", st, body)
	}
	if _, ok := a.hubs.Get(idle); ok {
		t.Fatal("a heartbeat created a hub")
	}
	if prov.Created() != 0 {
		t.Fatal("a heartbeat started a sandbox")
	}
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"no credential", "", http.StatusUnauthorized},
		{"another org's person", stranger.Token, http.StatusNotFound},
		{"sandbox token", w.sandboxToken(idle), http.StatusForbidden},
		{"a platform service", w.serviceToken(t), http.StatusNoContent},
	} {
		if st, body := beat(a, idle, c.token); st != c.status {
			t.Fatalf("%s: %d %s, want %d", c.name, st, body, c.status)
		}
	}

	// A live session (runtime up through the proxy on a): its heartbeat is
	// 204 on a, not_owner on b, and starts nothing.
	live := newSession()
	if resp, body := testenv.Request(t, "GET", proxyURL(a, live, owner.Token, "session/status"), "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("proxy: %d %s", resp.StatusCode, body)
	}
	if st, body := beat(a, live, member.Token); st != http.StatusNoContent {
		t.Fatalf("heartbeat on the owner: %d %s", st, body)
	}
	st, body := beat(b, live, member.Token)
	if st != http.StatusServiceUnavailable || errorCode(t, body) != "not_owner" {
		t.Fatalf("heartbeat on a non-owner: %d %s", st, body)
	}
	if _, ok := b.hubs.Get(live); ok {
		t.Fatal("a heartbeat created a hub on the non-owner")
	}
	if prov.Created() != 1 {
		t.Fatalf("sandboxes created: %d, want 1 (heartbeats start nothing)", prov.Created())
	}

	// Two hubs without a runtime on a, the second a minute younger; ten
	// minutes on, a heartbeat reaches the older one.
	older, younger := newSession(), newSession()
	olderHub, err := a.hubs.Hub(context.Background(), older)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	youngerHub, err := a.hubs.Hub(context.Background(), younger)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Minute)
	if st, body := beat(a, older, member.Token); st != http.StatusNoContent {
		t.Fatalf("heartbeat: %d %s", st, body)
	}
	// A fourth hub evicts the least recently used: without the heartbeat
	// that would be the older one; with it, the younger.
	if _, err := a.hubs.Hub(context.Background(), newSession()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-youngerHub.Done():
	default:
		t.Fatal("the untouched hub was not the one evicted")
	}
	select {
	case <-olderHub.Done():
		t.Fatal("the heartbeat did not count: its hub was evicted as least recently used")
	default:
	}
}
