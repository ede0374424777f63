package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proliferate/proliferate/internal/testenv"
)

func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		in   string
		def  int
		want string // "" = error
	}{
		{"github.com:443", 0, "github.com:443"},
		{"GitHub.COM.:443", 0, "github.com:443"},
		{"github.com", 80, "github.com:80"},
		{"github.com", 0, ""},
		{"[::1]:22", 0, "[::1]:22"},
		{"[::ffff:127.0.0.1]:5432", 0, "127.0.0.1:5432"},
		{"::1", 80, ""},
		{"[fe80::1%eth0]:80", 0, ""},
		{"127.0.0.1:0", 0, ""},
		{"127.0.0.1:65536", 0, ""},
		{"127.0.0.1:+80", 0, ""},
		{"127.1:80", 0, ""},
		{"0x7f.0.0.1:80", 0, ""},
		{"2130706433:80", 0, ""},
		{"a..b:80", 0, ""},
		{"-a.com:80", 0, ""},
		{"user@github.com:443", 0, ""},
		{"github.com:", 0, ""},
		{"", 80, ""},
		{"exa mple.com:80", 0, ""},
	} {
		got, err := ParseTarget(c.in, c.def)
		if c.want == "" {
			if err == nil {
				t.Errorf("ParseTarget(%q) = %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("ParseTarget(%q) = %v, %v, want %s", c.in, got, err, c.want)
		}
	}
}

func TestPolicyDecisions(t *testing.T) {
	p, err := NewPolicy(t.Context(), ModeAllowlist, []string{"github.com", "*.npmjs.org", "localhost:5000", "10.0.0.5:8080", "internal.example"},
		[]string{"api.platform.example", "203.0.113.7"})
	if err != nil {
		t.Fatal(err)
	}
	p.ownAddrs = func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("192.0.2.2")} }
	for _, c := range []struct {
		target string
		reason string
		exact  bool
	}{
		{"github.com:443", "", false},
		{"github.com:22", "", false},
		{"api.github.com:443", ReasonNotAllowed, false},
		{"registry.npmjs.org:443", "", false},
		{"npmjs.org:443", ReasonNotAllowed, false},
		{"evilnpmjs.org:443", ReasonNotAllowed, false},
		{"localhost:5000", "", true},
		{"localhost:5001", ReasonNotAllowed, false},
		{"10.0.0.5:8080", "", true},
		{"api.platform.example:443", ReasonPlatform, false},
	} {
		tg, err := ParseTarget(c.target, 0)
		if err != nil {
			t.Fatal(err)
		}
		reason, exact := p.checkName(tg)
		if reason != c.reason || exact != c.exact {
			t.Errorf("%s: reason %q exact %v, want %q %v", c.target, reason, exact, c.reason, c.exact)
		}
	}
	for addr, want := range map[string]bool{ // internal?
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fd00::1": true, "fe80::1": true, "::ffff:10.0.0.1": true,
		"64:ff9b::a00:1": true, "2002:7f00:1::": true, "203.0.113.7": true, "192.0.2.2": true, "224.0.0.1": true,
		"140.82.112.3": false, "2606:4700::1111": false,
	} {
		if got := p.addrClass(netip.MustParseAddr(addr)) != ""; got != want {
			t.Errorf("addrClass(%s) internal = %v, want %v", addr, got, want)
		}
	}
	none, _ := NewPolicy(t.Context(), ModeNone, []string{"github.com:443"}, nil)
	if r, _ := none.checkName(Target{Host: "github.com", Port: 443}); r != ReasonDisabled {
		t.Errorf("none: %q", r)
	}
	open, _ := NewPolicy(t.Context(), ModeOpen, nil, nil)
	if r, _ := open.checkName(Target{Host: "anything.example", Port: 443}); r != "" {
		t.Errorf("open: %q", r)
	}
	for _, bad := range []string{"*.1.2.3.4", "*", "a b", "host:99999", "*.com:x"} {
		if _, err := ParseAllowlist([]string{bad}); err == nil {
			t.Errorf("entry %q accepted", bad)
		}
	}
	if _, err := ParseAllowlist(DefaultAllow); err != nil {
		t.Fatalf("default allowlist: %v", err)
	}
}

