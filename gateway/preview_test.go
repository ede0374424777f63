package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// previewGateway is a gateway over the real local provider (bubblewrap,
// the real CLI and its services supervisor) announcing previews.
func previewGateway(t *testing.T, w *world) (*gw, *local.Provider) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(t.Context(), filepath.Join(filepath.Dir(file), "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	llm := httptest.NewServer(llmsim.New(llmsim.Options{APIKey: "sim-key"}).Handler())
	t.Cleanup(llm.Close)
	prov, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: tools.Binary, PluginDir: tools.PluginDir, CLIPath: buildCLI(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)
	g := w.startWith(t, "pv", prov, func(d *hub.Deps) {
		d.SSEHeartbeatTimeout = 30 * time.Second
		d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
		d.Previews = hub.PreviewDeps{PollEvery: 100 * time.Millisecond,
			URL: gateway.PreviewLinks{Redis: w.api.Deps.Redis, PublicURL: d.GatewayURL, TTL: time.Minute}.URL}
	})
	return g, prov
}

// startPreviewServer runs sandboxtest.PreviewServerPy on port in the
// session's sandbox, under its services supervisor (next to the agent).
func startPreviewServer(t *testing.T, g *gw, prov *local.Provider, sid string, port int) {
	t.Helper()
	h, err := g.hubs.Hub(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	sbID := h.Status().SandboxID
	run := func(stdin []byte, args ...string) {
		t.Helper()
		res, err := prov.Exec(t.Context(), sbID, sandbox.ExecCommand{Args: args, Stdin: stdin, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v: %v %d %s %s", args, err, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	run([]byte(sandboxtest.PreviewServerPy), "sh", "-c", "cat > .preview.py")
	specs, _ := json.Marshal([]map[string]string{{"name": "web", "command": sandboxtest.PreviewServerCommand(".preview.py", port)}})
	run(specs, "proliferate", "services", "load")
}

// get does one request with a client (cookies, no redirects followed
// unless follow).
func get(t *testing.T, c *http.Client, method, u, token string, body string) (int, string, *http.Response) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}
}

// wsEcho opens a WebSocket (headers hdr) and checks one echo; it returns
// the handshake status.
func wsEcho(t *testing.T, u string, hdr http.Header) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(u, "http"), hdr)
	if err != nil {
		if resp != nil {
			return resp.StatusCode
		}
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte("hi-preview")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "echo:hi-preview" {
		t.Fatalf("websocket echo: %q %v", msg, err)
	}
	return http.StatusSwitchingProtocols
}

// A service listening in an isolated sandbox is announced (preview_url)
// and reached through the gateway by the session's members over HTTP and
// WebSocket (bearer, or the member's link that becomes a cookie); another
// organization is refused; a share link reads (GET) until it is revoked,
// never writes nor opens WebSockets, and an expired one is refused; ports
// outside the range or the sandbox's own are 400; a port of the host
// stays out of reach.
func TestPreviewsAndShareLinks(t *testing.T) {
	w := newWorld(t)
	g, prov := previewGateway(t, w)
	owner := w.api.NewUser(t)
	stranger := w.api.NewUser(t) // another organization
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, ModelID: "claude-sim"})
	st, ws := dialWS(t, g, sid, owner.Token, false)
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("session stream: %d", st)
	}
	fr := readFrames(ws)
	port := 20000 + int(time.Now().UnixNano()%20000)
	startPreviewServer(t, g, prov, sid, port)

	// Announced once the port listens, with the member's link.
	frame := fr.wait(t, "preview_url", func(typ string, m map[string]any) bool {
		return typ == protocol.MsgPreviewURL && m["port"] == float64(port)
	})
	base := g.url + "/proliferate/" + sid + "/preview/" + strconv.Itoa(port) + "/"
	if frame["url"] != base {
		t.Fatalf("preview_url url %v, want %s", frame["url"], base)
	}
	openURL, _ := frame["open_url"].(string)
	if !strings.HasPrefix(openURL, base+"?"+gateway.PreviewTokenParam+"=ppv_") {
		t.Fatalf("preview_url open_url %q", openURL)
	}

	// A member with a bearer credential: the credential never reaches the
	// sandbox, X-Forwarded-Prefix does.
	plain := &http.Client{Timeout: 30 * time.Second}
	code, body, _ := get(t, plain, "GET", base+"hello?x=1", owner.Token, "")
	prefix := "/proliferate/" + sid + "/preview/" + strconv.Itoa(port)
	if want := "preview-ok path=/hello?x=1 prefix=" + prefix + " cookie= auth="; code != 200 || body != want {
		t.Fatalf("member GET: %d %q", code, body)
	}
	if code, body, _ := get(t, plain, "POST", base+"echo", owner.Token, "data-1"); code != 200 || body != "POST:data-1" {
		t.Fatalf("member POST: %d %q", code, body)
	}
	if st := wsEcho(t, base+"ws", http.Header{"Authorization": {"Bearer " + owner.Token}}); st != http.StatusSwitchingProtocols {
		t.Fatalf("member websocket: %d", st)
	}
	// The member's link: exchanged for a cookie (303 to the URL without
	// the token), then the cookie alone opens the preview; it is not
	// passed to the sandbox.
	br := browser(t)
	code, body, resp := get(t, br, "GET", openURL+"&b=2&a=1", "", "")
	if code != 200 || !strings.Contains(body, "preview-ok path=/?b=2&a=1 ") || strings.Contains(body, "proliferate_preview") {
		t.Fatalf("member link: %d %q", code, body)
	}
	if resp.Request.URL.RawQuery != "b=2&a=1" {
		t.Fatalf("the link's token stayed in the URL (or the app's query changed): %s", resp.Request.URL)
	}
	if code, body, _ := get(t, br, "PUT", base+"x", "", "data-2"); code != 200 || body != "PUT:data-2" {
		t.Fatalf("member cookie PUT: %d %q", code, body)
	}
	wsCookie := http.Header{"Cookie": {cookieHeader(br, base)}}
	if st := wsEcho(t, base+"ws", wsCookie); st != http.StatusSwitchingProtocols {
		t.Fatalf("member websocket with the cookie: %d", st)
	}

	// Refused: nobody, another organization, a link of another port.
	if code, body, _ := get(t, plain, "GET", base, "", ""); code != 401 || errorCode(t, []byte(body)) != "unauthenticated" {
		t.Fatalf("anonymous: %d %s", code, body)
	}
	if code, body, _ := get(t, plain, "GET", base, stranger.Token, ""); code != 404 || errorCode(t, []byte(body)) != "not_found" {
		t.Fatalf("another org: %d %s", code, body)
	}
	other := strings.Replace(openURL, "/"+strconv.Itoa(port)+"/", "/"+strconv.Itoa(port+1)+"/", 1)
	if code, body, _ := get(t, browser(t), "GET", other, "", ""); code != 401 {
		t.Fatalf("a link of another port: %d %s", code, body)
	}

	// Ports outside the range and the sandbox's own: 400.
	for _, p := range []string{"80", "4096", "4100"} {
		code, body, _ := get(t, plain, "GET", g.url+"/proliferate/"+sid+"/preview/"+p+"/", owner.Token, "")
		if code != 400 || errorCode(t, []byte(body)) != "port_not_allowed" {
			t.Fatalf("port %s: %d %s", p, code, body)
		}
	}
	if code, body, _ := get(t, plain, "GET", g.url+"/proliferate/"+sid+"/preview/99999/", owner.Token, ""); code != 422 {
		t.Fatalf("port 99999: %d %s", code, body)
	}
	// A port of the host: the preview connects inside the sandbox, where
	// nothing listens on it.
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "host-secret") }))
	t.Cleanup(host.Close)
	_, hostPort, _ := net.SplitHostPort(strings.TrimPrefix(host.URL, "http://"))
	code, body, _ = get(t, plain, "GET", g.url+"/proliferate/"+sid+"/preview/"+hostPort+"/", owner.Token, "")
	if code != 502 || strings.Contains(body, "host-secret") || errorCode(t, []byte(body)) != "port_unreachable" {
		t.Fatalf("host port through the preview: %d %s", code, body)
	}

	// Another session's sandbox (same organization) stays out of reach:
	// its server's port is not listening in this session's sandbox, and
	// this session's cookie does not open the other's previews.
	sid2 := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, ModelID: "claude-sim"})
	port2 := port + 1
	startPreviewServer(t, g, prov, sid2, port2)
	base2 := g.url + "/proliferate/" + sid2 + "/preview/" + strconv.Itoa(port2) + "/"
	testenv.Eventually(t, 30*time.Second, "the other session's server answering", func() bool {
		code, _, _ := get(t, plain, "GET", base2, owner.Token, "")
		return code == 200
	})
	code, body, _ = get(t, plain, "GET", g.url+"/proliferate/"+sid+"/preview/"+strconv.Itoa(port2)+"/", owner.Token, "")
	if code != 502 || strings.Contains(body, "preview-ok") {
		t.Fatalf("another session's port through this session's preview: %d %s", code, body)
	}
	req, _ := http.NewRequest("GET", g.url+"/proliferate/"+sid2+"/preview/"+strconv.Itoa(port)+"/", nil)
	req.Header.Set("Cookie", cookieHeader(br, base))
	if resp, err := plain.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("this session's cookie on another session: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Share links.
	var sh gateway.CreatedShare
	code, raw := call(t, "POST", base+"share", owner.Token, map[string]any{"ttl_seconds": 3600}, nil)
	if code != 201 || json.Unmarshal(raw, &sh) != nil || !sh.Active {
		t.Fatalf("share: %d %s", code, raw)
	}
	if code, raw := call(t, "POST", base+"share", owner.Token, map[string]any{"ttl_seconds": 10 * 365 * 86400}, nil); code != 422 {
		t.Fatalf("share for ten years: %d %s", code, raw)
	}
	if code, raw := call(t, "POST", base+"share", stranger.Token, nil, nil); code != 404 {
		t.Fatalf("share by another org: %d %s", code, raw)
	}
	if code, raw := call(t, "POST", g.url+"/proliferate/"+sid+"/preview/22/share", owner.Token, nil, nil); code != 400 {
		t.Fatalf("share of port 22: %d %s", code, raw)
	}
	su, err := url.Parse(sh.URL)
	if err != nil || !strings.HasPrefix(su.RawQuery, gateway.ShareTokenParam+"=pps_") {
		t.Fatalf("share url %q", sh.URL)
	}
	shareURL := base + "?" + su.RawQuery
	visitor := browser(t)
	if code, body, _ := get(t, visitor, "GET", shareURL, "", ""); code != 200 || !strings.Contains(body, "preview-ok path=/ ") || strings.Contains(body, "pps_") {
		t.Fatalf("share GET: %d %q", code, body)
	}
	if code, body, _ := get(t, visitor, "GET", base+"page.css", "", ""); code != 200 || !strings.Contains(body, "path=/page.css") {
		t.Fatalf("share GET with its cookie: %d %q", code, body)
	}
	if code, _, _ := get(t, visitor, "HEAD", base, "", ""); code != 200 {
		t.Fatalf("share HEAD: %d", code)
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		if code, body, _ := get(t, visitor, m, base+"x", "", "w"); code != 403 || errorCode(t, []byte(body)) != "read_only" {
			t.Fatalf("share %s: %d %s", m, code, body)
		}
	}
	if st := wsEcho(t, base+"ws", http.Header{"Cookie": {cookieHeader(visitor, base)}}); st != http.StatusForbidden {
		t.Fatalf("share websocket: %d", st)
	}
	var list struct{ Shares []gateway.Share }
	code, raw = call(t, "GET", g.url+"/proliferate/"+sid+"/preview/shares", owner.Token, nil, nil)
	if code != 200 || json.Unmarshal(raw, &list) != nil || len(list.Shares) != 1 || list.Shares[0].ID != sh.ID || !list.Shares[0].Active {
		t.Fatalf("list shares: %d %s", code, raw)
	}
	if strings.Contains(string(raw), "pps_") {
		t.Fatalf("a listed share shows its token: %s", raw)
	}
	if code, raw := call(t, "DELETE", g.url+"/proliferate/"+sid+"/preview/shares/"+sh.ID, stranger.Token, nil, nil); code != 404 {
		t.Fatalf("revoke by another org: %d %s", code, raw)
	}
	if code, raw := call(t, "DELETE", g.url+"/proliferate/"+sid+"/preview/shares/"+sh.ID, owner.Token, nil, nil); code != 204 {
		t.Fatalf("revoke: %d %s", code, raw)
	}
	if code, body, _ := get(t, visitor, "GET", base, "", ""); code != 401 || errorCode(t, []byte(body)) != "share_link_invalid" {
		t.Fatalf("revoked share (cookie): %d %s", code, body)
	}
	if code, body, _ := get(t, browser(t), "GET", shareURL, "", ""); code != 401 {
		t.Fatalf("revoked share (link): %d %s", code, body)
	}
	// An expired link.
	var sh2 gateway.CreatedShare
	if code, raw := call(t, "POST", base+"share", owner.Token, nil, nil); code != 201 || json.Unmarshal(raw, &sh2) != nil {
		t.Fatalf("share 2: %d %s", code, raw)
	}
	if _, err := w.api.Deps.Pool.Exec(t.Context(), `UPDATE preview_shares SET expires_at = created_at + interval '1 millisecond' WHERE id = $1`, sh2.ID); err != nil {
		t.Fatal(err)
	}
	su2, _ := url.Parse(sh2.URL)
	if code, body, _ := get(t, browser(t), "GET", base+"?"+su2.RawQuery, "", ""); code != 401 || errorCode(t, []byte(body)) != "share_link_invalid" {
		t.Fatalf("expired share: %d %s", code, body)
	}

	// The listing route.
	var pv struct {
		Running  bool
		Previews []gateway.PreviewInfo
	}
	code, raw = call(t, "GET", g.url+"/proliferate/"+sid+"/previews", owner.Token, nil, nil)
	if code != 200 || json.Unmarshal(raw, &pv) != nil || !pv.Running || len(pv.Previews) != 1 || pv.Previews[0].Port != port {
		t.Fatalf("previews: %d %s", code, raw)
	}
	if code, raw := call(t, "GET", g.url+"/proliferate/"+sid+"/previews", stranger.Token, nil, nil); code != 404 {
		t.Fatalf("previews of another org: %d %s", code, raw)
	}
	// No token in the logs.
	logs := w.logs.String()
	for _, secret := range []string{strings.TrimPrefix(su.RawQuery, gateway.ShareTokenParam+"="), openURL[strings.Index(openURL, "ppv_"):]} {
		if strings.Contains(logs, secret) {
			t.Fatalf("a preview token is in the logs")
		}
	}
}

// cookieHeader is the Cookie header a browser (jar) sends to u.
func cookieHeader(c *http.Client, u string) string {
	pu, _ := url.Parse(u)
	var parts []string
	for _, ck := range c.Jar.Cookies(pu) {
		parts = append(parts, ck.Name+"="+ck.Value)
	}
	return strings.Join(parts, "; ")
}
