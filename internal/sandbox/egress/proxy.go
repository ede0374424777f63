package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultMaxConns       = 256
	DefaultMaxHeaderBytes = 32 << 10
	dialTimeout           = 30 * time.Second
	resolveTimeout        = 10 * time.Second
)

// Metrics are the proxy's counters, shared by every sandbox of a
// provider.
type Metrics struct {
	refused   *prometheus.CounterVec
	connected *prometheus.CounterVec
}

// NewMetrics creates the counters and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proliferate_sandbox_egress_refused_total",
			Help: "Connections from sandboxes to the internet refused by the egress policy, by reason.",
		}, []string{"reason"}),
		connected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proliferate_sandbox_egress_connections_total",
			Help: "Connections from sandboxes to the internet the egress proxy made, by kind (connect: a CONNECT tunnel; http: a plain HTTP request's connection).",
		}, []string{"kind"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.refused, m.connected} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("egress: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Options configures one sandbox's proxy.
type Options struct {
	Policy    *Policy
	Metrics   *Metrics // nil: unregistered counters
	SessionID string
	Log       *slog.Logger
	// Resolver resolves names; nil: net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	// IdleTimeout closes a tunnel or upstream connection without traffic
	// either way for this long; 0: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConns bounds the sandbox's concurrent tunnels and requests; 0:
	// DefaultMaxConns.
	MaxConns int
}

// Server is one sandbox's egress proxy.
type Server struct {
	o      Options
	srv    *http.Server
	rp     *httputil.ReverseProxy
	tr     *http.Transport
	active atomic.Int64

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// refusal is a dial the policy refused.
type refusal struct{ reason, detail string }

func (r *refusal) Error() string { return "egress refused: " + r.reason + ": " + r.detail }

// Serve starts serving the proxy on ln; Close stops it.
func Serve(ln net.Listener, o Options) (*Server, error) {
	if o.Policy == nil {
		return nil, errors.New("egress: no policy")
	}
	if o.Metrics == nil {
		o.Metrics, _ = NewMetrics(nil)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	s := &Server{o: o, tunnels: map[net.Conn]struct{}{}}
	s.tr = &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			t, err := ParseTarget(addr, 0)
			if err != nil {
				return nil, &refusal{ReasonBadRequest, err.Error()}
			}
			c, err := s.dial(ctx, t)
			if err != nil {
				return nil, err
			}
			s.o.Metrics.connected.WithLabelValues("http").Inc()
			return newIdleConn(c, s.o.IdleTimeout), nil
		},
		DisableCompression:     true, // pass the upstream's encoding through
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: DefaultMaxHeaderBytes * 2,
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = "" // the URL's host: the one the policy checked
		},
		Transport:     s.tr,
		FlushInterval: -1, // stream: never buffer a response
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ref *refusal
			if errors.As(err, &ref) {
				s.refuse(w, r.URL.Host, ref.reason, ref.detail, false)
				return
			}
			if !errors.Is(err, context.Canceled) {
				s.o.Log.Info("sandbox egress: upstream failed", "session_id", s.o.SessionID, "host", r.URL.Host, "error", err)
			}
			http.Error(w, "egress proxy: upstream failed", http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	s.wg.Go(func() { _ = s.srv.Serve(ln) })
	return s, nil
}

// Close stops the listener, open requests and tunnels.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.tunnels {
		c.Close()
	}
	s.mu.Unlock()
	_ = s.srv.Close()
	s.tr.CloseIdleConnections()
	s.wg.Wait()
}

// RequestTarget is where a proxy request goes: the authority of a CONNECT
// (a port is required) or the host of an absolute-form http:// URL (port
// 80 by default). Other requests are not proxy requests.
func RequestTarget(r *http.Request) (Target, error) {
	if r.Method == http.MethodConnect {
		if r.URL == nil || r.URL.Path != "" || r.URL.RawQuery != "" || r.URL.Scheme != "" {
			return Target{}, errors.New("egress: CONNECT needs an authority (host:port)")
		}
		return ParseTarget(r.Host, 0)
	}
	if r.URL == nil || !r.URL.IsAbs() || r.URL.Host == "" {
		return Target{}, errors.New("egress: not a proxy request (want CONNECT host:port or an absolute http:// URL)")
	}
	if r.URL.Scheme != "http" {
		return Target{}, fmt.Errorf("egress: scheme %q: use CONNECT for anything but plain http", r.URL.Scheme)
	}
	if r.URL.User != nil {
		return Target{}, errors.New("egress: credentials in the URL's authority are not allowed")
	}
	return ParseTarget(r.URL.Host, 80)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, err := RequestTarget(r)
	if err != nil {
		s.refuse(w, r.Host, ReasonBadRequest, err.Error(), r.Method == http.MethodConnect)
		drain(r)
		return
	}
	if reason, _ := s.o.Policy.checkName(t); reason != "" {
		s.refuse(w, t.String(), reason, "", r.Method == http.MethodConnect)
		drain(r)
		return
	}
	if n := s.active.Add(1); n > int64(s.o.MaxConns) {
		s.active.Add(-1)
		s.refuse(w, t.String(), ReasonTooManyConns, strconv.Itoa(s.o.MaxConns)+" open", r.Method == http.MethodConnect)
		drain(r)
		return
	}
	defer s.active.Add(-1)
	if r.Method == http.MethodConnect {
		s.connect(w, r, t)
		return
	}
	r.Header.Del("Proxy-Authorization")
	s.rp.ServeHTTP(w, r)
}