// world is a proxy on a loopback listener with an upstream server.
type world struct {
	proxy    *url.URL
	upstream *httptest.Server
	host     string // the upstream's 127.0.0.1:port
	logs     *testenv.LogBuffer
	reg      *prometheus.Registry
	srv      *Server
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

func newWorld(t *testing.T, mode string, allow func(upstream string) []string, opt func(*Options)) *world {
	t.Helper()
	w := &world{logs: &testenv.LogBuffer{}, reg: prometheus.NewRegistry()}
	release := make(chan struct{})
	w.upstream = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream": // one chunk, then wait for the client to have it
			_, _ = io.WriteString(rw, "first\n")
			rw.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(rw, "second\n")
		default:
			fmt.Fprintf(rw, "hello %s %s", r.Host, r.Header.Get("Proxy-Authorization"))
		}
	}))
	t.Cleanup(func() { close(release); w.upstream.Close() })
	w.host = w.upstream.Listener.Addr().String()
	p, err := NewPolicy(t.Context(), mode, allow(w.host), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(w.reg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Policy: p, Metrics: m, SessionID: "sess-egress", Log: slog.New(slog.NewTextHandler(w.logs, nil)),
		Resolver: fakeResolver{"rebind.test": {netip.MustParseAddr("127.0.0.1")}}}
	if opt != nil {
		opt(&o)
	}
	w.srv, err = Serve(ln, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.srv.Close)
	w.proxy = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return w
}

func (w *world) client() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(w.proxy), DisableKeepAlives: true}}
}

func (w *world) refused(reason string) float64 {
	return refusedCount(w.reg, reason)
}

// refusedCount reads proliferate_sandbox_egress_refused_total{reason}.
func refusedCount(reg prometheus.Gatherer, reason string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "proliferate_sandbox_egress_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// connect opens a CONNECT tunnel through the proxy; it returns the status
// and, on 200, the tunnel.
func (w *world) connect(t *testing.T, authority string) (int, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", w.proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil, nil
	}
	return resp.StatusCode, c, br
}

func TestProxyAllowsListedAndRefusesTheRest(t *testing.T) {
	w := newWorld(t, ModeAllowlist, func(up string) []string { return []string{up, "localhost", "rebind.test"} }, nil)

	// Plain HTTP, absolute form, streamed.
	resp, err := w.client().Get("http://" + w.host + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk %q %v", line, err)
	}
	resp.Body.Close()
	// The proxy does not pass the client's proxy credentials on.
	req, _ := http.NewRequest("GET", "http://"+w.host+"/", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err = w.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "hello "+w.host {
		t.Fatalf("plain http: %d %q", resp.StatusCode, body)
	}

	// CONNECT, with bytes sent before the 200 arrives.
	c, err := net.Dial("tcp", w.proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.1\r\nHost: tunnel\r\nConnection: close\r\n\r\n", w.host, w.host)
	cbr := bufio.NewReader(c)
	cr, err := http.ReadResponse(cbr, &http.Request{Method: http.MethodConnect})
	if err != nil || cr.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", cr, err)
	}
	tr, err := http.ReadResponse(cbr, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(tr.Body)
	if string(body) != "hello tunnel " {
		t.Fatalf("through the tunnel: %q", body)
	}

	// Refusals: not listed, a listed name resolving to loopback without
	// an exact host:port entry (localhost, and a name whose DNS answer
	// is internal), not a proxy request.
	port := w.upstream.Listener.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		authority, reason string
		status            int
	}{
		{"127.0.0.1:" + strconv.Itoa(port+1), ReasonNotAllowed, 403},
		{"example.com:443", ReasonNotAllowed, 403},
		{"localhost:" + strconv.Itoa(port), ReasonInternal, 403},
		{"rebind.test:" + strconv.Itoa(port), ReasonInternal, 403},
		{"[::ffff:127.0.0.1]:" + strconv.Itoa(port+1), ReasonNotAllowed, 403},
		{"127.1:" + strconv.Itoa(port), ReasonBadRequest, 400},
	} {
		before := w.refused(c.reason)
		if status, _, _ := w.connect(t, c.authority); status != c.status {
			t.Errorf("CONNECT %s: %d, want %d", c.authority, status, c.status)
		}
		if got := w.refused(c.reason); got != before+1 {
			t.Errorf("CONNECT %s: refused{%s} %v → %v", c.authority, c.reason, before, got)
		}
		if !strings.Contains(w.logs.String(), "reason="+c.reason) {
			t.Errorf("CONNECT %s: no refusal logged:\n%s", c.authority, w.logs)
		}
	}
	resp, err = w.client().Get("http://localhost:" + strconv.Itoa(port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("plain http to localhost: %d", resp.StatusCode)
	}
	resp, err = http.Get(w.proxy.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("origin-form request: %d", resp.StatusCode)
	}
	if !strings.Contains(w.logs.String(), "session_id=sess-egress") || !strings.Contains(w.logs.String(), "host=localhost:"+strconv.Itoa(port)) {
		t.Fatalf("refusals are logged with the session and host:\n%s", w.logs)
	}

	// Oversized headers.
	req, _ = http.NewRequest("GET", "http://"+w.host+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 2*DefaultMaxHeaderBytes))
	resp, err = w.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: %d", resp.StatusCode)
	}
}

