package triggerprocessor_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/topics"
)

// Records produced to webhooks.raw on a real (in-process) Kafka broker and
// consumed by a consumers.Runner with this handler: a delivery sent twice
// queues one run, an unparseable one is a failed event and does not stall
// the partition, and a second delivery still queues its run.
func TestThroughRunner(t *testing.T) {
	e := newEnv(t)
	k := consumerstest.New(t, consumerstest.Options{Partitions: 2}, triggerprocessor.Group)
	push := e.trigger("github", e.githubApp(), map[string]any{"events": []any{"push"}, "branches": []any{"main"}})
	custom := e.trigger("custom", "", nil)

	pushRec := record{provider: "github", route: "direct", headers: gh("push"), delivery: "runner-push-1", body: e.fixture("github/push.json")}
	msgs := []*consumers.Message{
		e.message(pushRec),
		e.message(record{provider: "custom", route: "trigger", triggerID: custom, body: []byte("<xml/>")}),
		e.message(pushRec), // redelivered by the provider: a new record, the same delivery
		e.message(record{provider: "custom", route: "trigger", triggerID: custom, body: []byte(`{"ok":true}`)}),
	}
	runGroup(t, e, k, msgs, func(m *consumers.Message) string { return m.Event.EventID },
		consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})

	testenv.Eventually(t, 30*time.Second, "webhooks processed", func() bool {
		return len(e.events(push)) == 1 && len(e.events(custom)) == 2
	})
	if ev := e.one(push); ev.Status != "queued" || ev.Runs != 1 {
		t.Fatalf("push: %+v", ev)
	}
	statuses := map[string]int{}
	for _, ev := range e.events(custom) {
		statuses[ev.Status]++
	}
	if statuses["failed"] != 1 || statuses["queued"] != 1 {
		t.Fatalf("custom: %v", statuses)
	}
}

// runGroup produces msgs to webhooks.raw (keyed by key) and runs the
// trigger-processor group on them with retry until the test ends.
func runGroup(t *testing.T, e *env, k *consumerstest.World, msgs []*consumers.Message, key func(*consumers.Message) string, retry consumers.RetryOptions) {
	t.Helper()
	var recs []*kgo.Record
	for _, m := range msgs {
		recs = append(recs, k.Record(topics.WebhooksRaw, key(m), m.Event))
	}
	k.Produce(recs...)
	k.Start(triggerprocessor.Group, e.handler, consumers.Config{Codec: e.codec, Retry: retry})
}
