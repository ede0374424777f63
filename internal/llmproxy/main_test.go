package llmproxy_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const upstreamKey = "sk-ant-upstream-secret"

// recorder wraps the upstream and keeps the exact bytes it wrote and the
// headers it received, per request.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	path   string
	header http.Header
	body   *bytes.Buffer
}

type teeWriter struct {
	http.ResponseWriter
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w teeWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(b)
	w.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w teeWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

func (w teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := &bytes.Buffer{}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{path: r.URL.Path, header: r.Header.Clone(), body: buf})
	rc.mu.Unlock()
	rc.next.ServeHTTP(teeWriter{ResponseWriter: w, mu: &rc.mu, buf: buf}, r)
}

// last returns the latest request's headers and a copy of its response bytes.
func (rc *recorder) last(t *testing.T) (string, http.Header, []byte) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		t.Fatal("upstream saw no request")
	}
	r := rc.reqs[len(rc.reqs)-1]
	return r.path, r.header, bytes.Clone(r.body.Bytes())
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

type world struct {
	pool  *pgxpool.Pool
	rdb   *redis.Client
	codec *schemas.Codec
	sim   *llmsim.Server
	rec   *recorder
	up    *httptest.Server
}

func newWorld(t testing.TB) *world {
	t.Helper()
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{pool: testenv.Postgres(t), rdb: testenv.Redis(t), codec: codec,
		sim: llmsim.New(llmsim.Options{APIKey: upstreamKey})}
	w.rec = &recorder{next: w.sim.Handler()}
	w.up = httptest.NewServer(w.rec)
	t.Cleanup(w.up.Close)
	return w
}

// org creates an organization with a balance in credits.
func (w *world) org(t testing.TB, balance, state string) string {
	t.Helper()
	var id string
	slug := "llmproxy-" + uuid.NewString()
	if err := w.pool.QueryRow(context.Background(), `INSERT INTO organizations (name, slug, shadow_balance, billing_state)
		VALUES ('LLM proxy test', $1, $2::numeric, $3) RETURNING id::text`, slug, balance, state).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (w *world) keys(t *testing.T, billing bool, now func() time.Time) *llmproxy.Keys {
	t.Helper()
	k, err := llmproxy.NewKeys(llmproxy.KeysDeps{Pool: w.pool, Redis: w.rdb, PublicURL: "http://proxy.test",
		BillingEnabled: billing, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type proxyUnderTest struct {
	*llmproxy.Proxy
	url string
}

func (w *world) proxy(t *testing.T, mod func(*llmproxy.Deps)) proxyUnderTest {
	t.Helper()
	d := llmproxy.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, UpstreamURL: w.up.URL + "/v1", UpstreamKey: upstreamKey}
	if mod != nil {
		mod(&d)
	}
	p, err := llmproxy.New(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return proxyUnderTest{Proxy: p, url: srv.URL}
}

func issue(t *testing.T, k *llmproxy.Keys, orgID string) (llmkeys.Key, string) {
	t.Helper()
	sessionID := uuid.NewString()
	key, err := k.Issue(context.Background(), orgID, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	return key, sessionID
}

// call posts a Messages API request with the key as x-api-key.
func call(t *testing.T, ctx context.Context, url, key, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// spends returns the llm.spend events in the outbox for the organization.
func (w *world) spends(t *testing.T, orgID string) []*schemas.LLMSpend {
	t.Helper()
	rows, err := w.pool.Query(context.Background(),
		`SELECT value FROM outbox WHERE topic = 'llm.spend' AND key = $1 ORDER BY id`, orgID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*schemas.LLMSpend
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		ev, err := w.codec.Decode(v)
		if err != nil {
			t.Fatalf("decode outbox row: %v", err)
		}
		if ev.OrgID != orgID || ev.EventType != schemas.TypeLLMSpend {
			t.Fatalf("event envelope %+v", ev.Envelope)
		}
		out = append(out, ev.Payload.(*schemas.LLMSpend))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (w *world) keySpend(t *testing.T, key string) int64 {
	t.Helper()
	h := llmproxy.HashKey(key)
	var n int64
	if err := w.pool.QueryRow(context.Background(), `SELECT spend_micros FROM llm_virtual_keys WHERE key_hash = $1`, h[:]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sonnetCost is the claude-sim price computed independently of the package:
// $3 / $15 / $3.75 / $0.30 per million tokens, rounded half up.
func sonnetCost(u llmsim.Usage) int64 {
	perMillion := int64(u.InputTokens)*3_000_000 + int64(u.OutputTokens)*15_000_000 +
		int64(u.CacheCreationInputTokens)*3_750_000 + int64(u.CacheReadInputTokens)*300_000
	return (perMillion + 500_000) / 1_000_000
}
