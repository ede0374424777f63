package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/blobstore/s3fake"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/producers/ingest"
	"github.com/proliferate/proliferate/topics"
)

// defaults sets the body limits to their production defaults
// (INGEST_MAX_BODY_BYTES 1 MiB, INGEST_INLINE_BODY_BYTES 64 KiB).
func defaults(t testing.TB) func(*config.Config) {
	def, err := config.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if def.IngestMaxBodyBytes != 1<<20 || def.IngestInlineBodyBytes != 64<<10 {
		t.Fatalf("defaults changed: max %d inline %d", def.IngestMaxBodyBytes, def.IngestInlineBodyBytes)
	}
	return func(c *config.Config) {
		c.IngestMaxBodyBytes, c.IngestInlineBodyBytes = def.IngestMaxBodyBytes, def.IngestInlineBodyBytes
	}
}

// issueDelivery is a GitHub App issues.opened delivery of exactly size bytes
// (a realistic payload whose issue body makes up the size), for installation.
func issueDelivery(t testing.TB, installation int64, size int) []byte {
	t.Helper()
	user := map[string]any{"login": "octocat", "id": 583231, "node_id": "MDQ6VXNlcjU4MzIzMQ==", "type": "User", "site_admin": false,
		"avatar_url": "https://avatars.githubusercontent.com/u/583231?v=4", "html_url": "https://github.com/octocat"}
	issue := map[string]any{
		"url": "https://api.github.com/repos/acme/widgets/issues/1347", "html_url": "https://github.com/acme/widgets/issues/1347",
		"id": 1874512345, "node_id": "I_kwDOABCD5M5vuXyZ", "number": 1347, "title": "Crash when saving a widget with an empty name",
		"user": user, "state": "open", "locked": false, "assignees": []any{}, "comments": 0, "author_association": "MEMBER",
		"labels":     []any{map[string]any{"id": 208045946, "name": "bug", "color": "d73a4a", "default": true}},
		"created_at": "2024-05-02T09:14:03Z", "updated_at": "2024-05-02T09:14:03Z", "body": "",
	}
	payload := map[string]any{
		"action": "opened", "issue": issue, "sender": user,
		"repository": map[string]any{"id": 351234567, "name": "widgets", "full_name": "acme/widgets", "private": true, "owner": user,
			"html_url": "https://github.com/acme/widgets", "default_branch": "main"},
		"installation": map[string]any{"id": installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u"},
	}
	empty, _ := json.Marshal(payload)
	// A pasted log: lines with quotes and a tab (escaped in JSON), filled
	// up to the size with plain text.
	line := "2024-05-02T09:14:03Z ERROR save failed: \"name\" must not be empty\tat Widget.save (src/editor/save.ts:12:20)\n"
	enc, _ := json.Marshal(line)
	cost := len(enc) - 2 // escaped
	var b strings.Builder
	for used := 0; used+cost+len(empty) < size; used += cost {
		b.WriteString(line)
	}
	for {
		issue["body"] = b.String()
		out, _ := json.Marshal(payload)
		if len(out) == size {
			return out
		}
		if len(out) > size {
			t.Fatalf("cannot build a %d-byte delivery (%d)", size, len(out))
		}
		b.WriteString(strings.Repeat("x", size-len(out)))
	}
}

// githubApp registers a GitHub App installation in a new org with an
// automation and a GitHub trigger on issues; it returns the installation
// id, the org and the trigger.
func (e *env) githubApp(t testing.TB) (installation int64, org, trigger string) {
	t.Helper()
	installation = 10_000_000 + rand.Int64N(89_999_999)
	org = runstest.Org(t, e.Pool)
	var integ string
	if err := e.Pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, github_installation_id)
		VALUES ($1, 'github-app', 'github', 'github-app-' || $2::bigint::text, $2::bigint) RETURNING id::text`, org, installation).Scan(&integ); err != nil {
		t.Fatal(err)
	}
	trigger = runstest.NewTrigger(t, e.Pool, runstest.Trigger{OrgID: org, AutomationID: runstest.Automation(t, e.Pool, org),
		Provider: "github", IntegrationID: integ, Config: map[string]any{"events": []any{"issues"}, "labels": []any{"bug"}}})
	return installation, org, trigger
}

// process hands records to the trigger processor, as its consumer group
// would.
func (e *env) process(t testing.TB, recs ...produced) {
	t.Helper()
	h := triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.Pool, Codec: e.Codec, Blobs: e.Blobs, Log: slog.New(slog.DiscardHandler)})
	for _, r := range recs {
		if err := h(context.Background(), &consumers.Message{Record: &kgo.Record{Topic: topics.WebhooksRaw}, Event: r.Event, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// A signed 626,673-byte GitHub issues webhook (larger than a record may be) is accepted, its
// body travels by reference, the trigger processor queues one run from it,
// and every record produced on the way (webhooks.raw, and the outbox rows of
// triggers.events and runs.lifecycle) fits its topic.
func TestLargeGitHubIssueBecomesQueuedRun(t *testing.T) {
	e := newEnv(t, envOptions{cfg: defaults(t)})
	installation, _, trigger := e.githubApp(t)
	body := issueDelivery(t, installation, 626_673)
	id := e.post(t, "/webhooks/github", githubHeaders(body, githubSecret), body).accepted(t)

	rec := e.consume(t, 1)[0] // within webhooks.raw's limit (consume checks)
	p := rec.Payload
	if rec.Event.EventID != id || rec.Key != "github:"+strconv.FormatInt(installation, 10) || p.BodyRef == nil || len(p.Body) != 0 {
		t.Fatalf("record %s: body %d bytes inline, ref %+v", rec.Key, len(p.Body), p.BodyRef)
	}
	wantRef := "file:" + ingest.BodyKey(p.ReceivedAt, id)
	if p.BodyRef.Ref != wantRef || p.BodyRef.Size != int64(len(body)) || !strings.HasPrefix(p.BodyRef.Ref, "file:webhooks/"+p.ReceivedAt.Format("2006/01/02")+"/") {
		t.Fatalf("ref %+v, want %s", p.BodyRef, wantRef)
	}
	if !bytes.Equal(e.body(t, p), body) || rec.Size > 8<<10 {
		t.Fatalf("record of %d bytes", rec.Size)
	}

	e.process(t, rec, rec) // a redelivery changes nothing
	var status, runStatus string
	var ctxBytes int
	if err := e.Pool.QueryRow(context.Background(), `SELECT te.status, octet_length(te.parsed_context::text), r.status
		FROM trigger_events te JOIN automation_runs r ON r.trigger_event_id = te.id WHERE te.trigger_id = $1`, trigger).
		Scan(&status, &ctxBytes, &runStatus); err != nil {
		t.Fatal(err)
	}
	if status != "queued" || runStatus != "queued" || ctxBytes > 32<<10 {
		t.Fatalf("event %s run %s, context %d bytes", status, runStatus, ctxBytes)
	}
	rows, err := e.Pool.Query(context.Background(), `SELECT o.topic, o.key, o.value, o.headers FROM outbox o
		WHERE o.key = $1 OR o.key IN (SELECT id::text FROM automation_runs WHERE trigger_id = $1::uuid)`, trigger)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]int{}
	for rows.Next() {
		var topic, key string
		var value []byte
		var headers map[string]string
		if err := rows.Scan(&topic, &key, &value, &headers); err != nil {
			t.Fatal(err)
		}
		size := len(key) + len(value)
		for k, v := range headers {
			size += len(k) + len(v)
		}
		if err := topics.CheckRecordSize(topic, size); err != nil {
			t.Fatal(err)
		}
		seen[topic]++
	}
	if seen[topics.TriggersEvents] != 1 || seen[topics.RunsLifecycle] != 1 {
		t.Fatalf("outbox rows %v", seen)
	}
}

// Every body within INGEST_MAX_BODY_BYTES is accepted and publishable, the
// ones webhooks.raw could not carry inline (999,460 to 1,048,576
// bytes answered 503 forever) included; one byte more is 413, declared or
// chunked, and produces nothing.
func TestBodySizeBoundary(t *testing.T) {
	e := newEnv(t, envOptions{cfg: defaults(t)})
	max := e.Cfg.IngestMaxBodyBytes
	n := 0
	for _, size := range []int{max - 1, max, 999_460, 1_000_000, e.Cfg.IngestInlineBodyBytes, e.Cfg.IngestInlineBodyBytes + 1} {
		body := issueDelivery(t, 4242, size)
		e.post(t, "/webhooks/github", githubHeaders(body, githubSecret), body).accepted(t)
		n++
	}
	over := issueDelivery(t, 4242, max+1)
	e.post(t, "/webhooks/github", githubHeaders(over, githubSecret), over).rejected(t, 413, "body_too_large")
	req, _ := http.NewRequest(http.MethodPost, e.HTTP.URL+"/webhooks/github", io.MultiReader(bytes.NewReader(over)))
	for k, v := range githubHeaders(over, githubSecret) {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || req.ContentLength != 0 || !bytes.Contains(got, []byte(`"body_too_large"`)) {
		t.Fatalf("chunked: %d %s", resp.StatusCode, got)
	}
	recs := e.consume(t, n)
	for i, r := range recs {
		inline := i == 4
		if (r.Payload.BodyRef == nil) != inline {
			t.Errorf("record %d (%d bytes): by reference %v", i, len(e.body(t, r.Payload)), r.Payload.BodyRef != nil)
		}
	}
	if got := len(e.body(t, recs[0].Payload)); got != max-1 {
		t.Fatalf("first body %d bytes", got)
	}
}

// Bodies up to INGEST_INLINE_BODY_BYTES travel inline and touch no store;
// larger ones are stored once, under webhooks/{yyyy}/{mm}/{dd}/{event id}.
func TestClaimCheck(t *testing.T) {
	e := newEnv(t, envOptions{})
	small := issueDelivery(t, 7, inlineBody)
	large := issueDelivery(t, 7, inlineBody+1)
	e.post(t, "/webhooks/github", githubHeaders(small, githubSecret), small).accepted(t)
	if n := e.blobFiles(t); n != 0 {
		t.Fatalf("an inline body wrote %d blobs", n)
	}
	id := e.post(t, "/webhooks/github", githubHeaders(large, githubSecret), large).accepted(t)
	if n := e.blobFiles(t); n != 1 {
		t.Fatalf("%d blobs", n)
	}
	recs := e.consume(t, 2)
	if recs[0].Payload.BodyRef != nil || !bytes.Equal(recs[0].Payload.Body, small) {
		t.Fatal("small body not inline")
	}
	p := recs[1].Payload
	if p.BodyRef == nil || p.BodyRef.Ref != "file:"+ingest.BodyKey(p.ReceivedAt, id) || !bytes.Equal(e.body(t, p), large) {
		t.Fatalf("large body: %+v", p.BodyRef)
	}
	if k := ingest.BodyKey(time.Date(2026, 1, 2, 23, 59, 0, 0, time.FixedZone("x", -3600)), "e1"); k != "webhooks/2026/01/03/e1" {
		t.Fatalf("key %s (the day is UTC's)", k)
	}
	if blobstore.ValidateKey(ingest.BodyKey(time.Now(), id)) != nil {
		t.Fatal("invalid key")
	}
}

// A blob store that cannot take a large body is 503 with Retry-After (a
// retry can succeed), nothing is produced, small bodies are unaffected, and
// once the store is back the retry is accepted with its body in S3.
func TestBlobStoreUnavailable(t *testing.T) {
	fake := s3fake.New(t, "webhooks", "AK", "SK")
	store, err := blobstore.S3(blobstore.S3Config{Bucket: "webhooks", EndpointURL: fake.URL(), AccessKey: "AK", SecretKey: "SK", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{blobs: store})
	large := issueDelivery(t, 9, inlineBody*2)
	small := []byte(issuesBody)

	fake.FailNext(2)
	r := e.post(t, "/webhooks/github", githubHeaders(large, githubSecret), large)
	r.rejected(t, 503, "unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if n := e.endOffset(t); n != 0 {
		t.Fatalf("%d records after a failed blob write", n)
	}
	e.post(t, "/webhooks/github", githubHeaders(small, githubSecret), small).accepted(t) // needs no store
	e.post(t, "/webhooks/github", githubHeaders(large, githubSecret), large).rejected(t, 503, "unavailable")
	e.post(t, "/webhooks/github", githubHeaders(large, githubSecret), large).accepted(t) // the store is back
	recs := e.consume(t, 2)
	p := recs[1].Payload
	if p.BodyRef == nil || !strings.HasPrefix(p.BodyRef.Ref, "s3://webhooks/webhooks/") || !bytes.Equal(e.body(t, p), large) {
		t.Fatalf("ref %+v", p.BodyRef)
	}
	if fake.Puts() != 1 {
		t.Fatalf("%d puts", fake.Puts())
	}
	e.noSecrets(t, githubSecret, "must not be empty")
}

// Headers are bounded whatever the sender sends, so a record never exceeds
// webhooks.raw's limit because of them.
func TestHeadersBounded(t *testing.T) {
	e := newEnv(t, envOptions{cfg: defaults(t)})
	body := issueDelivery(t, 11, e.Cfg.IngestInlineBodyBytes) // the largest inline body
	h := githubHeaders(body, githubSecret)
	for i := range 200 {
		h[fmt.Sprintf("X-Pad-%03d", i)] = strings.Repeat("v", 2000)
	}
	h["X-"+strings.Repeat("n", 2000)] = "long name"
	e.post(t, "/webhooks/github", h, body).accepted(t)
	r := e.consume(t, 1)[0]
	total := 0
	for k, v := range r.Payload.Headers {
		total += len(k) + len(v)
	}
	if total > 16<<10 || len(r.Payload.Headers) > 64 || r.Payload.Headers["x-github-event"] != "issues" {
		t.Fatalf("%d headers, %d bytes", len(r.Payload.Headers), total)
	}
	if r.Payload.BodyRef != nil || r.Size > topics.MaxRecordBytes(topics.WebhooksRaw) {
		t.Fatalf("record %d bytes", r.Size)
	}
}
