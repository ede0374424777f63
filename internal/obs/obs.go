// Package obs is the operational surface every role exposes: structured logs,
// /healthz (the process runs), /readyz (its dependencies answer) and /metrics
// (Prometheus, including franz-go's client metrics).
package obs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger builds the process logger. format is "text" or "json". Every
// string and error attribute passes through RedactURLSecrets, so a URL
// carrying a password (userinfo or a password-like query parameter) never
// reaches a log line, whichever code logged it.
func NewLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: redactAttr}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Check reports whether one dependency is usable. It must honour ctx: Run
// gives each check its own deadline.
type Check func(ctx context.Context) error

// DefaultCheckTimeout bounds a check added without its own timeout when
// Checks.Timeout is zero.
const DefaultCheckTimeout = 2 * time.Second

// Checks is the named set of readiness checks of one process: each role adds
// what it needs to do its job as it is built, so a process running several
// roles (dev) checks the union. Adding a name twice keeps the last check.
type Checks struct {
	// Timeout bounds each check added with Add; zero means
	// DefaultCheckTimeout.
	Timeout time.Duration

	mu     sync.Mutex
	checks map[string]timedCheck
}

type timedCheck struct {
	check   Check
	timeout time.Duration // 0: Checks.Timeout
}

// Add registers a readiness check bounded by c.Timeout.
func (c *Checks) Add(name string, check Check) { c.AddWithTimeout(name, 0, check) }

// AddWithTimeout registers a readiness check with its own timeout (zero
// means c.Timeout).
func (c *Checks) AddWithTimeout(name string, timeout time.Duration, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checks == nil {
		c.checks = map[string]timedCheck{}
	}
	c.checks[name] = timedCheck{check: check, timeout: timeout}
}

// Names are the registered checks, sorted.
func (c *Checks) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Check statuses in a Result.
const (
	StatusOK      = "ok"
	StatusFailing = "failing"
)

// Result is the outcome of one check.
type Result struct {
	Name string `json:"name"`
	// Status is StatusOK or StatusFailing; OK says the same as a bool.
	Status string `json:"status"`
	OK     bool   `json:"ok"`
	// Error says why a failing check failed, with any password in a URL
	// replaced (checks must not put secrets in their errors in the first
	// place; this is the second line).
	Error   string `json:"error,omitempty"`
	Took    string `json:"took"`
	Timeout string `json:"timeout"`
}

// Run runs every check concurrently, each bounded by its own timeout. A
// check that does not return by its deadline fails with a timeout error
// (Run does not wait for it).
func (c *Checks) Run(ctx context.Context) []Result {
	c.mu.Lock()
	def := c.Timeout
	if def <= 0 {
		def = DefaultCheckTimeout
	}
	names := make([]string, 0, len(c.checks))
	checks := make(map[string]timedCheck, len(c.checks))
	for n, ch := range c.checks {
		names = append(names, n)
		if ch.timeout <= 0 {
			ch.timeout = def
		}
		checks[n] = ch
	}
	c.mu.Unlock()
	sort.Strings(names)
	out := make([]Result, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			ch := checks[n]
			start := time.Now()
			err := runBounded(ctx, ch.check, ch.timeout)
			out[i] = Result{Name: n, Status: StatusOK, OK: err == nil,
				Took: time.Since(start).Round(time.Microsecond).String(), Timeout: ch.timeout.String()}
			if err != nil {
				out[i].Status = StatusFailing
				out[i].Error = RedactURLSecrets(err.Error())
			}
		})
	}
	wg.Wait()
	return out
}

// runBounded runs check under a deadline of timeout and returns by then even
// if the check ignores its context.
func runBounded(ctx context.Context, check Check, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("check panicked: %v", p)
			}
		}()
		done <- check(cctx)
	}()
	select {
	case err := <-done:
		if err != nil && cctx.Err() != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		return err
	case <-cctx.Done():
		select {
		case err := <-done: // it returned at its deadline too: keep its reason
			return err
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("no answer within %s", timeout)
	}
}

// urlPassword matches the password of a URL's userinfo (scheme://user:pass@).
var urlPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):[^/\s@]*@`)

// urlSecretParam matches a password-like query parameter of a URL
// (?password=…, &access_token=…, &X-Amz-Signature=…): its name is a known
// credential name or contains password, passwd, secret, token, signature or
// credential; its value runs to the next &, #, space or quote.
var urlSecretParam = regexp.MustCompile(`(?i)([?&](?:pwd|pass|key|apikey|api_key|api-key|auth|sig|code|[a-z0-9_.-]*(?:password|passwd|secret|token|signature|credential)[a-z0-9_.-]*)=)[^&#\s"'<>]*`)

// RedactURLPasswords replaces the passwords of URLs in s with "xxxxx", as
// url.URL.Redacted does.
func RedactURLPasswords(s string) string {
	return urlPassword.ReplaceAllString(s, "${1}:xxxxx@")
}

// RedactURLSecrets replaces, in URLs anywhere in s, the userinfo password and
// the values of password-like query parameters with "xxxxx".
func RedactURLSecrets(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(s, "=") {
		return s
	}
	s = RedactURLPasswords(s)
	if strings.Contains(s, "=") {
		s = urlSecretParam.ReplaceAllString(s, "${1}xxxxx")
	}
	return s
}

// RedactQuerySecrets replaces only the values of password-like query
// parameters in s (for text whose userinfo is already redacted).
func RedactQuerySecrets(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	return urlSecretParam.ReplaceAllString(s, "${1}xxxxx")
}

// redactAttr is the loggers' ReplaceAttr: strings and errors lose URL secrets.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); RedactURLSecrets(s) != s {
			a.Value = slog.StringValue(RedactURLSecrets(s))
		}
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			if s := v.Error(); RedactURLSecrets(s) != s {
				a.Value = slog.StringValue(RedactURLSecrets(s))
			}
		case *url.URL:
			if v != nil {
				a.Value = slog.StringValue(RedactURLSecrets(v.String()))
			}
		}
	}
	return a
}

// Handler serves /healthz (liveness: the process serves HTTP; it never looks
// at dependencies, so an orchestrator does not restart a process because
// Postgres is away), /readyz (every check of checks; 503 naming the failing
// ones) and /metrics.
func Handler(reg *prometheus.Registry, checks *Checks) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		results := checks.Run(r.Context())
		status, code := "ready", http.StatusOK
		var failing []string
		for _, res := range results {
			if !res.OK {
				status, code = "not ready", http.StatusServiceUnavailable
				failing = append(failing, res.Name)
			}
		}
		body := map[string]any{"status": status, "checks": results}
		if len(failing) > 0 {
			body["failing"] = failing
		}
		writeJSON(w, code, body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve listens on addr and serves h until ctx ends. The listener is opened
// before Serve returns its address, so callers can log where it listens.
func Serve(ctx context.Context, addr string, h http.Handler) (string, <-chan error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), errc, nil
}
