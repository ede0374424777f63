package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/consumers/billingledger"
	"github.com/proliferate/proliferate/consumers/runartifacts"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// devConfig is the configuration of a test's dev stack (apptest.Config).
func devConfig(t testing.TB, dataDir string, overrides ...string) *config.Config {
	t.Helper()
	return apptest.Config(t, dataDir, overrides...)
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	return apptest.FreeAddr(t)
}

type running struct {
	app  *app.App
	stop func() error
}

func startDev(t testing.TB, cfg *config.Config) running {
	t.Helper()
	r := apptest.Start(t, cfg, nil)
	return running{r.App, r.Stop}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// `dev` brings up the broker, migrations, topics, the relay and the ops
// endpoints; an event written through the outbox reaches its topic; Ctrl-C
// stops it cleanly; a second start finds the broker's data again.
func TestDevRunsTheWholeStackAndRestarts(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "kafka")
	cfg := devConfig(t, dataDir)
	dev := startDev(t, cfg)
	ops := "http://" + dev.app.OpsAddr()

	if code, body := get(t, ops+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	// Ready once every consumer group joined; dev checks the union of its
	// roles' needs.
	var ready struct {
		Status string
		Checks []obs.Result
	}
	var code int
	var body string
	testenv.Eventually(t, 90*time.Second, "dev ready", func() bool {
		code, body = get(t, ops+"/readyz")
		return code == 200
	})
	if err := json.Unmarshal([]byte(body), &ready); err != nil {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	names := map[string]bool{}
	for _, c := range ready.Checks {
		names[c.Name] = true
	}
	for _, want := range []string{"postgres", "redis", "kafka", "blobstore", "sandbox",
		"group:" + triggerprocessor.Group.Name, "group:" + runartifacts.Group.Name, "group:" + billingledger.Group.Name} {
		if !names[want] {
			t.Errorf("dev's readiness lacks %s: %s", want, body)
		}
	}

	// Every catalog topic exists on the embedded broker.
	cl, err := kgo.NewClient(kgo.SeedBrokers(dev.app.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics.All() {
		if !listed.Has(tp.Name) {
			t.Errorf("topic %s missing", tp.Name)
		}
	}

	// An event committed through the outbox is published by dev's relay.
	ctx := context.Background()
	ev := schemas.SampleEvents()[0]
	topicName := topicOf(t, ev.EventType)
	err = pgx.BeginFunc(ctx, dev.app.Pool, func(tx pgx.Tx) error {
		return outbox.AddEvent(ctx, tx, dev.app.Codec, topicName, "key-1", ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(dev.app.Seeds()...), kgo.ConsumeTopics(topicName),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got *schemas.Event
	for got == nil {
		fs := consumer.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatal("the outbox event never reached its topic")
		}
		fs.EachRecord(func(r *kgo.Record) {
			if e, err := dev.app.Codec.Decode(r.Value); err == nil && e.EventID == ev.EventID {
				got = e
			}
		})
	}

	if _, body := get(t, ops+"/metrics"); !strings.Contains(body, "proliferate_outbox_published_total") ||
		!strings.Contains(body, "proliferate_kafka_") {
		t.Fatal("/metrics lacks the outbox or kafka client series")
	}
	consumer.Close()
	cl.Close()
	if err := dev.stop(); err != nil {
		t.Fatalf("dev stopped with %v", err)
	}

	// The second start reuses the broker's data: the topic still holds the event.
	dev2 := startDev(t, devConfig(t, dataDir))
	cl2, err := kgo.NewClient(kgo.SeedBrokers(dev2.app.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	ends, err := kadm.NewClient(cl2).ListEndOffsets(ctx, topicName)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total < 1 {
		t.Fatalf("after restart %s holds %d records", topicName, total)
	}
}

func topicOf(t *testing.T, eventType string) string {
	for _, tp := range topics.All() {
		for _, et := range tp.EventTypes {
			if et == eventType {
				return tp.Name
			}
		}
	}
	t.Fatalf("no topic for %s", eventType)
	return ""
}
