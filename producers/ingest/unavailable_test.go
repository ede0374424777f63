package ingest_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/topics"
)

// freePort returns a loopback port nothing listens on (for now).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// With no broker reachable the sender gets 503 with Retry-After, never a 2xx;
// once the broker is up, the sender's retry of the same delivery is accepted
// and the event is in webhooks.raw.
func TestKafkaUnavailableThenRecovers(t *testing.T) {
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	e := newEnv(t, envOptions{seeds: []string{addr}, produceTimeout: 300 * time.Millisecond})
	body := []byte(issuesBody)

	start := time.Now()
	r := e.post(t, "/webhooks/github", githubHeaders(body, githubSecret), body)
	r.rejected(t, 503, "unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("503 took %v; the produce is not bounded", d)
	}
	// A per-trigger route too.
	tr := e.newWebhookTrigger(t, "custom", nil)
	e.post(t, "/webhooks/t/"+tr.Path, signedFor("custom", tr.Secret, body), body).rejected(t, 503, "unavailable")

	// The broker comes up on the address the client knows.
	seeds := testenv.Kafka(t, kfake.Ports(port), kfake.SeedTopics(1, topics.WebhooksRaw))
	if seeds[0] != addr {
		t.Fatalf("kfake listens on %v, want %s", seeds, addr)
	}
	var accepted string
	testenv.Eventually(t, 30*time.Second, "a retried delivery accepted", func() bool {
		r := e.post(t, "/webhooks/github", githubHeaders(body, githubSecret), body)
		if r.Status == 503 {
			return false
		}
		accepted = r.accepted(t)
		return true
	})
	// Every record in the topic is this delivery (a timed-out attempt may
	// have landed too; the processor deduplicates on the delivery id), and
	// the accepted one is among them.
	n := e.endOffset(t)
	recs := e.consume(t, int(n))
	found := false
	for _, rec := range recs {
		if deref(rec.Payload.DeliveryID) != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
			t.Fatalf("unexpected record %+v", rec.Payload)
		}
		found = found || rec.Event.EventID == accepted
	}
	if !found {
		t.Fatalf("accepted event %s not in webhooks.raw (%d records)", accepted, n)
	}
	// The custom trigger's sender retries too; whatever landed (the accepted
	// delivery, and possibly an attempt that timed out but was written), the
	// trigger-processor turns it into exactly one run, also when replayed.
	testenv.Eventually(t, 30*time.Second, "the custom delivery accepted", func() bool {
		return e.post(t, "/webhooks/t/"+tr.Path, signedFor("custom", tr.Secret, body), body).Status == 200
	})
	all := e.consume(t, int(e.endOffset(t)))
	h := triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.Pool, Codec: e.Codec, Log: slog.New(slog.DiscardHandler)})
	for range 2 {
		for _, rec := range all {
			if err := h(context.Background(), &consumers.Message{Record: &kgo.Record{Topic: topics.WebhooksRaw}, Event: rec.Event}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var runs int
	if err := e.Pool.QueryRow(context.Background(), "SELECT count(*) FROM automation_runs WHERE trigger_id = $1", tr.ID).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Fatalf("%d runs for one retried delivery; want exactly 1", runs)
	}
	e.noSecrets(t, githubSecret, tr.Secret)
}
