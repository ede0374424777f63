// Package ingest is the webhook ingest role: a fast-ack HTTP server that
// verifies an inbound webhook, produces exactly one webhook.received event to
// the webhooks.raw topic (synchronously, acks=all) and only then answers 2xx.
// Nothing else happens in the request: parsing into trigger events, matching
// and queueing runs is the trigger processor's job.
//
// # Routes
//
//	POST /webhooks/github                    GitHub App webhooks
//	POST /webhooks/nango                     Nango webhooks (forward, auth, sync)
//	POST /webhooks/direct/{provider}/{path}  linear, sentry, posthog, signed with the trigger's secret
//	POST /webhooks/direct/{provider}?trigger={path}   the same, identity as a query parameter
//	POST /webhooks/t/{path}                  per-trigger webhooks (custom and any provider)
//	GET  /healthz                            liveness
//
// {path} is a trigger's webhook_path (t_ followed by 16 to 64 letters and
// digits).
//
// # Content types
//
// Bodies are JSON: Content-Type application/json, application/*+json,
// text/plain (for senders that cannot set one; the body must still be JSON)
// or none, with no charset but UTF-8. GitHub routes (/webhooks/github and
// the URLs of GitHub triggers) also take GitHub's form deliveries,
// application/x-www-form-urlencoded with the JSON in a payload field: the
// signature is checked over the raw form, then the JSON of payload is what
// is produced (body, with content_type application/json; the request's own
// Content-Type stays in the kept headers), so every reader of webhooks.raw
// parses one format. Any other type, or a form on another route, is 415.
//
// # Verification
//
//   - github: X-Hub-Signature-256 = "sha256=" + hex HMAC-SHA256(GITHUB_WEBHOOK_SECRET, body).
//     The routing id is installation.id of the body (the only field read).
//     X-GitHub-Event is required; X-GitHub-Delivery is kept as the delivery id.
//     A verified delivery without an installation (a positive integer
//     installation.id) is refused with 422 no_installation and a warning in
//     the log, and nothing is produced: /webhooks/github is the GitHub App's
//     endpoint, and every delivery of an App installation names it, so such
//     a delivery comes from a repository or organization webhook pointed at
//     the wrong URL (those belong on their trigger's own URL), and the
//     sender's delivery log should say so rather than show a success that
//     starts nothing. GitHub's ping is answered 200 {"status":"pong"} and the
//     App-level events that concern no installation (github_app_authorization,
//     meta) 200 {"status":"ignored"}; neither is produced.
//   - nango: X-Nango-Hmac-Sha256 = hex HMAC-SHA256(NANGO_SECRET_KEY, body), as
//     Nango documents it. The legacy X-Nango-Signature (plain SHA-256 of
//     secret+body) is not accepted. Every verified envelope is produced
//     (forward, auth, sync, and unwrapped payloads Nango could not attribute);
//     the routing id is connectionId.
//
// Per-trigger secrets (direct and /webhooks/t/): the identity in the URL (the
// trigger's webhook_path) is resolved first (unknown → 404), its sealed
// secret opened with the additional data "trigger-webhook:{trigger id}",
// then the signature is checked with the scheme of the trigger's provider
// (wrong or missing → 401). The direct route accepts only webhook triggers of
// its own provider; /webhooks/t/ any webhook trigger.
//
//   - linear: Linear-Signature = hex HMAC-SHA256(secret, body)
//   - sentry: Sentry-Hook-Signature = hex HMAC-SHA256(secret, body)
//   - posthog: X-PostHog-Signature = hex HMAC-SHA256(secret, body) ("sha256="
//     prefix allowed); without it, the token fallback: X-PostHog-Token:
//     {secret} or Authorization: Bearer {secret}
//   - github (a repository webhook pointed at a trigger URL):
//     X-Hub-Signature-256 with the trigger's secret
//   - every other provider (custom): X-Webhook-Signature = "sha256=" + hex
//     HMAC-SHA256(secret, body); for senders that cannot sign,
//     Authorization: Bearer {secret}
//
// When a signature header is present it alone decides. Signatures are
// compared with hmac.Equal, tokens in constant time whatever their length
// (SHA-256 of both sides, then subtle.ConstantTimeCompare).
//
// # Answers
//
//	200 {"status":"accepted","event_id":…}  the event is durably in webhooks.raw
//	200 {"status":"pong"|"ignored","message"}  a verified GitHub ping or App-level event; nothing produced
//	400 bad_request             a verified body that is not JSON (or not an object, except for custom
//	                            triggers, whose body may be any JSON value), a form without one payload
//	                            field, a GitHub delivery without X-GitHub-Event
//	401 invalid_signature       bad or missing signature or token
//	404 not_found               unknown route, provider or trigger path, or a route whose secret is not configured
//	413 body_too_large          body over INGEST_MAX_BODY_BYTES (declared or read);
//	    record_too_large        the record would exceed webhooks.raw's limit (cannot happen with a valid
//	                            INGEST_INLINE_BODY_BYTES: headers are bounded)
//	415 unsupported_media_type  a Content-Type other than the above
//	422 no_installation         a GitHub App delivery without an installation (above)
//	503 unavailable             with Retry-After: Kafka, the blob store, or the database (routing
//	                            lookups) cannot take the event in time
//
// Errors are {"error":{"code","message"}}. A rejected request produces
// nothing. Every body within INGEST_MAX_BODY_BYTES can be recorded, so a
// 503 always means a dependency is down and a retry can succeed; a body
// that can never be recorded is answered 4xx.
//
// Disabled triggers and automations still accept webhooks: the trigger
// processor records the event as skipped (trigger_disabled,
// automation_disabled), so the sender sees success and the owner sees what
// was missed. Only a deleted trigger (no such path) gives 404.
//
// # What is produced
//
// One webhook.received record per accepted request, key "{provider}:{routing
// id}": github:{installation id}, nango:{connectionId} (provider "nango", the
// envelope as body, provider_event_type the envelope type), and for triggers
// {trigger provider}:{trigger id} with org_id, trigger_id, webhook_path and
// integration_id set. The body is byte for byte what was received (a form
// delivery: the JSON of its payload field); signature_verified is always
// true; headers are lower-cased and never include credentials, cookies or
// signatures (at most 64 of them, 16 KiB in all). correlation_id is the
// event id.
//
// Bodies larger than INGEST_INLINE_BODY_BYTES (default 64 KiB, at most
// webhooks.raw's 512 KiB record limit less 64 KiB) travel by reference, a
// claim check: ingest first writes the body to the blob store (S3_BUCKET,
// else BLOB_DIR) under webhooks/{yyyy}/{mm}/{dd}/{event_id}, then produces
// the record with an empty body and body_ref {ref, sha256, size}; the
// trigger processor fetches and verifies it. Smaller bodies, nearly every
// webhook, travel inline and touch no store. A blob whose produce then
// fails (503; the sender retries with a new event id) is referred to by no
// record: it is garbage, harmless, and removable with the day's prefix once
// webhooks.raw's 7-day retention has passed (no record can refer to it any
// more). Nothing in the request removes it, since a produce that timed out
// may still have been written.
//
// Request bodies, signatures and secrets are never logged.
package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/schemas"
)

