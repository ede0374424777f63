// Package obs is the operational surface every role exposes: structured logs,
// /healthz (the process runs), /readyz (its dependencies answer) and /metrics
// (Prometheus, including franz-go's client metrics).
package obs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger builds the process logger. format is "text" or "json".
func NewLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
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

// Check reports whether one dependency is usable.
type Check func(ctx context.Context) error

// Checks is a named set of readiness checks; roles add theirs as they start.
type Checks struct {
	mu     sync.Mutex
	checks map[string]Check
}

// Add registers a readiness check.
func (c *Checks) Add(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checks == nil {
		c.checks = map[string]Check{}
	}
	c.checks[name] = check
}

// Result is the outcome of one check.
type Result struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Took  string `json:"took"`
}

// Run runs every check concurrently, each bounded by timeout.
func (c *Checks) Run(ctx context.Context, timeout time.Duration) []Result {
	c.mu.Lock()
	names := make([]string, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	checks := make(map[string]Check, len(c.checks))
	for n, ch := range c.checks {
		checks[n] = ch
	}
	c.mu.Unlock()
	sort.Strings(names)
	out := make([]Result, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			err := checks[n](cctx)
			out[i] = Result{Name: n, OK: err == nil, Took: time.Since(start).Round(time.Microsecond).String()}
			if err != nil {
				out[i].Error = err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

// Handler serves /healthz, /readyz and /metrics.
func Handler(reg *prometheus.Registry, checks *Checks) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		results := checks.Run(r.Context(), 2*time.Second)
		status, code := "ready", http.StatusOK
		for _, res := range results {
			if !res.OK {
				status, code = "not ready", http.StatusServiceUnavailable
			}
		}
		writeJSON(w, code, map[string]any{"status": status, "checks": results})
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
