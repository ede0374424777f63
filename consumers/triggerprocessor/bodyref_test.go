package triggerprocessor_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/blobstore/s3fake"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// byRef stores body in store under key and returns the message of rec with
// the body by reference (as ingest writes bodies over its inline limit).
func (e *env) byRef(store blobstore.Store, key string, rec record) *consumers.Message {
	e.t.Helper()
	ref, err := store.Put(context.Background(), key, rec.body, "application/json")
	if err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(rec.body)
	m := e.message(rec)
	p := m.Event.Payload.(*schemas.WebhookReceived)
	p.BodyRef = &schemas.WebhookBodyRef{Ref: ref, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(rec.body))}
	p.Body = []byte{}
	return m
}

func fsStore(t testing.TB) blobstore.Store {
	s, err := blobstore.Filesystem(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A record whose body is in the blob store is processed like the same
// record with the body inline.
func TestBodyByReference(t *testing.T) {
	e := newEnv(t)
	store := fsStore(t)
	e.handler = triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.pool, Codec: e.codec, Blobs: store})
	trig := e.trigger("github", e.githubApp(), map[string]any{"events": []any{"issues"}})
	rec := record{provider: "github", route: "direct", headers: gh("issues"), delivery: "by-ref-1", body: e.fixture("github/issues_opened.json")}
	m := e.byRef(store, "webhooks/2024/05/02/by-ref-1", rec)
	e.handle(m)
	e.handle(m) // replay
	ev := e.one(trig)
	if ev.Status != "queued" || ev.Runs != 1 || ev.ProviderEventType != "issues:opened" || ev.WebhookEventID != m.Event.EventID {
		t.Fatalf("%+v", ev)
	}
	if !strings.Contains(ev.Context["description"].(string), "Steps to reproduce") {
		t.Fatalf("context %v", ev.Context)
	}
}

// A blob that is missing, of another size or another SHA-256, or a ref the
// store cannot read, can never be right: the handler's error is permanent
// and, through the runner, the record goes to the dead-letter topic at once
// while the records after it are processed.
func TestBadBodyRefDeadLettered(t *testing.T) {
	e := newEnv(t)
	store := fsStore(t)
	e.handler = triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.pool, Codec: e.codec, Blobs: store})
	trig := e.trigger("custom", "", nil)
	rec := func(body string) record {
		return record{provider: "custom", route: "trigger", triggerID: trig, body: []byte(body)}
	}
	wrongSHA := e.byRef(store, "webhooks/a/wrong-sha", rec(`{"n":1}`))
	wrongSHA.Event.Payload.(*schemas.WebhookReceived).BodyRef.SHA256 = strings.Repeat("ab", 32)
	missing := e.byRef(store, "webhooks/a/missing", rec(`{"n":2}`))
	missing.Event.Payload.(*schemas.WebhookReceived).BodyRef.Ref = "file:webhooks/a/never-written"
	wrongSize := e.byRef(store, "webhooks/a/wrong-size", rec(`{"n":3}`))
	wrongSize.Event.Payload.(*schemas.WebhookReceived).BodyRef.Size++
	foreign := e.byRef(store, "webhooks/a/foreign", rec(`{"n":4}`))
	foreign.Event.Payload.(*schemas.WebhookReceived).BodyRef.Ref = "s3://elsewhere/webhooks/a/foreign"
	good := e.byRef(store, "webhooks/a/good", rec(`{"n":5}`))
	bad := []*consumers.Message{wrongSHA, missing, wrongSize, foreign}
	for _, m := range bad {
		if err := e.handler(context.Background(), m); !consumers.IsPermanent(err) {
			t.Fatalf("%+v: error %v is not permanent", m.Event.Payload.(*schemas.WebhookReceived).BodyRef, err)
		}
	}
	noStore := triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.pool, Codec: e.codec})
	if err := noStore(context.Background(), good); !consumers.IsPermanent(err) {
		t.Fatalf("without a blob store: %v", err)
	}
	if n := len(e.events(trig)); n != 0 {
		t.Fatalf("%d events recorded", n)
	}

	// Through the runner, on a real broker.
	dlq := triggerprocessor.Group.DeadLetter()
	k := consumerstest.New(t, consumerstest.Options{}, triggerprocessor.Group)
	runGroup(t, e, k, append(bad, good), func(*consumers.Message) string { return "custom:" + trig },
		// Permanent errors skip the retries: a long backoff would show.
		consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: time.Minute, MaxBackoff: time.Minute})
	testenv.Eventually(t, 30*time.Second, "the good record processed", func() bool { return len(e.events(trig)) == 1 })
	if ev := e.one(trig); ev.Status != "queued" || ev.WebhookEventID != good.Event.EventID {
		t.Fatalf("%+v", ev)
	}
	dl, err := kgo.NewClient(kgo.SeedBrokers(k.Seeds...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	got := map[string]string{}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	for len(got) < len(bad) && pctx.Err() == nil {
		dl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h[consumers.HeaderDLQPermanent] != "true" || h[consumers.HeaderDLQAttempts] != "1" {
				t.Errorf("dead letter headers %v", h)
			}
			got[h["event_id"]] = h[consumers.HeaderDLQError]
		})
	}
	for _, m := range bad {
		if msg, ok := got[m.Event.EventID]; !ok || !strings.Contains(msg, "webhook body") {
			t.Errorf("record %s: dead letter %v %q", m.Event.EventID, ok, msg)
		}
	}
}

// A blob store that cannot answer is an infrastructure error: retried, and
// the retry processes the record.
func TestBlobStoreOutageRetried(t *testing.T) {
	e := newEnv(t)
	fake := s3fake.New(t, "webhooks", "AK", "SK")
	store, err := blobstore.S3(blobstore.S3Config{Bucket: "webhooks", EndpointURL: fake.URL(), AccessKey: "AK", SecretKey: "SK", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	e.handler = triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.pool, Codec: e.codec, Blobs: store})
	trig := e.trigger("custom", "", nil)
	m := e.byRef(store, "webhooks/2024/05/02/outage", record{provider: "custom", route: "trigger", triggerID: trig, body: []byte(`{"ok":true}`)})
	fake.FailNext(1)
	if err := e.handler(context.Background(), m); err == nil || consumers.IsPermanent(err) {
		t.Fatalf("outage: %v", err)
	}
	if n := len(e.events(trig)); n != 0 {
		t.Fatalf("%d events during the outage", n)
	}
	e.handle(m)
	if ev := e.one(trig); ev.Status != "queued" {
		t.Fatalf("%+v", ev)
	}
}
