package billingledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/billingledger"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

const (
	childEnv      = "BILLINGLEDGER_CRASH_CHILD"
	childSeedsEnv = "BILLINGLEDGER_CRASH_SEEDS"
	childDBEnv    = "BILLINGLEDGER_CRASH_DATABASE_URL"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild() // never returns
	}
	testenv.Main(m)
}

// deliveriesSchema counts the usages each consumer process applied (after
// the ledger transaction committed): the test's proof that the killed
// consumers' work was really delivered again.
const deliveriesSchema = `CREATE TABLE IF NOT EXISTS billingledger_test_deliveries (n bigint NOT NULL)`

// crashChild is one billing-ledger consumer process: the real runner in
// batch mode with the real ledger, until the parent kills it with SIGKILL
// (no shutdown, no final commit; offsets committed by the interval before
// the kill stay committed, the rest is replayed by the next process).
func crashChild() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "billing ledger child:", err)
		os.Exit(3)
	}
	pool, err := db.Open(ctx, os.Getenv(childDBEnv), 10)
	if err != nil {
		fail(err)
	}
	codec, err := schemas.NewCodec()
	if err != nil {
		fail(err)
	}
	cfg, err := consumers.ForGroup(billingledger.Group, consumers.Config{
		Codec:        codec,
		BatchHandler: countingHandler(pool, codec),
		// Smaller batches than the default: the killed processes reach
		// their random kill points sooner (the batch logic is the same).
		MaxBatch:       250,
		CommitInterval: 200 * time.Millisecond,
		Kafka:          kafka.Options{Seeds: strings.Split(os.Getenv(childSeedsEnv), ",")},
		// Static membership, as pods with stable names have: a restarted
		// process takes over the killed member's place (and partitions) at
		// once instead of waiting for its session to expire. A short
		// session still lets the final runner, a new member, in quickly.
		ClientOpts: []kgo.Opt{kgo.InstanceID("billing-ledger-0"),
			kgo.SessionTimeout(250 * time.Millisecond), kgo.HeartbeatInterval(50 * time.Millisecond)},
		Metrics: consumers.NewMetrics(prometheus.NewRegistry()),
		Retry:   consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	})
	if err != nil {
		fail(err)
	}
	r, err := consumers.New(cfg)
	if err != nil {
		fail(err)
	}
	_ = r.Run(ctx)
	os.Exit(4)
}

// countingHandler is the billing-ledger handler that also counts the
// usages it applied in billingledger_test_deliveries.
func countingHandler(pool *pgxpool.Pool, codec *schemas.Codec) consumers.BatchHandler {
	h := billingledger.BatchHandler(billingledger.Deps{Ledger: &billing.Ledger{Pool: pool, Codec: codec}})
	return func(ctx context.Context, msgs []*consumers.Message) error {
		if err := h(ctx, msgs); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `INSERT INTO billingledger_test_deliveries VALUES ($1)`, len(msgs))
		return err
	}
}

const (
	orgCount       = 50
	sessionsPerOrg = 4
	eventCount     = 100_000
	dupRate        = 0.05
	kills          = 20
	partitions     = 8
	startCredits   = 10_000_000 // per org: far above what the test spends, so no state changes
)

// usageSet is the produced data and what the ledger must end with.
type usageSet struct {
	orgs     []string
	sessions map[string][]string // org → sessions
	records  []*kgo.Record       // including the re-produced duplicates
	distinct int
	// expected totals (micros) over distinct keys
	orgCredits  map[string]int64
	sessCredits map[string]int64
	sessCompute map[string]int64 // compute quantity micros × 60 (= seconds in micros)
	sessLLM     map[string]int64
	sessThrough map[string]time.Time
}

