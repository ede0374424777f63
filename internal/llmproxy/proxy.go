// Package llmproxy is the built-in LLM proxy (role `proliferate llm-proxy`):
// an Anthropic-compatible reverse proxy that sandboxes reach with a
// per-session virtual key, and the issuer of those keys (llmkeys.Issuer).
//
// Design:
//
//   - Keys (table llm_virtual_keys) are "sk-prlf-" + 32 random bytes; only
//     their SHA-256 is stored. Team = organization, user and alias =
//     session, lifetime 24 h, budget = the organization's balance in model
//     dollars at issue. Revoking updates the rows, then
//     publishes the hashes on Redis channel "llmproxy:revoked"; every
//     replica evicts them from its in-memory key cache at once. The
//     cache (TTL 30 s, bounded) keeps Postgres off the request path.
//   - The proxy authenticates x-api-key or a Bearer token, refuses unknown,
//     expired or revoked keys with 401 and over-budget keys with 402
//     billing_error (Anthropic's status for billing problems; SDKs do not
//     retry it, as they would a 429), and forwards the request with the
//     real upstream key: the client's key never leaves the proxy.
//   - Responses stream through unbuffered: each chunk read from upstream is
//     written and flushed to the client, then fed to an incremental SSE
//     parser (message_start, message_delta usage). Bytes are never
//     rewritten (compression is disabled on the upstream transport).
//   - After the response (also when the client left mid-stream: what was
//     seen is billed), one transaction adds the cost to the key's
//     spend_micros and an llm.spend event to the outbox, off the latency
//     path, retried in the background if Postgres is briefly down.
//   - Costs are exact integer micro-dollars from a price table; an unknown
//     model is priced as the most expensive known one and logged.
package llmproxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/schemas"
)

// Defaults of Deps.
const (
	DefaultCacheTTL     = 30 * time.Second
	DefaultCacheSize    = 100_000
	DefaultMaxBodyBytes = 32 << 20
	// maxJSONBody bounds the non-streamed response kept to read its usage.
	maxJSONBody = 16 << 20
)

// Deps configures a Proxy.
type Deps struct {
	Pool *pgxpool.Pool
	// Redis carries revocations (RevokedChannel); nil: revoked keys are
	// refused once their cache entry expires.
	Redis *redis.Client
	Codec *schemas.Codec
	// UpstreamURL is the Anthropic API base, ending in /v1
	// (https://api.anthropic.com/v1, or an llm-sim URL).
	UpstreamURL string
	// UpstreamKey is the real model key, sent upstream as x-api-key.
	UpstreamKey string
	// Transport overrides the tuned upstream transport (tests).
	Transport    http.RoundTripper
	CacheTTL     time.Duration
	CacheSize    int
	MaxBodyBytes int64
	Logger       *slog.Logger
	// Registerer receives the proxy's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Proxy is the LLM proxy's HTTP handler.
type Proxy struct {
	d        Deps
	upstream *url.URL
	rt       http.RoundTripper
	cache    *keyCache
	mux      *http.ServeMux
	bufs     sync.Pool
	spends   sync.WaitGroup // in-flight spend recordings
	// unstored is the spend of this replica's finished requests not yet
	// committed, by key hash: a key loaded meanwhile counts it too.
	unstoredMu sync.Mutex
	unstored   map[[32]byte]int64
	metrics    metrics
}

type metrics struct {
	requests      *prometheus.CounterVec
	upstream      prometheus.Histogram
	spendFailures prometheus.Counter
}

// New returns the proxy; call Run for revocation broadcasts.
func New(d Deps) (*Proxy, error) {
	if d.Pool == nil || d.Codec == nil {
		return nil, errors.New("llmproxy: the proxy needs a Postgres pool and the codec")
	}
	u, err := url.Parse(strings.TrimRight(d.UpstreamURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llmproxy: upstream URL %q is not an http(s) URL", d.UpstreamURL)
	}
	if d.CacheTTL <= 0 {
		d.CacheTTL = DefaultCacheTTL
	}
	if d.CacheSize <= 0 {
		d.CacheSize = DefaultCacheSize
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	p := &Proxy{d: d, upstream: u, rt: d.Transport, cache: newKeyCache(d.CacheTTL, d.CacheSize),
		unstored: map[[32]byte]int64{}}
	if p.rt == nil {
		p.rt = NewTransport()
	}
	p.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	p.metrics = metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proliferate_llm_proxy_requests_total", Help: "LLM proxy requests by route and status.",
		}, []string{"route", "status"}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "proliferate_llm_proxy_upstream_seconds",
			Help:    "Time from forwarding a request to the upstream's response headers.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}),
		spendFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proliferate_llm_proxy_spend_failures_total", Help: "LLM spend records that could not be stored after retries.",
		}),
	}
	if d.Registerer != nil {
		for _, c := range []prometheus.Collector{p.metrics.requests, p.metrics.upstream, p.metrics.spendFailures} {
			if err := d.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("llmproxy: register metrics: %w", err)
			}
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		p.forward(w, r, "messages", "/messages", true)
	})
	mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) {
		p.forward(w, r, "count_tokens", "/messages/count_tokens", false)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p.fail(w, "other", http.StatusNotFound, "not_found_error", "no route for "+r.Method+" "+r.URL.Path)
	})
	p.mux = mux
	return p, nil
}

