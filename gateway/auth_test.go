package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Every gateway route against every kind of caller: the creator (access
// token and API key), another member of the org, a member of another org,
// a service, the session's sandbox, another session's sandbox, a forged
// token and none. Another org's session is 404; a sandbox can read its own
// session and call its own tools, never prompt, cancel, stream or create.
func TestAuthMatrix(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	var echoes atomic.Int32
	registerEcho(g, &echoes)

	owner := w.api.NewUser(t)
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, auth.RoleMember)
	stranger := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, Title: "matrix"})
	other := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	// Boot sid's sandbox first, so the routes below that would boot it
	// find it running and the sandbox's token is the one its boot minted.
	if st, body := call(t, "POST", g.url+"/proliferate/"+sid+"/start", owner.Token, map[string]any{}, nil); st != 202 {
		t.Fatalf("start: %d %s", st, body)
	}
	testenv.Eventually(t, 10*time.Second, "sandbox booted", func() bool {
		h, ok := g.hubs.Get(sid)
		return ok && h.Status().RuntimeReady
	})

	callers := []struct {
		name, token string
		hdr         map[string]string
		sandboxOf   string // the token is this session's sandbox token, taken at call time
	}{
		{name: "creator", token: owner.Token},
		{name: "creator api key", token: w.apiKey(t, owner)},
		{name: "org member", token: member.Token},
		{name: "other org", token: stranger.Token},
		{name: "service", token: w.serviceToken(t)},
		{name: "service scoped to org", token: w.serviceToken(t), hdr: map[string]string{"X-Proliferate-Org-Id": owner.OrgID}},
		{name: "service scoped to other org", token: w.serviceToken(t), hdr: map[string]string{"X-Proliferate-Org-Id": stranger.OrgID}},
		{name: "own sandbox", sandboxOf: sid},
		{name: "other session's sandbox", sandboxOf: other},
		// The old derived form, computed with the real SERVICE_TOKEN.
		{name: "forged sandbox", token: sessionstest.DerivedSandboxToken(w.api.Deps.Cfg.ServiceToken, sid)},
		{name: "garbage", token: "eyJhbGciOiJIUzI1NiJ9.e30.sig"},
		{name: "none", token: ""},
	}
	// Expected status per route, in callers order.
	want := map[string][]int{
		//             creator key  member stranger svc  svcorg svcother sbx  sbxother forged garbage none
		"info":     {200, 200, 200, 404, 200, 200, 404, 200, 404, 401, 401, 401},
		"status":   {200, 200, 200, 404, 200, 200, 404, 200, 404, 401, 401, 401},
		"message":  {202, 202, 403, 404, 202, 202, 404, 403, 403, 401, 401, 401},
		"cancel":   {202, 202, 403, 404, 202, 202, 404, 403, 403, 401, 401, 401},
		"ws":       {101, 101, 101, 404, 101, 101, 404, 403, 403, 401, 401, 401},
		"snapshot": {200, 200, 403, 404, 200, 200, 404, 403, 403, 401, 401, 401},
		"start":    {202, 202, 403, 404, 202, 202, 404, 403, 403, 401, 401, 401},
		"tool":     {403, 403, 403, 403, 403, 403, 403, 200, 403, 401, 401, 401},
		"create":   {201, 201, 201, 201, 422, 422, 422, 403, 403, 401, 401, 401},
	}
	base := g.url + "/proliferate/"
	for route, statuses := range want {
		for i, cl := range callers {
			t.Run(route+"/"+cl.name, func(t *testing.T) {
				tok := cl.token
				if cl.sandboxOf != "" {
					tok = w.sandboxToken(cl.sandboxOf)
				}
				var status int
				var body []byte
				switch route {
				case "info":
					status, body = call(t, "GET", base+sid, tok, nil, cl.hdr)
				case "status":
					status, body = call(t, "GET", base+sid+"/status", tok, nil, cl.hdr)
				case "message":
					h := map[string]string{"Idempotency-Key": uuid.NewString()}
					for k, v := range cl.hdr {
						h[k] = v
					}
					status, body = call(t, "POST", base+sid+"/message", tok, map[string]string{"content": "hello"}, h)
				case "cancel":
					status, body = call(t, "POST", base+sid+"/cancel", tok, map[string]any{}, cl.hdr)
				case "snapshot", "start":
					status, body = call(t, "POST", base+sid+"/"+route, tok, map[string]any{}, cl.hdr)
				case "tool":
					status, body = call(t, "POST", base+sid+"/tools/echo_test", tok,
						map[string]any{"tool_call_id": uuid.NewString(), "args": map[string]any{}}, cl.hdr)
				case "create":
					status, body = call(t, "POST", base+"sessions", tok, map[string]any{"title": "new"}, cl.hdr)
				case "ws":
					st, c := dialWS(t, g, sid, tok, false, cl.hdr)
					status = st
					if c != nil {
						readUntil(t, c, "init")
						_ = c.Close()
					}
				}
				if status != statuses[i] {
					t.Fatalf("%s by %s: status %d, want %d: %s", route, cl.name, status, statuses[i], body)
				}
				if status >= 400 && route != "ws" {
					code := errorCode(t, body)
					wantCode := map[int]string{401: "unauthenticated", 403: "forbidden", 404: "not_found", 422: "validation_failed"}[status]
					if code != wantCode {
						t.Fatalf("code %q, want %q", code, wantCode)
					}
				}
			})
		}
	}
	// The stream also takes the token from ?token= (browsers cannot set
	// headers on WebSocket upgrades); a sandbox token is refused there too.
	if st, c := dialWS(t, g, sid, owner.Token, true); st != 101 {
		t.Fatalf("token in query: %d", st)
	} else {
		readUntil(t, c, "init")
	}
	if st, _ := dialWS(t, g, sid, w.sandboxToken(sid), true); st != 403 {
		t.Fatalf("sandbox token in query: %d", st)
	}
	// Unknown and malformed ids are 404, like another org's.
	for _, id := range []string{uuid.NewString(), "not-a-uuid"} {
		if st, _ := call(t, "GET", base+id, owner.Token, nil, nil); st != 404 {
			t.Fatalf("GET %s: %d", id, st)
		}
	}
	if n := echoes.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; only the own sandbox may call it", n)
	}
}