func makeUsage(t *testing.T, pool *pgxpool.Pool, codec *schemas.Codec, rng *rand.Rand, orgCount, eventCount int) *usageSet {
	t.Helper()
	ctx := context.Background()
	s := &usageSet{sessions: map[string][]string{}, orgCredits: map[string]int64{}, sessCredits: map[string]int64{},
		sessCompute: map[string]int64{}, sessLLM: map[string]int64{}, sessThrough: map[string]time.Time{}}
	for range orgCount {
		id := uuid.NewString()
		if _, err := pool.Exec(ctx, `INSERT INTO organizations (id, name, slug, billing_state, billing_plan, shadow_balance)
			VALUES ($1, 'Ledger test', $3, 'active', 'pro', $2)`, id, startCredits, "ledger-"+id); err != nil {
			t.Fatal(err)
		}
		s.orgs = append(s.orgs, id)
		for range sessionsPerOrg {
			s.sessions[id] = append(s.sessions[id], uuid.NewString())
		}
	}
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range eventCount {
		org := s.orgs[rng.IntN(orgCount)]
		sess := s.sessions[org][rng.IntN(sessionsPerOrg)]
		from := base.Add(time.Duration(i) * time.Second)
		to := from.Add(time.Duration(10+rng.IntN(50)) * time.Second)
		u := &schemas.BillingUsage{CreditsMicros: 1 + rng.Int64N(5_000_000), SessionID: &sess, PeriodFrom: from, PeriodTo: to}
		if rng.IntN(2) == 0 {
			u.Kind, u.Unit = schemas.UsageCompute, schemas.UnitMinute
			u.QuantityMicros = to.Sub(from).Microseconds() / 60
			u.IdempotencyKey = fmt.Sprintf("compute:%s:%d:%d", sess, from.UnixMilli(), to.UnixMilli())
			s.sessCompute[sess] += u.QuantityMicros * 60
		} else {
			req := fmt.Sprintf("req-%d-%d", i, rng.Int64())
			model := "claude-sonnet"
			u.Kind, u.Unit, u.RequestID, u.Model = schemas.UsageLLM, schemas.UnitUSD, &req, &model
			u.QuantityMicros = 1 + rng.Int64N(2_000_000)
			u.IdempotencyKey = "llm:" + req
			s.sessLLM[sess] += u.QuantityMicros
		}
		s.orgCredits[org] += u.CreditsMicros
		s.sessCredits[sess] += u.CreditsMicros
		if to.After(s.sessThrough[sess]) {
			s.sessThrough[sess] = to
		}
		rec, err := kafka.EventRecord(codec, topics.BillingUsage, org, schemas.New(org, u))
		if err != nil {
			t.Fatal(err)
		}
		s.records = append(s.records, rec)
		s.distinct++
		// Re-produce ~5% of the keys: half right away (usually the same
		// batch), half an earlier one (another batch, often already
		// committed).
		if rng.Float64() < dupRate {
			dup := rec
			if rng.IntN(2) == 0 {
				dup = s.records[rng.IntN(len(s.records))]
			}
			s.records = append(s.records, &kgo.Record{Topic: dup.Topic, Key: dup.Key, Value: dup.Value, Headers: dup.Headers})
		}
	}
	return s
}

