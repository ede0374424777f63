package runartifacts_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/runartifacts"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/blobstore/s3fake"
	"github.com/proliferate/proliferate/internal/outbox/outboxtest"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	t               *testing.T
	pool            *pgxpool.Pool
	codec           *schemas.Codec
	store           blobstore.Store
	logs            *testenv.LogBuffer
	kafka           *consumerstest.World
	org, auto, trig string
	processed       atomic.Int64 // handler calls that returned nil
	attempts        atomic.Int64 // every handler call
}

func newEnv(t *testing.T, store blobstore.Store) *env {
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pool: pool, codec: codec, store: store, logs: &testenv.LogBuffer{}}
	e.org = runstest.Org(t, pool)
	e.auto = runstest.Automation(t, pool, e.org)
	e.trig = runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: e.org, AutomationID: e.auto})
	e.kafka = consumerstest.New(t, consumerstest.Options{Partitions: 2}, runartifacts.Group)
	return e
}

func (e *env) tx(fn func(pgx.Tx) error) {
	e.t.Helper()
	if err := pgx.BeginFunc(context.Background(), e.pool, fn); err != nil {
		e.t.Fatal(err)
	}
}

// run queues a run, stores an enrichment, and moves it to ready, running and
// succeeded through runs.Complete.
func (e *env) run() string {
	e.t.Helper()
	ctx := context.Background()
	var id string
	e.tx(func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, e.codec, runs.Source{OrgID: e.org, TriggerID: e.trig, AutomationID: e.auto, TriggerType: "webhook"},
			runs.Event{Provider: "github", EventType: "issue_opened", OccurredAt: time.Now(), DedupKey: uuid.NewString(), Title: "Crash"})
		id = out.RunID
		return err
	})
	e.move(id, runs.StatusEnriching)
	if _, err := e.pool.Exec(ctx, `UPDATE automation_runs SET enrichment_json = $2 WHERE id = $1`, id,
		`{"version": 1, "summary": {"title": "Crash"}, "relatedFiles": ["a.go"]}`); err != nil {
		e.t.Fatal(err)
	}
	e.move(id, runs.StatusReady)
	e.move(id, runs.StatusRunning)
	e.tx(func(tx pgx.Tx) error {
		_, err := runs.Complete(ctx, tx, e.codec, e.org, "", runs.Completion{RunID: id, CompletionID: "c1",
			Outcome: runs.StatusSucceeded, SummaryMarkdown: "Fixed it", Citations: []string{"https://x/1"}})
		return err
	})
	return id
}

func (e *env) move(runID, to string) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		r, err := runs.Lock(context.Background(), tx, e.org, runID)
		if err != nil {
			return err
		}
		_, err = runs.Apply(context.Background(), tx, e.codec, r, runs.Move{From: []string{r.Status}, To: to})
		return err
	})
}

// publish produces the run's runs.lifecycle outbox rows, as the relay would.
func (e *env) publish(runID string) int {
	e.t.Helper()
	recs := outboxtest.Records(e.t, e.pool, topics.RunsLifecycle, runID)
	e.kafka.Produce(recs...)
	return len(recs)
}

func (e *env) start(group string, maxAttempts int) {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(e.logs, nil))
	h := runartifacts.Handler(runartifacts.Deps{Pool: e.pool, Store: e.store, Log: log})
	counted := func(ctx context.Context, m *consumers.Message) error {
		e.attempts.Add(1)
		err := h(ctx, m)
		if err == nil {
			e.processed.Add(1)
		}
		return err
	}
	e.kafka.Start(runartifacts.Group, counted, consumers.Config{
		Group:  group,
		Codec:  e.codec,
		Retry:  consumers.RetryOptions{MaxAttempts: maxAttempts, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		Logger: log,
	})
}

func (e *env) await(n int64) {
	e.t.Helper()
	testenv.Eventually(e.t, 30*time.Second, "records processed", func() bool { return e.processed.Load() >= n })
}

type state struct {
	EnrichmentRef, CompletionRef *string
	Written                      int
}