// Defaults of the optional Deps settings.
const (
	DefaultProduceTimeout  = 5 * time.Second
	DefaultBlobTimeout     = 5 * time.Second
	DefaultRoutingCacheTTL = 5 * time.Second
	// RetryAfterSeconds is the Retry-After of 503 answers.
	RetryAfterSeconds = "5"
)

// Deps are what the ingest server needs. Pool is used only for reads that
// resolve per-trigger secrets; Kafka must be a client from kafka.NewClient
// (acks=all, idempotent), preferably with ClientOptions(); Blobs takes the
// bodies larger than INGEST_INLINE_BODY_BYTES.
type Deps struct {
	Cfg   *config.Config
	Log   *slog.Logger
	Pool  *pgxpool.Pool
	Kafka *kgo.Client
	Codec *schemas.Codec
	Box   *secretbox.Box
	Blobs blobstore.Store

	// ProduceTimeout bounds the synchronous produce of one event; past it the
	// request gets 503. Zero means DefaultProduceTimeout.
	ProduceTimeout time.Duration
	// BlobTimeout bounds the write of one body to the blob store; past it
	// the request gets 503. Zero means DefaultBlobTimeout.
	BlobTimeout time.Duration
	// RoutingCacheTTL is how long a resolved trigger path (and its opened
	// secret, or its absence) is cached. Zero means DefaultRoutingCacheTTL, a
	// negative value disables the cache.
	RoutingCacheTTL time.Duration
}