// Credentials never appear in the gateway's logs (the WebSocket token
// travels in the query string).
func TestTokensAreNotLogged(t *testing.T) {
	w, g, owner, sid := newSessionWorld(t)
	if st, c := dialWS(t, g, sid, owner.Token, true); st != 101 {
		t.Fatal(st)
	} else {
		readUntil(t, c, "init")
	}
	testenv.Eventually(t, 10*time.Second, "sandbox booted", func() bool { return w.prov.Created() == 1 })
	call(t, "POST", g.url+"/proliferate/"+sid+"/tools/save_snapshot", w.sandboxToken(sid),
		map[string]any{"tool_call_id": "x", "args": map[string]any{}}, nil)
	logs := w.logs.String()
	for _, secret := range []string{owner.Token, w.sandboxToken(sid)} {
		if contains(logs, secret) {
			t.Fatalf("a credential was logged")
		}
	}
	if !contains(logs, "gateway request") {
		t.Fatalf("no request log lines: %s", logs)
	}
}

func contains(s, sub string) bool { return sub != "" && strings.Contains(s, sub) }

// Browsers of the configured origins may call the gateway (preflight and
// actual request); other origins get no CORS headers.
func TestCORS(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	st, _ := call(t, "OPTIONS", g.url+"/proliferate/sessions", "", nil, map[string]string{
		"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"})
	if st != 204 {
		t.Fatalf("preflight: %d", st)
	}
	req, _ := http.NewRequest("GET", g.url+"/healthz", nil)
	for origin, want := range map[string]string{"https://app.example.com": "https://app.example.com", "https://evil.example": ""} {
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != want {
			t.Fatalf("origin %s: %q", origin, got)
		}
	}
}

// Over HTTP: a sandbox's token calls its session's tools while the sandbox
// runs; after a pause it is refused (401), the resumed sandbox gets a new
// token that works, and terminate ends that one too. Another session's
// tools refuse it throughout.
func TestSandboxTokenDiesWithItsSandbox(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	var echoes atomic.Int32
	registerEcho(g, &echoes)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	other := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	ctx := context.Background()
	tool := func(session, tok string) int {
		st, _ := call(t, "POST", g.url+"/proliferate/"+session+"/tools/echo_test", tok,
			map[string]any{"tool_call_id": uuid.NewString(), "args": map[string]any{}}, nil)
		return st
	}
	boot := func() (*hub.Hub, string) {
		t.Helper()
		h, err := g.hubs.Hub(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.EnsureRuntimeReady(ctx); err != nil {
			t.Fatal(err)
		}
		specs := w.prov.Specs()
		return h, specs[len(specs)-1].SandboxToken
	}

	h, first := boot()
	if st := tool(sid, first); st != 200 {
		t.Fatalf("own tool while running: %d", st)
	}
	if st := tool(other, first); st != 403 && st != 404 {
		t.Fatalf("another session's tool: %d", st)
	}
	if err := h.Pause(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	if st := tool(sid, first); st != 401 {
		t.Fatalf("after pause: %d, want 401", st)
	}

	h, second := boot()
	if second == first {
		t.Fatal("the resumed sandbox got the old token")
	}
	if st := tool(sid, second); st != 200 {
		t.Fatalf("resumed sandbox's token: %d", st)
	}
	if st := tool(sid, first); st != 401 {
		t.Fatalf("old token after resume: %d", st)
	}
	if err := h.Terminate(ctx, "manual", "", ""); err != nil {
		t.Fatal(err)
	}
	if st := tool(sid, second); st != 401 {
		t.Fatalf("after terminate: %d, want 401", st)
	}
	if n := echoes.Load(); n != 2 {
		t.Fatalf("the tool ran %d times, want 2", n)
	}
}