func (e *env) state(runID string) state {
	e.t.Helper()
	var s state
	if err := e.pool.QueryRow(context.Background(), `SELECT enrichment_artifact_ref, completion_artifact_ref,
		(SELECT count(*) FROM automation_run_events WHERE run_id = r.id AND type = 'artifact_written')
		FROM automation_runs r WHERE id = $1`, runID).Scan(&s.EnrichmentRef, &s.CompletionRef, &s.Written); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// check asserts both artifacts are stored under their refs with the row's
// JSON.
func (e *env) check(runID string, s state) {
	e.t.Helper()
	if s.EnrichmentRef == nil || s.CompletionRef == nil || s.Written != 2 {
		e.t.Fatalf("state: %+v", s)
	}
	ctx := context.Background()
	enr, err := e.store.Get(ctx, *s.EnrichmentRef)
	if err != nil {
		e.t.Fatal(err)
	}
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(enr, &v); err != nil || v.Version != 1 {
		e.t.Fatalf("enrichment artifact: %s", enr)
	}
	comp, err := e.store.Get(ctx, *s.CompletionRef)
	if err != nil {
		e.t.Fatal(err)
	}
	var c runs.Completion
	if err := json.Unmarshal(comp, &c); err != nil || c.CompletionID != "c1" || c.SummaryMarkdown != "Fixed it" {
		e.t.Fatalf("completion artifact: %s", comp)
	}
}

// With the filesystem store: both artifacts are written and referenced, two
// log rows; a replay of the topic by a fresh group changes nothing.
func TestFilesystemAndReplay(t *testing.T) {
	dir := t.TempDir()
	fs, err := blobstore.Filesystem(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fs)
	run := e.run()
	n := int64(e.publish(run))
	e.start(runartifacts.Group.Name, 3)
	e.await(n)
	s := e.state(run)
	e.check(run, s)
	if *s.EnrichmentRef != "file:runs/"+run+"/enrichment.json" || *s.CompletionRef != "file:runs/"+run+"/completion.json" {
		t.Fatalf("refs: %s %s", *s.EnrichmentRef, *s.CompletionRef)
	}
	path := filepath.Join(dir, "runs", run, "completion.json")
	before, _ := os.Stat(path)

	e.start("run-artifacts-replay", 3)
	e.publish(run) // and a duplicate delivery of every record on top
	e.await(4 * n)
	if after := e.state(run); after.Written != 2 || *after.EnrichmentRef != *s.EnrichmentRef || *after.CompletionRef != *s.CompletionRef {
		t.Fatalf("replay changed state: %+v", after)
	}
	after, _ := os.Stat(path)
	if after.Size() != before.Size() {
		t.Fatal("replay changed the artifact")
	}
}

// With the S3 store (a fake S3 server checking signatures): written and
// referenced; storage failures are retried and then succeed.
func TestS3WithTransientFailures(t *testing.T) {
	fake := s3fake.New(t, "artifacts", "AKTEST", "s3-secret")
	st, err := blobstore.Open(blobstore.Settings{S3Bucket: "artifacts", S3EndpointURL: fake.URL(), S3AccessKey: "AKTEST", S3SecretKey: "s3-secret"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st)
	run := e.run()
	fake.FailNext(2)
	n := int64(e.publish(run))
	e.start(runartifacts.Group.Name, 5)
	e.await(n)
	s := e.state(run)
	e.check(run, s)
	if *s.CompletionRef != "s3://artifacts/runs/"+run+"/completion.json" {
		t.Fatalf("ref %s", *s.CompletionRef)
	}
	if obj, ok := fake.Object("artifacts", "runs/"+run+"/enrichment.json"); !ok || obj.ContentType != "application/json" {
		t.Fatalf("object: %+v %v", obj, ok)
	}
	if e.attempts.Load() < n+2 || !strings.Contains(e.logs.String(), "record failed, retrying") {
		t.Fatalf("failures not retried: attempts %d", e.attempts.Load())
	}
}

// A storage outage longer than the retries dead-letters the record (to be
// replayed later) and writes no ref; a run without enrichment or completion
// writes nothing.
func TestOutageDeadLettersAndEmptyRunsWriteNothing(t *testing.T) {
	fake := s3fake.New(t, "artifacts", "AK", "SK")
	st, err := blobstore.Open(blobstore.Settings{S3Bucket: "artifacts", S3EndpointURL: fake.URL(), S3AccessKey: "AK", S3SecretKey: "SK"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st)
	ctx := context.Background()
	var early string
	e.tx(func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, e.codec, runs.Source{OrgID: e.org, TriggerID: e.trig, AutomationID: e.auto, TriggerType: "webhook"},
			runs.Event{Provider: "github", EventType: "x", OccurredAt: time.Now(), DedupKey: uuid.NewString(), Title: "T"})
		early = out.RunID
		return err
	})
	e.move(early, runs.StatusFailed) // queued → failed: no enrichment, no completion
	e.start(runartifacts.Group.Name, 2)
	e.await(int64(e.publish(early)))
	if s := e.state(early); s.EnrichmentRef != nil || s.CompletionRef != nil || s.Written != 0 || fake.Puts() != 0 {
		t.Fatalf("empty run: %+v, %d puts", s, fake.Puts())
	}

	run := e.run()
	fake.FailNext(1000)
	e.publish(run)
	testenv.Eventually(t, 30*time.Second, "dead letters", func() bool {
		return strings.Count(e.logs.String(), "record dead-lettered") == 2 // ready and succeeded
	})
	if s := e.state(run); s.EnrichmentRef != nil || s.CompletionRef != nil || s.Written != 0 {
		t.Fatalf("state after outage: %+v", s)
	}
}
