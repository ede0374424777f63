package litellm_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm/litellmfake"
	"github.com/proliferate/proliferate/internal/testenv"
	litellmproducer "github.com/proliferate/proliferate/producers/litellm"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const masterKey = "sk-master-test-secret"

var seq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

// newOrg inserts an organization with a billing state and a balance in
// credits.
func newOrg(t *testing.T, pool *pgxpool.Pool, state string, credits int64) string {
	t.Helper()
	var id string
	err := pool.QueryRow(context.Background(),
		`INSERT INTO organizations (name, slug, billing_state, shadow_balance, grace_expires_at)
		 VALUES ('Org', $1, $2::text, $3, CASE WHEN $2::text = 'grace' THEN now() + interval '5 minutes' END) RETURNING id::text`,
		unique("org-"), state, credits).Scan(&id)
	if err != nil {
		t.Fatalf("insert organization: %v", err)
	}
	return id
}

func newSession(t *testing.T, pool *pgxpool.Pool, org, status string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(),
		`INSERT INTO sessions (org_id, status) VALUES ($1, $2) RETURNING id::text`, org, status).Scan(&id); err != nil {
		t.Fatalf("insert session: %v", err)
	}
	return id
}

func newClient(t *testing.T, fake *litellmfake.Server) *litellm.Client {
	t.Helper()
	c, err := litellm.NewClient(litellm.ClientConfig{AdminURL: fake.URL + "/v1/", MasterKey: masterKey, Backoff: time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return c
}

type collectorEnv struct {
	pool   *pgxpool.Pool
	fake   *litellmfake.Server
	coll   *litellmproducer.Collector
	codec  *schemas.Codec
	seeds  []string
	logs   *testenv.LogBuffer
	reader *kgo.Client
}

func newCollectorEnv(t *testing.T, mod func(*litellmproducer.CollectorDeps)) *collectorEnv {
	t.Helper()
	e := &collectorEnv{pool: testenv.Postgres(t), fake: litellmfake.New(t, masterKey), logs: &testenv.LogBuffer{}}
	e.seeds = testenv.Kafka(t, kfake.SeedTopics(3, topics.LLMSpend))
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatalf("codec: %v", err)
	}
	e.codec = codec
	prod, err := kafka.NewClient(kafka.Options{Seeds: e.seeds, ClientID: "litellm-collector-test"})
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(prod.Close)
	d := litellmproducer.CollectorDeps{
		Client:         newClient(t, e.fake),
		Pool:           e.pool,
		Kafka:          prod,
		Codec:          codec,
		BillingEnabled: true,
		Logger:         slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&d)
	}
	e.coll, err = litellmproducer.NewCollector(d)
	if err != nil {
		t.Fatalf("new collector: %v", err)
	}
	e.reader, err = kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(topics.LLMSpend),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	t.Cleanup(e.reader.Close)
	return e
}

func (e *collectorEnv) cycle(t *testing.T) litellmproducer.CycleStats {
	t.Helper()
	st, err := e.coll.Cycle(context.Background())
	if err != nil {
		t.Fatalf("cycle: %v", err)
	}
	if !st.Locked {
		t.Fatal("cycle did not take the collector lock")
	}
	return st
}

// topicCount is the number of records on llm.spend (sum of end offsets).
func (e *collectorEnv) topicCount(t *testing.T) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topics.LLMSpend)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// read consumes the next n events of llm.spend (with their record keys).
func (e *collectorEnv) read(t *testing.T, n int) ([]*schemas.Event, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var evs []*schemas.Event
	var keys []string
	for len(evs) < n {
		fs := e.reader.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d llm.spend events before the deadline", len(evs), n)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch %s: %v", fe.Topic, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := e.codec.Decode(r.Value)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			evs = append(evs, ev)
			keys = append(keys, string(r.Key))
		})
	}
	if len(evs) != n {
		t.Fatalf("read %d llm.spend events, want %d", len(evs), n)
	}
	return evs, keys
}

type cursorRow struct {
	At        time.Time
	RequestID *string
	Processed int64
	Exists    bool
}

func readCursor(t *testing.T, pool *pgxpool.Pool, org string) cursorRow {
	t.Helper()
	var c cursorRow
	err := pool.QueryRow(context.Background(),
		`SELECT last_start_time, last_request_id, records_processed FROM llm_spend_cursors WHERE organization_id = $1`, org).
		Scan(&c.At, &c.RequestID, &c.Processed)
	if err == nil {
		c.Exists = true
	}
	return c
}
