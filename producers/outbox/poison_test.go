package outbox_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/testenv"
	outboxrelay "github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/topics"
)

// 10,000 rows with poison in the middle: a row over the size limit, a row
// whose headers are not strings, a row for a topic the cluster does not have.
// Every good row is published exactly once and in per-key order, the poison
// rows are set aside with their errors, and readiness degrades while a row is
// older than the limit and recovers once the relay moved on.
func TestPoisonRowsAreSetAsideAndTheRestFlowsOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	seeds := testenv.Kafka(t, kfake.SeedTopics(6, "good.events"))
	ctx := context.Background()

	const n = 10_000
	poison := map[int]string{
		2_500: "oversized",
		5_000: "unencodable",
		7_500: "unknown topic",
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var msgs []outbox.Message
		flush := func() error {
			err := outbox.Add(ctx, tx, msgs...)
			msgs = msgs[:0]
			return err
		}
		for i := range n {
			if kind, ok := poison[i]; ok {
				if err := flush(); err != nil {
					return err
				}
				// Written as rows from before the size check would be.
				topic, value, headers := "good.events", []byte("poison"), `{"event_type":"x"}`
				switch kind {
				case "oversized":
					value = make([]byte, topics.BrokerMaxRecordBytes+1)
				case "unencodable":
					headers = `{"event_type": {"nested": true}}`
				case "unknown topic":
					topic = "missing.events"
				}
				if _, err := tx.Exec(ctx, `INSERT INTO outbox (topic, key, value, headers) VALUES ($1, 'k1', $2, $3::jsonb)`,
					topic, value, headers); err != nil {
					return err
				}
			}
			msgs = append(msgs, outbox.Message{Topic: "good.events", Key: "k" + strconv.Itoa(i%50), Value: []byte("e" + strconv.Itoa(i))})
		}
		if err := flush(); err != nil {
			return err
		}
		// The rows are old: the relay is behind by an hour.
		_, err := tx.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '1 hour'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	relay := outboxrelay.NewRelay(pool, cl, outboxrelay.RelayOptions{BatchSize: 500, PollInterval: 50 * time.Millisecond, MaxPendingAge: time.Minute})
	if err := relay.Ready(ctx); err == nil || !strings.Contains(err.Error(), "oldest pending outbox row") {
		t.Fatalf("Ready with hour-old pending rows = %v, want the age error", err)
	}
	runRelay(t, relay)

	testenv.Eventually(t, 90*time.Second, "the outbox drained", func() bool { return pending(t, pool) == 0 })
	got := collect(t, seeds, "good.events", n)
	if dups := got.total - len(got.count); dups != 0 {
		for v, c := range got.count {
			if c > 1 {
				t.Logf("%s seen %d times", v, c)
			}
		}
		t.Fatalf("%d duplicates: rows the broker acknowledged were published again", dups)
	}
	if got.count["poison"] != 0 {
		t.Fatal("a poison row reached the topic")
	}
	for key, seq := range got.perKey {
		for i := 1; i < len(seq); i++ {
			if seq[i] < seq[i-1] {
				t.Fatalf("key %s out of order: e%d after e%d", key, seq[i], seq[i-1])
			}
		}
	}
	if err := relay.Ready(ctx); err != nil {
		t.Fatalf("Ready after draining = %v", err)
	}

	dead, err := outbox.ListDeadLetters(ctx, pool, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	wantErr := []string{"over the topic's limit", "headers are not a JSON object of strings", "UNKNOWN_TOPIC_OR_PARTITION"}
	if len(dead) != len(wantErr) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dead), len(wantErr), dead)
	}
	for i, d := range dead {
		if !strings.Contains(d.Error, wantErr[i]) {
			t.Errorf("dead letter %d (%s) error %q, want it to mention %q", d.ID, d.Topic, d.Error, wantErr[i])
		}
	}
	st, err := outbox.ReadStatus(ctx, pool)
	if err != nil || st.Pending != 0 || st.DeadLetters != 3 {
		t.Fatalf("status = %+v, %v; want nothing pending and 3 dead letters", st, err)
	}
}