func produceAll(t *testing.T, k *consumerstest.World, recs []*kgo.Record) {
	t.Helper()
	// Uncompressed: lz4 under the race detector would dominate the setup.
	cl := k.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := 0; i < len(recs); i += 10_000 {
		if err := cl.ProduceSync(context.Background(), recs[i:min(i+10_000, len(recs))]...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// runToCompletion runs an in-process runner of the billing-ledger group
// (under group id id) until it committed every record of billing.usage,
// then shuts it down.
func runToCompletion(t *testing.T, k *consumerstest.World, pool *pgxpool.Pool, id string, total int64) {
	t.Helper()
	stop := k.StartBatch(billingledger.Group, countingHandler(pool, k.Codec), consumers.Config{
		Group:          id,
		CommitInterval: 100 * time.Millisecond,
	})
	defer stop()
	testenv.Eventually(t, 120*time.Second, id+" to commit every record", func() bool {
		return k.Committed(id, topics.BillingUsage) == total
	})
}

// ledgerSnapshot is everything the ledger wrote for the test's orgs.
type ledgerSnapshot struct {
	balances                      map[string]int64
	states                        map[string]string
	keys, events, distinctEvents  int64
	sessions                      map[string][4]int64 // credits, compute seconds, llm usd (micros), billed through (ms)
	reconciliations, outboxEvents int64
}

func snapshot(t *testing.T, pool *pgxpool.Pool, orgs []string) ledgerSnapshot {
	t.Helper()
	ctx := context.Background()
	s := ledgerSnapshot{balances: map[string]int64{}, states: map[string]string{}, sessions: map[string][4]int64{}}
	rows, err := pool.Query(ctx, `SELECT id::text, (shadow_balance * 1000000)::bigint, billing_state FROM organizations WHERE id = ANY($1::uuid[])`, orgs)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, state string
		var bal int64
		if err := rows.Scan(&id, &bal, &state); err != nil {
			t.Fatal(err)
		}
		s.balances[id], s.states[id] = bal, state
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM billing_event_keys WHERE org_id = ANY($1::uuid[])),
			(SELECT count(*) FROM billing_events WHERE organization_id = ANY($1::uuid[])),
			(SELECT count(DISTINCT idempotency_key) FROM billing_events WHERE organization_id = ANY($1::uuid[])),
			(SELECT count(*) FROM billing_reconciliations WHERE organization_id = ANY($1::uuid[])),
			(SELECT count(*) FROM outbox WHERE topic = $2 AND key = ANY($3::text[]))`, orgs, topics.BillingState, orgs).
		Scan(&s.keys, &s.events, &s.distinctEvents, &s.reconciliations, &s.outboxEvents); err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `SELECT session_id::text, (credits * 1000000)::bigint, (compute_seconds * 1000000)::bigint,
			(llm_cost_usd * 1000000)::bigint, (extract(epoch FROM billed_through_at) * 1000)::bigint
		FROM session_billing WHERE organization_id = ANY($1::uuid[])`, orgs)
	if err != nil {
		t.Fatal(err)
	}
	var sess string
	var v [4]int64
	if _, err := pgx.ForEachRow(rows, []any{&sess, &v[0], &v[1], &v[2], &v[3]}, func() error {
		s.sessions[sess] = v
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// 100,000 usage events of 50 organizations, ~5% of the keys produced
// twice, applied by billing-ledger consumer processes that are SIGKILLed at
// random points 20 times (each restart replays what the previous one did
// not commit), then run to completion: every balance is exactly its start
// minus the credits of its distinct keys, every key is stored once, the
// per-session totals are exact, nothing is dead-lettered.
func TestCrashesAndDuplicatesApplyEveryKeyOnce(t *testing.T) {
	k := consumerstest.New(t, consumerstest.Options{Partitions: partitions}, billingledger.Group)
	pool, codec := k.Pool(), k.Codec
	ctx := context.Background()
	if _, err := pool.Exec(ctx, deliveriesSchema+`; TRUNCATE billingledger_test_deliveries`); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	began := time.Now()
	data := makeUsage(t, pool, codec, rng, orgCount, eventCount)
	produceAll(t, k, data.records)
	total := int64(len(data.records))
	t.Logf("produced in %s: %d records: %d distinct keys, %d duplicates", time.Since(began).Round(time.Millisecond), total, data.distinct, total-int64(data.distinct))

	deliveries := func() (n int64) {
		if err := pool.QueryRow(ctx, `SELECT COALESCE(sum(n), 0)::bigint FROM billingledger_test_deliveries`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	began = time.Now()
	for kill := range kills {
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), childEnv+"=1", childSeedsEnv+"="+strings.Join(k.Seeds, ","), childDBEnv+"="+testenv.DatabaseURL(t))
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = child.Wait(); close(exited) }()
		from, step := deliveries(), int64(1+rng.IntN(1500))
		testenv.Eventually(t, 60*time.Second, fmt.Sprintf("consumer %d to apply %d usages", kill+1, step), func() bool {
			select {
			case <-exited:
				t.Fatalf("consumer %d exited by itself", kill+1)
			default:
			}
			return deliveries() >= from+step
		})
		if err := child.Process.Kill(); err != nil { // SIGKILL: mid-batch, no shutdown, no final commit
			t.Fatal(err)
		}
		<-exited
	}
	committedAtLastKill := k.Committed(billingledger.Group.Name, topics.BillingUsage)
	t.Logf("after %d kills (%s): %d usages delivered, %d offsets committed", kills, time.Since(began).Round(time.Millisecond), deliveries(), committedAtLastKill)
	if committedAtLastKill >= total {
		t.Fatal("the killed consumers finished everything: the test must kill them before the end")
	}

	began = time.Now()
	runToCompletion(t, k, pool, billingledger.Group.Name, total)
	t.Logf("run to completion in %s", time.Since(began).Round(time.Millisecond))
	verifyLedger(t, k, pool, data, 0)
	// The kills really interrupted work: usages applied by a process that
	// died before committing them were delivered again.
	all := deliveries()
	if all <= total {
		t.Errorf("%d usages delivered for %d records: nothing was replayed, the test proved nothing", all, total)
	}
	t.Logf("%d usages delivered for %d records: %d replayed after kills, applied once", all, total, all-total)
}

// verifyLedger checks the ledger against data: exact balances, every key
// stored once, exact per-session totals, no state change, deadLetters
// dead-lettered records. It returns the ledger's snapshot.
func verifyLedger(t *testing.T, k *consumerstest.World, pool *pgxpool.Pool, data *usageSet, deadLetters int64) ledgerSnapshot {
	t.Helper()
	got := snapshot(t, pool, data.orgs)
	for _, org := range data.orgs {
		if want := int64(startCredits)*billing.Micros - data.orgCredits[org]; got.balances[org] != want {
			t.Errorf("org %s: balance %d micros, want %d (off by %d)", org, got.balances[org], want, got.balances[org]-want)
		}
		if got.states[org] != billing.StateActive {
			t.Errorf("org %s ended in state %s, want active", org, got.states[org])
		}
	}
	d := int64(data.distinct)
	if got.keys != d || got.events != d || got.distinctEvents != d {
		t.Errorf("%d keys, %d billing events (%d distinct keys) for %d distinct usages", got.keys, got.events, got.distinctEvents, d)
	}
	if len(got.sessions) != len(data.orgs)*sessionsPerOrg {
		t.Errorf("%d session_billing rows, want %d", len(got.sessions), len(data.orgs)*sessionsPerOrg)
	}
	for sess, v := range got.sessions {
		want := [4]int64{data.sessCredits[sess], data.sessCompute[sess], data.sessLLM[sess], data.sessThrough[sess].UnixMilli()}
		if v != want {
			t.Errorf("session %s: credits/compute/llm/through %v, want %v", sess, v, want)
		}
	}
	if got.reconciliations != 0 || got.outboxEvents != 0 {
		t.Errorf("%d reconciliations and %d billing.state events: usage alone must not change state here", got.reconciliations, got.outboxEvents)
	}
	if dl := k.EndOffsets(billingledger.Group.DeadLetter()); dl != deadLetters {
		t.Errorf("%d records were dead-lettered, want %d", dl, deadLetters)
	}
	return got
}

// A fresh consumer group reading billing.usage from offset 0 (a new
// deployment, an operator's replay) changes nothing: balances, ledger rows,
// session totals and audit rows stay identical.
func TestReplayFromOffsetZeroChangesNothing(t *testing.T) {
	k := consumerstest.New(t, consumerstest.Options{Partitions: partitions}, billingledger.Group)
	pool, codec := k.Pool(), k.Codec
	ctx := context.Background()
	if _, err := pool.Exec(ctx, deliveriesSchema); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	data := makeUsage(t, pool, codec, rng, 10, 10_000)
	produceAll(t, k, data.records)
	total := int64(len(data.records))

	runToCompletion(t, k, pool, billingledger.Group.Name, total)
	before := verifyLedger(t, k, pool, data, 0)
	if t.Failed() {
		return
	}
	runToCompletion(t, k, pool, "billing-ledger-replay", total)
	if after := snapshot(t, pool, data.orgs); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("replaying billing.usage changed the ledger:\nbefore %v\nafter  %v", before, after)
	}
}

// An invalid usage and a usage of a deleted organization can never apply:
// each is dead-lettered as permanent after one attempt, while the rest of
// their batch applies once (no retries, no re-application of the others).
func TestInvalidUsageAndDeletedOrgAreDeadLettered(t *testing.T) {
	k := consumerstest.New(t, consumerstest.Options{}, billingledger.Group)
	pool, codec := k.Pool(), k.Codec
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	dlq := billingledger.Group.DeadLetter()
	data := makeUsage(t, pool, codec, rng, 2, 400)
	org := data.orgs[0]
	bad := func(orgID, key string, credits int64) *kgo.Record {
		rec, err := kafka.EventRecord(codec, topics.BillingUsage, orgID, schemas.New(orgID, &schemas.BillingUsage{
			IdempotencyKey: key, Kind: schemas.UsageLLM, Unit: schemas.UnitUSD, QuantityMicros: 1, CreditsMicros: credits}))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// One partition: the bad records sit in the middle of the good ones' batch.
	recs := append([]*kgo.Record{}, data.records[:150]...)
	recs = append(recs, bad(org, "llm:negative", -5), bad(uuid.NewString(), "llm:deleted-org", 7))
	recs = append(recs, data.records[150:]...)
	produceAll(t, k, recs)

	runToCompletion(t, k, pool, billingledger.Group.Name, int64(len(recs)))
	verifyLedger(t, k, pool, data, 2) // the good records all applied, exactly
	dls := k.ReadAll(dlq, 2)
	want := []string{"llm:negative", "llm:deleted-org"}
	for i, dl := range dls {
		ev, err := codec.Decode(dl.Value)
		if err != nil {
			t.Fatal(err)
		}
		if k := ev.Payload.(*schemas.BillingUsage).IdempotencyKey; k != want[i] {
			t.Errorf("dead letter %d is %s, want %s", i, k, want[i])
		}
		p, _ := consumers.Header(dl, consumers.HeaderDLQPermanent)
		a, _ := consumers.Header(dl, consumers.HeaderDLQAttempts)
		if p != "true" || a != "1" {
			t.Errorf("dead letter %s: permanent %s after %s attempts, want true after 1", want[i], p, a)
		}
	}
	var keys int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM billing_event_keys WHERE idempotency_key = ANY($1)`, want).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 0 {
		t.Fatalf("%d of the bad usages were stored", keys)
	}
}