func TestProxyModes(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		w := newWorld(t, ModeNone, func(up string) []string { return []string{up} }, nil)
		if status, _, _ := w.connect(t, w.host); status != 403 {
			t.Fatalf("none: CONNECT %d", status)
		}
		if w.refused(ReasonDisabled) != 1 {
			t.Fatalf("none: refusal not counted\n%s", w.logs)
		}
	})
	t.Run("open", func(t *testing.T) {
		// Open allows any public host, but never an internal address
		// without an exact entry.
		w := newWorld(t, ModeOpen, func(string) []string { return nil }, nil)
		if status, _, _ := w.connect(t, w.host); status != 403 {
			t.Fatalf("open: CONNECT to loopback %d", status)
		}
		if w.refused(ReasonInternal) != 1 {
			t.Fatalf("open: refusal not counted\n%s", w.logs)
		}
		w2 := newWorld(t, ModeOpen, func(up string) []string { return []string{up} }, nil)
		if status, _, _ := w2.connect(t, w2.host); status != 200 {
			t.Fatalf("open with an exact entry: CONNECT %d", status)
		}
	})
}

func TestProxyClosesIdleTunnels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // echo, never closes first
		}
	}()
	up := ln.Addr().String()
	w := newWorld(t, ModeAllowlist, func(string) []string { return []string{up} }, func(o *Options) { o.IdleTimeout = 100 * time.Millisecond })
	status, c, br := w.connect(t, up)
	if status != 200 {
		t.Fatalf("CONNECT %d", status)
	}
	fmt.Fprint(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q %v", line, err)
	}
	// Nothing more is sent: the proxy ends the tunnel.
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("an idle tunnel stayed open")
	}
}

func TestProxyConnectionLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	up := ln.Addr().String()
	w := newWorld(t, ModeAllowlist, func(string) []string { return []string{up} }, func(o *Options) { o.MaxConns = 2 })
	for range 2 {
		if status, _, _ := w.connect(t, up); status != 200 {
			t.Fatalf("CONNECT %d", status)
		}
	}
	if status, _, _ := w.connect(t, up); status != 503 {
		t.Fatalf("third CONNECT %d, want 503", status)
	}
}

// FuzzRequestTarget: whatever request a sandbox sends, parsing never
// panics, and an accepted target is canonical: it parses back to itself,
// its port is valid and an allowlist entry naming it exactly matches it.
func FuzzRequestTarget(f *testing.F) {
	for _, s := range []string{
		"CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443\r\n\r\n",
		"CONNECT [::1]:22 HTTP/1.1\r\nHost: [::1]:22\r\n\r\n",
		"CONNECT [::ffff:127.0.0.1]:5432 HTTP/1.1\r\n\r\n",
		"GET http://deb.debian.org/debian/dists HTTP/1.1\r\nHost: deb.debian.org\r\n\r\n",
		"GET http://user:pw@example.com:8080/ HTTP/1.1\r\n\r\n",
		"GET https://example.com/ HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"CONNECT 127.1:80 HTTP/1.1\r\n\r\n",
		"CONNECT EXAMPLE.com.:443 HTTP/1.1\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		tg, err := RequestTarget(r)
		if err != nil {
			return
		}
		checkCanonical(t, tg)
	})
}

// FuzzAllowEntry: an entry that parses and names a host and port matches
// exactly that target.
func FuzzAllowEntry(f *testing.F) {
	for _, s := range append([]string{"localhost:5000", "[::1]:80", "::1", "*.github.com:443", "10.0.0.1:8080"}, DefaultAllow...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllowlist([]string{s})
		if err != nil {
			return
		}
		e := a.entries[0]
		if e.wildcard {
			tg := Target{Host: "x." + e.host, Port: max(e.port, 1)}
			if listed, exact := a.match(tg); !listed || exact {
				t.Fatalf("%q: %v listed=%v exact=%v", s, tg, listed, exact)
			}
			return
		}
		tg, err := ParseTarget(net.JoinHostPort(e.host, strconv.Itoa(max(e.port, 1))), 0)
		if err != nil {
			t.Fatalf("%q: entry host %q does not parse as a target: %v", s, e.host, err)
		}
		checkCanonical(t, tg)
		if listed, exact := a.match(tg); !listed || exact != (e.port != 0) {
			t.Fatalf("%q: %v listed=%v exact=%v", s, tg, listed, exact)
		}
	})
}

func checkCanonical(t *testing.T, tg Target) {
	t.Helper()
	if tg.Port < 1 || tg.Port > 65535 || tg.Host == "" {
		t.Fatalf("target %+v", tg)
	}
	if tg.IP.IsValid() {
		if tg.IP.Is4In6() || tg.IP.Zone() != "" || tg.Host != tg.IP.String() {
			t.Fatalf("address target %+v", tg)
		}
	} else if tg.Host != strings.ToLower(tg.Host) || strings.HasSuffix(tg.Host, ".") || strings.ContainsAny(tg.Host, ":@/[] %") {
		t.Fatalf("host target %+v", tg)
	}
	again, err := ParseTarget(tg.String(), 0)
	if err != nil || again != tg {
		t.Fatalf("%+v → %q → %+v, %v", tg, tg.String(), again, err)
	}
}
