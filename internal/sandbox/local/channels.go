package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox/egress"
)

// A sandbox's network namespace holds only lo. Its three channels to the
// platform are Unix sockets in its runtime dir (a directory of the host,
// outside the workspace, bound at /run/proliferate in this sandbox only):
//
//   - agent.sock (in agent/, the only part the sandbox may write): socat
//     inside forwards it to the agent's port; on the host a 127.0.0.1 TCP
//     listener forwards to it, so Sandbox.AgentURL stays an http URL for
//     the gateway. The host opens the socket without following links and
//     checks it is a socket: the sandbox cannot point the host elsewhere.
//   - gateway.sock: socat inside listens on 127.0.0.1:4100 (the agent's
//     PROLIFERATE_GATEWAY_URL) and forwards here; on the host a reverse
//     proxy passes only requests under /proliferate/{this session}/ to the
//     gateway, everything else gets 403 (logged with the session id).
//   - llm.sock: the same on 127.0.0.1:4101 (the agent's LLM base URL) for
//     the LLM endpoint's API paths only (messages, chat completions,
//     responses, models); the host side speaks https when the endpoint
//     does.
//   - egress.sock: the sandbox's HTTP(S) proxy to the internet, on
//     127.0.0.1:4102 inside, under the provider's egress policy (egress.go).

// channels are one running sandbox's host ends.
type channels struct {
	dir     string       // the host runtime dir
	agent   net.Listener // 127.0.0.1:0 → agent.sock
	servers []*http.Server
	egress  *egress.Server // the egress proxy (egress.go)
	log     *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// insideURLs are the endpoints the sandbox's processes use.
type insideURLs struct {
	gateway string // "" when the spec has no gateway
	llm     string
}

// openChannels creates the runtime dir under root and the host ends of a
// sandbox's channels.
func openChannels(root, sessionID, gatewayURL, llmBaseURL string, eg *egressConf, log *slog.Logger) (*channels, insideURLs, error) {
	var in insideURLs
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, in, fmt.Errorf("local sandbox: runtime dir: %w", err)
	}
	dir, err := os.MkdirTemp(root, "")
	if err != nil {
		return nil, in, fmt.Errorf("local sandbox: runtime dir: %w", err)
	}
	c := &channels{dir: dir, log: log, conns: map[net.Conn]struct{}{}}
	fail := func(err error) (*channels, insideURLs, error) {
		c.close()
		return nil, in, err
	}
	if err := os.Mkdir(filepath.Join(dir, "agent"), 0o700); err != nil {
		return fail(fmt.Errorf("local sandbox: runtime dir: %w", err))
	}
	if c.agent, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return fail(fmt.Errorf("local sandbox: agent forwarder: %w", err))
	}
	c.wg.Go(c.forwardAgent)

	llm, err := url.Parse(llmBaseURL)
	if err != nil || (llm.Scheme != "http" && llm.Scheme != "https") || llm.Host == "" {
		return fail(fmt.Errorf("local sandbox: LLM base URL %q is not an http(s) URL", llmBaseURL))
	}
	llmBase := strings.TrimRight(llm.Path, "/")
	allowed := map[string]bool{}
	for _, p := range []string{"/messages", "/messages/count_tokens", "/chat/completions", "/completions", "/responses", "/models"} {
		allowed[llmBase+p] = true
	}
	if err := c.serve("llm.sock", llm, func(r *http.Request) bool { return allowed[r.URL.Path] }, sessionID); err != nil {
		return fail(err)
	}
	in.llm = "http://127.0.0.1:" + strconv.Itoa(jailLLMPort) + llmBase

	if gatewayURL != "" {
		gw, err := url.Parse(gatewayURL)
		if err != nil || (gw.Scheme != "http" && gw.Scheme != "https") || gw.Host == "" {
			return fail(fmt.Errorf("local sandbox: gateway URL %q is not an http(s) URL", gatewayURL))
		}
		gwBase := strings.TrimRight(gw.Path, "/")
		own := gwBase + "/proliferate/" + sessionID
		if err := c.serve("gateway.sock", gw, func(r *http.Request) bool {
			return r.URL.Path == own || strings.HasPrefix(r.URL.Path, own+"/")
		}, sessionID); err != nil {
			return fail(err)
		}
		in.gateway = "http://127.0.0.1:" + strconv.Itoa(jailGatewayPort) + gwBase
	}
	if err := c.serveEgress(eg, sessionID); err != nil {
		return fail(err)
	}
	return c, in, nil
}