// NewTransport is the upstream transport: long-lived keep-alive connections
// and no transparent compression, so bytes pass through as sent.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// Run evicts revoked keys as their broadcasts arrive until ctx ends, then
// waits for in-flight spend recordings.
func (p *Proxy) Run(ctx context.Context) error {
	defer p.spends.Wait()
	if p.d.Redis == nil {
		<-ctx.Done()
		return nil
	}
	ps := p.d.Redis.Subscribe(ctx, RevokedChannel)
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return errors.New("llmproxy: revocation subscription closed")
			}
			switch m := m.(type) {
			case *redis.Subscription:
				// (Re)subscribed: broadcasts may have been missed meanwhile.
				if m.Kind == "subscribe" {
					p.cache.flush()
				}
			case *redis.Message:
				var hs [][32]byte
				for f := range strings.FieldsSeq(m.Payload) {
					var h [32]byte
					if b, err := hex.DecodeString(f); err == nil && len(b) == len(h) {
						copy(h[:], b)
						hs = append(hs, h)
					}
				}
				p.cache.evict(hs...)
			}
		}
	}
}

func (p *Proxy) addUnstored(h [32]byte, delta int64) {
	p.unstoredMu.Lock()
	defer p.unstoredMu.Unlock()
	if n := p.unstored[h] + delta; n != 0 {
		p.unstored[h] = n
	} else {
		delete(p.unstored, h)
	}
}

func (p *Proxy) unstoredSpend(h [32]byte) int64 {
	p.unstoredMu.Lock()
	defer p.unstoredMu.Unlock()
	return p.unstored[h]
}

// Wait blocks until the spend of every finished request is stored (or
// given up on).
func (p *Proxy) Wait() { p.spends.Wait() }