// An operator retries a dead letter (it goes back behind every pending row and
// is published once its cause is gone) and discards another; ids that are not
// set aside are refused and change nothing.
func TestDeadLettersRetryAndDiscard(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	seeds := testenv.Kafka(t, kfake.SeedTopics(1, "late.events"), kfake.SeedTopics(1, "other.events"))
	ctx := context.Background()
	// Both rows name topics the cluster does not have; one will appear.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (topic, key, value) VALUES
		('late.events.v2', 'k', 'retry-me'), ('gone.events', 'k', 'discard-me')`); err != nil {
		t.Fatal(err)
	}
	relay := newRelay(t, pool, seeds, 10)
	for pending(t, pool) > 0 {
		if _, err := relay.PublishBatch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := outbox.ListDeadLetters(ctx, pool, 0, 10)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	full, err := outbox.GetDeadLetter(ctx, pool, dead[0].ID)
	if err != nil || string(full.Value) != "retry-me" {
		t.Fatalf("GetDeadLetter = %+v, %v", full, err)
	}

	if _, err := outbox.RetryDeadLetters(ctx, pool, []int64{dead[0].ID, 999_999_999}); !errors.Is(err, outbox.ErrNoDeadLetter) {
		t.Fatalf("retry with an unknown id = %v, want ErrNoDeadLetter", err)
	}
	if _, err := outbox.DiscardDeadLetters(ctx, pool, []int64{dead[1].ID, 999_999_999}); !errors.Is(err, outbox.ErrNoDeadLetter) {
		t.Fatalf("discard with an unknown id = %v, want ErrNoDeadLetter", err)
	}
	if again, _ := outbox.ListDeadLetters(ctx, pool, 0, 10); len(again) != 2 {
		t.Fatalf("a refused retry or discard changed the dead letters: %+v", again)
	}

	// The missing topic appears (an operator ran `topics ensure`); retry.
	if _, err := pool.Exec(ctx, `UPDATE outbox_dead_letters SET topic = 'late.events' WHERE id = $1`, dead[0].ID); err != nil {
		t.Fatal(err)
	}
	ids, err := outbox.RetryDeadLetters(ctx, pool, []int64{dead[0].ID})
	if err != nil || len(ids) != 1 || ids[0] <= dead[1].ID {
		t.Fatalf("retry = %v, %v; want one new id behind the others", ids, err)
	}
	if n, err := outbox.DiscardDeadLetters(ctx, pool, []int64{dead[1].ID}); err != nil || n != 1 {
		t.Fatalf("discard = %d, %v", n, err)
	}
	if n, err := relay.PublishBatch(ctx); err != nil || n != 1 {
		t.Fatalf("publishing the retried row = %d, %v", n, err)
	}
	got := collect(t, seeds, "late.events", 1)
	if got.count["retry-me"] != 1 {
		t.Fatalf("retried row published %d times", got.count["retry-me"])
	}
	st, err := outbox.ReadStatus(ctx, pool)
	if err != nil || st.Pending != 0 || st.DeadLetters != 0 {
		t.Fatalf("status = %+v, %v", st, err)
	}
}

// A broker whose topic limit is below the catalog's refuses a whole batch for
// one large record: the records that only shared its batch are published
// alone, once each, and only the large one is set aside.
func TestBrokerRefusalSetsAsideOnlyTheCulprit(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	seeds := testenv.Kafka(t)
	ctx := context.Background()
	admCl, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	limit := "20000"
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "small.events"); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 100_000)
	if _, err := rand.Read(big); err != nil { // incompressible
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var msgs []outbox.Message
		for i := range 40 {
			if i == 20 {
				msgs = append(msgs, outbox.Message{Topic: "small.events", Key: "k", Value: big})
			}
			msgs = append(msgs, outbox.Message{Topic: "small.events", Key: "k", Value: []byte("e" + strconv.Itoa(i))})
		}
		return outbox.Add(ctx, tx, msgs...)
	})
	if err != nil {
		t.Fatal(err)
	}
	relay := newRelay(t, pool, seeds, 100)
	if n, err := relay.PublishBatch(ctx); err != nil || n != 41 {
		t.Fatalf("PublishBatch = %d, %v; want all 41 rows settled", n, err)
	}
	got := collect(t, seeds, "small.events", 40)
	if dups := got.total - len(got.count); dups != 0 || len(got.count) != 40 {
		t.Fatalf("%d distinct records, %d duplicates; want 40 and none", len(got.count), dups)
	}
	dead, err := outbox.ListDeadLetters(ctx, pool, 0, 10)
	if err != nil || len(dead) != 1 || dead[0].Size != len(big)+1 || !strings.Contains(dead[0].Error, "MESSAGE_TOO_LARGE") {
		t.Fatalf("dead letters = %+v, %v; want only the large record, MESSAGE_TOO_LARGE", dead, err)
	}
}