// agentURL is where the host reaches the agent.
func (c *channels) agentURL() string { return "http://" + c.agent.Addr().String() }

// serve listens on the runtime dir's socket name and proxies the requests
// allow accepts to target's scheme and host (the path stays the request's).
func (c *channels) serve(name string, target *url.URL, allow func(*http.Request) bool, sessionID string) error {
	ln, err := net.Listen("unix", filepath.Join(c.dir, name))
	if err != nil {
		return fmt.Errorf("local sandbox: listen on %s: %w", name, err)
	}
	channel := strings.TrimSuffix(name, ".sock")
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.Host = ""
		},
		FlushInterval: -1, // streamed model answers and SSE pass through at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, context.Canceled) {
				c.log.Warn("sandbox channel: upstream failed", "channel", channel, "session_id", sessionID,
					"method", r.Method, "path", r.URL.Path, "error", err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !canonicalPath(r.URL) || !allow(r) {
				c.log.Warn("sandbox channel: request refused", "channel", channel, "session_id", sessionID,
					"method", r.Method, "path", r.URL.Path)
				// Read what the client sent first: closing with unread bytes
				// makes the kernel (and the sandbox's socat) reset the
				// connection, and the client could lose the 403.
				_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
				http.Error(w, "forbidden: a sandbox may only reach its own session's gateway routes and the LLM API", http.StatusForbidden)
				return
			}
			proxy.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
	}
	c.mu.Lock()
	c.servers = append(c.servers, srv)
	c.mu.Unlock()
	c.wg.Go(func() { _ = srv.Serve(ln) })
	return nil
}

// canonicalPath refuses paths with dot segments, doubled slashes or
// escaped slashes, backslashes and dots, so the prefix checks see what the
// upstream router will.
func canonicalPath(u *url.URL) bool {
	p := u.Path
	if p == "" || p[0] != '/' {
		return false
	}
	if c := path.Clean(p); c != p && c+"/" != p {
		return false
	}
	raw := strings.ToLower(u.RawPath)
	return !strings.Contains(raw, "%2f") && !strings.Contains(raw, "%5c") && !strings.Contains(raw, "%2e")
}

// forwardAgent accepts host connections and splices each to agent.sock.
func (c *channels) forwardAgent() {
	sock := filepath.Join(c.dir, "agent", "agent.sock")
	for {
		conn, err := c.agent.Accept()
		if err != nil {
			return
		}
		if !c.track(conn) {
			conn.Close()
			return
		}
		c.wg.Go(func() {
			defer c.untrack(conn)
			up, err := dialSocket(sock)
			if err != nil {
				conn.Close() // the agent is not listening (yet): the caller retries
				return
			}
			if !c.track(up) {
				up.Close()
				conn.Close()
				return
			}
			defer c.untrack(up)
			splice(conn, up)
		})
	}
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

func (c *channels) track(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.conns[conn] = struct{}{}
	return true
}

func (c *channels) untrack(conn net.Conn) {
	conn.Close()
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
}

// close stops the listeners, the proxies and the forwarded connections,
// and removes the runtime dir.
func (c *channels) close() {
	c.mu.Lock()
	c.done = true
	servers, egressSrv := c.servers, c.egress
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	if c.agent != nil {
		c.agent.Close()
	}
	for _, s := range servers {
		_ = s.Close()
	}
	if egressSrv != nil {
		egressSrv.Close()
	}
	c.wg.Wait()
	if err := os.RemoveAll(c.dir); err != nil {
		c.log.Warn("could not remove a sandbox runtime dir", "dir", c.dir, "error", err)
	}
}