// fail writes an Anthropic-shaped error.
func (p *Proxy) fail(w http.ResponseWriter, route string, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	p.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

// clientKey is the key the client presented.
func clientKey(r *http.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// dropRequestHeaders never go upstream: hop-by-hop headers, the client's
// credentials, and Accept-Encoding (the usage parser reads plain bytes).
var dropRequestHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authorization": true,
	"Proxy-Authenticate": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true, "Accept-Encoding": true,
	"Authorization": true, "X-Api-Key": true, "Cookie": true,
}

var dropResponseHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, route, upstreamPath string, metered bool) {
	started := p.d.Now()
	key := clientKey(r)
	if key == "" {
		p.fail(w, route, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return
	}
	h := HashKey(key)
	info, err := p.lookup(r.Context(), h)
	if err != nil {
		p.d.Logger.Error("llm-proxy: key lookup failed", "err", err)
		p.fail(w, route, http.StatusServiceUnavailable, "api_error", "the proxy cannot verify keys right now")
		return
	}
	switch {
	case !info.found:
		p.fail(w, route, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	case info.revoked:
		p.fail(w, route, http.StatusUnauthorized, "authentication_error", "this key has been revoked")
		return
	case !started.Before(info.expiresAt):
		p.fail(w, route, http.StatusUnauthorized, "authentication_error", "this key has expired")
		return
	case info.limited && info.spend.Load() >= info.budget:
		p.fail(w, route, http.StatusPaymentRequired, "billing_error",
			"this session's LLM budget is used up; add credits to the organization to continue")
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.d.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			p.fail(w, route, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("request body exceeds %d bytes", p.d.MaxBodyBytes))
			return
		}
		p.fail(w, route, http.StatusBadRequest, "invalid_request_error", "could not read the request body")
		return
	}
	target := *p.upstream
	target.Path += upstreamPath
	target.RawQuery = r.URL.RawQuery
	up, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		p.fail(w, route, http.StatusInternalServerError, "api_error", "could not build the upstream request")
		return
	}
	for k, vs := range r.Header {
		if !dropRequestHeaders[k] {
			up.Header[k] = vs
		}
	}
	if p.d.UpstreamKey != "" {
		up.Header.Set("X-Api-Key", p.d.UpstreamKey)
	}
	sent := time.Now()
	resp, err := p.rt.RoundTrip(up)
	if err != nil {
		if r.Context().Err() != nil {
			p.metrics.requests.WithLabelValues(route, "499").Inc()
			return
		}
		p.d.Logger.Warn("llm-proxy: upstream unreachable", "err", err)
		p.fail(w, route, http.StatusBadGateway, "api_error", "the model API is unreachable")
		return
	}
	defer resp.Body.Close()
	p.metrics.upstream.Observe(time.Since(sent).Seconds())

	for k, vs := range resp.Header {
		if !dropResponseHeaders[k] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)

	// Tee what the client receives into the usage parser (2xx only: errors
	// carry no usage).
	var sse *SSEUsageParser
	var jsonBody *bytes.Buffer
	if metered && resp.StatusCode/100 == 2 {
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
			p.d.Logger.Error("llm-proxy: upstream response is encoded; its usage cannot be read", "content_encoding", enc)
		} else if ct == "text/event-stream" {
			sse = &SSEUsageParser{}
		} else {
			jsonBody = &bytes.Buffer{}
		}
	}
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	clientGone := false
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				clientGone = true
			} else if flusher != nil {
				flusher.Flush()
			}
			switch {
			case sse != nil:
				_, _ = sse.Write(buf[:n])
			case jsonBody != nil && jsonBody.Len()+n <= maxJSONBody:
				jsonBody.Write(buf[:n])
			}
		}
		if rerr != nil || clientGone {
			if rerr != nil && rerr != io.EOF && r.Context().Err() != nil {
				clientGone = true
			}
			break
		}
	}
	status := strconv.Itoa(resp.StatusCode)
	if clientGone {
		status = "499"
	}
	p.metrics.requests.WithLabelValues(route, status).Inc()

	var u Usage
	var ok bool
	switch {
	case sse != nil:
		u, ok = sse.Usage()
	case jsonBody != nil:
		u, ok = ParseJSONUsage(jsonBody.Bytes())
	}
	if !ok {
		if (sse != nil || jsonBody != nil) && !clientGone {
			p.d.Logger.Error("llm-proxy: a successful response reported no usage; nothing billed",
				"org_id", info.orgID, "session_id", info.sessionID)
		}
		return
	}
	p.recordAsync(info, u, started, p.d.Now())
}
