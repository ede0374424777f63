package ingest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/ingest"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	githubSecret = "gh-webhook-secret-7f3a"
	nangoSecret  = "nango-secret-key-91c2"
	maxBody      = 64 << 10
	// inlineBody is INGEST_INLINE_BODY_BYTES of the tests: larger bodies
	// travel by reference.
	inlineBody = 16 << 10
)

// env is one ingest server on a real kfake broker and the package's real
// Postgres database.
type env struct {
	Pool   *pgxpool.Pool
	Seeds  []string
	Codec  *schemas.Codec
	Box    *secretbox.Box
	Server *ingest.Server
	HTTP   *httptest.Server
	Logs   *testenv.LogBuffer
	Admin  *kadm.Client
	Cfg    *config.Config
	// Blobs is the store of bodies that travel by reference; BlobDir its
	// directory when it is the default filesystem store.
	Blobs   blobstore.Store
	BlobDir string
}

type envOptions struct {
	seeds          []string // default: a fresh kfake with webhooks.raw
	produceTimeout time.Duration
	githubSecret   *string
	// blobs: default a filesystem store in a temporary directory.
	blobs blobstore.Store
	// cfg adjusts the configuration (max body maxBody, inline inlineBody).
	cfg func(*config.Config)
}

func newBox(t testing.TB) *secretbox.Box {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	box, err := secretbox.New([]string{"k1:" + base64.StdEncoding.EncodeToString(k)})
	if err != nil {
		t.Fatal(err)
	}
	return box
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	e := &env{Pool: testenv.Postgres(t), Logs: &testenv.LogBuffer{}, Box: newBox(t)}
	e.Seeds = o.seeds
	if e.Seeds == nil {
		e.Seeds = testenv.Kafka(t, kfake.SeedTopics(1, topics.WebhooksRaw))
	}
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e.Codec = codec
	cl, err := kafka.NewClient(kafka.Options{Seeds: e.Seeds}, ingest.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm, err := kgo.NewClient(kgo.SeedBrokers(e.Seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	e.Admin = kadm.NewClient(adm)
	cfg := &config.Config{IngestMaxBodyBytes: maxBody, IngestInlineBodyBytes: inlineBody, GitHubWebhookSecret: githubSecret, NangoSecretKey: nangoSecret}
	if o.githubSecret != nil {
		cfg.GitHubWebhookSecret = *o.githubSecret
	}
	if o.cfg != nil {
		o.cfg(cfg)
	}
	e.Cfg = cfg
	e.Blobs = o.blobs
	if e.Blobs == nil {
		e.BlobDir = t.TempDir()
		fs, err := blobstore.Filesystem(e.BlobDir)
		if err != nil {
			t.Fatal(err)
		}
		e.Blobs = fs
	}
	srv, err := ingest.New(ingest.Deps{
		Cfg: cfg, Log: slog.New(slog.NewTextHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Pool: e.Pool, Kafka: cl, Codec: codec, Box: e.Box, Blobs: e.Blobs, ProduceTimeout: o.produceTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Server = srv
	e.HTTP = httptest.NewServer(srv.Handler())
	t.Cleanup(e.HTTP.Close)
	return e
}

// response is an HTTP answer with its body read.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (e *env) post(t testing.TB, path string, headers map[string]string, body []byte) response {
	t.Helper()
	return e.do(t, http.MethodPost, path, headers, body)
}

func (e *env) do(t testing.TB, method, path string, headers map[string]string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, e.HTTP.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// accepted checks a 200 answer and returns its event id.
func (r response) accepted(t testing.TB) string {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.Status, r.Body)
	}
	var v struct {
		Status  string `json:"status"`
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil || v.Status != "accepted" || v.EventID == "" {
		t.Fatalf("accepted body %s (%v)", r.Body, err)
	}
	return v.EventID
}

// rejected checks an error answer's status and code.
func (r response) rejected(t testing.TB, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var v struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil || v.Error.Code != code || v.Error.Message == "" {
		t.Fatalf("error body %s, want code %q (%v)", r.Body, code, err)
	}
}

// endOffset is the number of records in webhooks.raw (one partition).
func (e *env) endOffset(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := e.Admin.ListEndOffsets(ctx, topics.WebhooksRaw)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// produced is one record of webhooks.raw, decoded.
type produced struct {
	Key     string
	Headers map[string]string
	Event   *schemas.Event
	Payload *schemas.WebhookReceived
	// Size is what topics.CheckRecordSize measures (key, value, headers).
	Size int
}

// body is the record's body: inline, or fetched from the blob store and
// checked against its reference.
func (e *env) body(t testing.TB, p *schemas.WebhookReceived) []byte {
	t.Helper()
	if p.BodyRef == nil {
		return p.Body
	}
	if len(p.Body) != 0 {
		t.Fatalf("a body by reference also has %d bytes inline", len(p.Body))
	}
	b, err := e.Blobs.Get(context.Background(), p.BodyRef.Ref)
	if err != nil {
		t.Fatalf("get %s: %v", p.BodyRef.Ref, err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != p.BodyRef.Size || hex.EncodeToString(sum[:]) != p.BodyRef.SHA256 {
		t.Fatalf("blob %s: %d bytes, sha256 %x; the reference says %d, %s", p.BodyRef.Ref, len(b), sum, p.BodyRef.Size, p.BodyRef.SHA256)
	}
	return b
}

// blobFiles counts the files of the default filesystem blob store.
func (e *env) blobFiles(t testing.TB) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(e.BlobDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// record reads the record at offset of webhooks.raw (one partition).
func (e *env) record(t testing.TB, offset int64) produced {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topics.WebhooksRaw: {0: kgo.NewOffset().At(offset)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record at offset %d", offset)
		}
		var out *produced
		fs.EachRecord(func(r *kgo.Record) {
			if out == nil && r.Offset == offset {
				out = e.decode(t, r)
			}
		})
		if out != nil {
			return *out
		}
	}
}

// decode decodes a record of webhooks.raw and checks it is within the
// topic's limit.
func (e *env) decode(t testing.TB, r *kgo.Record) *produced {
	t.Helper()
	ev, err := e.Codec.Decode(r.Value)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	p, ok := ev.Payload.(*schemas.WebhookReceived)
	if !ok {
		t.Fatalf("payload %T", ev.Payload)
	}
	h := map[string]string{}
	size := len(r.Key) + len(r.Value)
	for _, rh := range r.Headers {
		h[rh.Key] = string(rh.Value)
		size += len(rh.Key) + len(rh.Value)
	}
	if err := topics.CheckRecordSize(topics.WebhooksRaw, size); err != nil {
		t.Fatal(err)
	}
	return &produced{Key: string(r.Key), Headers: h, Event: ev, Payload: p, Size: size}
}

// consume reads webhooks.raw from the start until it has want records, and
// fails if there are more.
func (e *env) consume(t testing.TB, want int) []produced {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Seeds...), kgo.ConsumeTopics(topics.WebhooksRaw),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if n := e.endOffset(t); n != int64(want) {
		t.Fatalf("webhooks.raw has %d records, want %d", n, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []produced
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, *e.decode(t, r)) })
	}
	return out
}

func sign(secret string, body []byte) string { return ingest.Sign([]byte(secret), body) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// webhookTrigger is a trigger with a webhook path and a sealed secret.
type webhookTrigger struct {
	ID, OrgID, Path, Secret, IntegrationID string
}

// newWebhookTrigger inserts a webhook trigger of provider with its own path
// and secret, sealed as the API seals it.
func (e *env) newWebhookTrigger(t testing.TB, provider string, mod func(*runstest.Trigger)) webhookTrigger {
	t.Helper()
	org := runstest.Org(t, e.Pool)
	tr := runstest.Trigger{OrgID: org, AutomationID: runstest.Automation(t, e.Pool, org), Provider: provider}
	if mod != nil {
		mod(&tr)
	}
	id := runstest.NewTrigger(t, e.Pool, tr)
	w := webhookTrigger{ID: id, OrgID: org, Path: "t_" + randomHex(8), Secret: randomHex(32), IntegrationID: tr.IntegrationID}
	sealed, err := e.Box.Seal([]byte(w.Secret), []byte("trigger-webhook:"+id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(context.Background(), `UPDATE triggers SET webhook_path = $1, webhook_secret_sealed = $2 WHERE id = $3`,
		w.Path, sealed, id); err != nil {
		t.Fatal(err)
	}
	return w
}

// newIntegration inserts a Nango integration of org and returns its id.
func (e *env) newIntegration(t testing.TB, org, provider string) string {
	t.Helper()
	var id string
	if err := e.Pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key)
		VALUES ($1, 'nango', $2, 'conn-' || gen_random_uuid()::text, $2) RETURNING id::text`, org, provider).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// noSecrets fails if any of the secrets or marker appears in the logs.
func (e *env) noSecrets(t testing.TB, values ...string) {
	t.Helper()
	logs := e.Logs.String()
	for _, v := range values {
		if v != "" && strings.Contains(logs, v) {
			t.Fatalf("logs contain %q:\n%s", v, logs)
		}
	}
}