// ClientOptions are the Kafka client options the ingest role should add to
// kafka.NewClient: no linger, so that a synchronous produce is sent at once
// (concurrent requests still batch while a produce request is in flight).
func ClientOptions() []kgo.Opt {
	return []kgo.Opt{kgo.ProducerLinger(0)}
}

// Server serves /webhooks/… and /healthz.
type Server struct {
	d     Deps
	mux   *http.ServeMux
	cache *routeCache
}

// New checks d and builds the server.
func New(d Deps) (*Server, error) {
	if d.Cfg == nil || d.Kafka == nil || d.Codec == nil || d.Pool == nil || d.Box == nil || d.Blobs == nil {
		return nil, errors.New("ingest: Cfg, Pool, Kafka, Codec, Box and Blobs are required")
	}
	if d.Cfg.IngestMaxBodyBytes <= 0 {
		return nil, errors.New("ingest: INGEST_MAX_BODY_BYTES must be positive")
	}
	if n := d.Cfg.IngestInlineBodyBytes; n < 0 || n > config.MaxIngestInlineBodyBytes() {
		return nil, fmt.Errorf("ingest: INGEST_INLINE_BODY_BYTES must be between 0 and %d", config.MaxIngestInlineBodyBytes())
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.ProduceTimeout <= 0 {
		d.ProduceTimeout = DefaultProduceTimeout
	}
	if d.BlobTimeout <= 0 {
		d.BlobTimeout = DefaultBlobTimeout
	}
	if d.RoutingCacheTTL == 0 {
		d.RoutingCacheTTL = DefaultRoutingCacheTTL
	}
	d.Log = d.Log.With("role", "ingest")
	s := &Server{d: d, mux: http.NewServeMux(), cache: newRouteCache(d.RoutingCacheTTL)}
	s.routes()
	return s, nil
}

// Handler returns the HTTP handler serving every ingest route. No answer
// may be cached.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s.mux.ServeHTTP(w, r)
	})
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.webhook("/webhooks/github", "github", s.github)
	s.webhook("/webhooks/nango", "nango", s.nango)
	s.webhook("/webhooks/direct/{provider}", "direct", s.direct)
	s.webhook("/webhooks/direct/{provider}/{path}", "direct", s.direct)
	s.webhook("/webhooks/t/{path}", "trigger", s.trigger)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFound("no such route"))
	})
}

// webhook registers a POST route through the common stack (body limit,
// verification by fn, produce, answer) and a JSON 405 for other methods.
func (s *Server) webhook(pattern, name string, fn verifyFunc) {
	s.mux.Handle("POST "+pattern, s.stack(name, fn))
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, &httpapi.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: "use POST"})
	})
}

func errNotFound(msg string) *httpapi.Error {
	return &httpapi.Error{Status: http.StatusNotFound, Code: httpapi.CodeNotFound, Message: msg}
}

func errSignature(msg string) *httpapi.Error {
	return &httpapi.Error{Status: http.StatusUnauthorized, Code: "invalid_signature", Message: msg}
}

func errBadBody(msg string) *httpapi.Error {
	return &httpapi.Error{Status: http.StatusBadRequest, Code: httpapi.CodeBadRequest, Message: msg}
}

func errUnavailable(msg string) *httpapi.Error {
	return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, Message: msg}
}

var errInternal = httpapi.Internal()

// writeError answers e in the one error shape, without a request id (ingest
// has none); a 503 says when to retry.
func writeError(w http.ResponseWriter, e *httpapi.Error) {
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", RetryAfterSeconds)
	}
	httpapi.WriteJSON(w, e.Status, httpapi.NewErrorBody(e, ""))
}