// drain reads (a bounded part of) a refused request's body so the answer
// is not lost to a reset.
func drain(r *http.Request) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	}
}

// refuse answers 403 (400 for a bad request, 503 at the connection limit),
// logs the refusal with the session id and counts it.
func (s *Server) refuse(w http.ResponseWriter, host, reason, detail string, connect bool) {
	s.o.Metrics.refused.WithLabelValues(reason).Inc()
	attrs := []any{"session_id", s.o.SessionID, "host", host, "reason", reason, "mode", s.o.Policy.mode}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	s.o.Log.Warn("sandbox egress refused", attrs...)
	status := http.StatusForbidden
	switch reason {
	case ReasonBadRequest:
		status = http.StatusBadRequest
	case ReasonTooManyConns:
		status = http.StatusServiceUnavailable
	case ReasonResolveFailure:
		status = http.StatusBadGateway
	}
	if connect {
		w.Header().Set("Connection", "close")
	}
	msg := "egress proxy: " + reason + ": " + host
	if detail != "" {
		msg += " (" + detail + ")"
	}
	http.Error(w, msg+"; see the sandbox egress policy (SANDBOX_EGRESS, SANDBOX_EGRESS_ALLOW)", status)
}

// dial resolves t once, checks every address and dials the first allowed
// one that answers.
func (s *Server) dial(ctx context.Context, t Target) (net.Conn, error) {
	reason, exact := s.o.Policy.checkName(t)
	if reason != "" {
		return nil, refused(reason, "")
	}
	addrs := []netip.Addr{t.IP}
	if !t.IP.IsValid() {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		var err error
		addrs, err = s.o.Resolver.LookupNetIP(rctx, "ip", t.Host)
		cancel()
		if err != nil || len(addrs) == 0 {
			detail := "no address"
			if err != nil {
				detail = err.Error()
			}
			return nil, refused(ReasonResolveFailure, detail)
		}
	}
	var allowed []netip.Addr
	var blocked string
	for _, a := range addrs {
		a = a.Unmap()
		if !exact {
			if class := s.o.Policy.addrClass(a); class != "" {
				if blocked == "" {
					blocked = "resolves to " + a.String() + ", a " + class
				}
				continue
			}
		}
		allowed = append(allowed, a)
	}
	if len(allowed) == 0 {
		return nil, refused(ReasonInternal, blocked+"; only an allowlist entry naming "+t.String()+" exactly permits it")
	}
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	var errs []error
	for _, a := range allowed {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.Port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// refused is a refusal found while dialing; the caller answers it (and
// logs and counts it).
func refused(reason, detail string) error { return &refusal{reason: reason, detail: detail} }

// connect dials t and splices the client's connection to it.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, t Target) {
	up, err := s.dial(r.Context(), t)
	if err != nil {
		var ref *refusal
		if errors.As(err, &ref) {
			s.refuse(w, t.String(), ref.reason, ref.detail, true)
			return
		}
		s.o.Log.Info("sandbox egress: connect failed", "session_id", s.o.SessionID, "host", t.String(), "error", err)
		w.Header().Set("Connection", "close")
		http.Error(w, "egress proxy: cannot connect to "+t.String(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress proxy: CONNECT is not supported here", http.StatusInternalServerError)
		return
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_ = client.SetDeadline(time.Time{}) // the header timeout's deadline must not end the tunnel
	if !s.track(client) {
		client.Close()
		up.Close()
		return
	}
	defer s.untrack(client)
	if !s.track(up) {
		up.Close()
		return
	}
	defer s.untrack(up)
	s.o.Metrics.connected.WithLabelValues("connect").Inc()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	tunnel(client, brw.Reader, up, s.o.IdleTimeout)
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.tunnels[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.tunnels, c)
	s.mu.Unlock()
}

// tunnel copies both ways (the client's bytes already buffered by the
// server first) until both directions end, an error, or no byte moved
// either way for idle.
func tunnel(client net.Conn, buffered *bufio.Reader, up net.Conn, idle time.Duration) {
	w := newIdleWatch(idle, func() { client.Close(); up.Close() })
	defer w.stop()
	done := make(chan struct{}, 2)
	cp := func(dst net.Conn, src io.Reader) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				w.touch()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	// buffered holds what the client sent after the CONNECT line before
	// the tunnel existed; it reads on from client when empty.
	go cp(up, buffered)
	go cp(client, up)
	<-done
	<-done
}

// idleWatch calls onIdle once no touch happened for timeout.
type idleWatch struct {
	last    atomic.Int64
	timeout time.Duration
	timer   *time.Timer
	onIdle  func()
}

func newIdleWatch(timeout time.Duration, onIdle func()) *idleWatch {
	w := &idleWatch{timeout: timeout, onIdle: onIdle}
	w.touch()
	w.timer = time.AfterFunc(timeout, w.fire)
	return w
}

func (w *idleWatch) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *idleWatch) fire() {
	quiet := time.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.timeout {
		w.onIdle()
		return
	}
	w.timer.Reset(w.timeout - quiet)
}

func (w *idleWatch) stop() { w.timer.Stop() }

// idleConn is an upstream connection of a plain HTTP request, closed after
// idle without traffic.
type idleConn struct {
	net.Conn
	w *idleWatch
}

func newIdleConn(c net.Conn, idle time.Duration) net.Conn {
	ic := &idleConn{Conn: c}
	ic.w = newIdleWatch(idle, func() { c.Close() })
	return ic
}

func (c *idleConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.w.touch()
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.w.touch()
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.w.stop()
	return c.Conn.Close()
}
