package actionmaterializer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/actionmaterializer"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	*consumerstest.World
	t    *testing.T
	pool *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	w := consumerstest.New(t, consumerstest.Options{Partitions: 4}, actionmaterializer.Group)
	return &env{World: w, t: t, pool: w.Pool()}
}

// run starts the group's runner (group id: id) until the test ends or stop
// is called.
func (e *env) run(id string) (stop func()) {
	return e.StartBatch(actionmaterializer.Group, actionmaterializer.BatchHandler(actionmaterializer.Deps{Pool: e.pool}), consumerstest.FastRetry(id))
}

func ptr(s string) *string { return &s }

func (e *env) auditRecord(org, action, target string) *kgo.Record {
	return e.Record(topics.AuditEvents, org, schemas.New(org, &schemas.AuditEvent{Action: action, ActorType: schemas.AuditActorUser,
		ActorID: ptr(uuid.NewString()), TargetType: "secret", TargetID: target, RequestID: ptr("req-1"),
		DetailsJSON: ptr(`{"key":"STRIPE_KEY"}`)}))
}

func (e *env) invocationRecord(org, inv, status string, by *string) *kgo.Record {
	return e.Record(topics.ActionsInvocations, inv, schemas.New(org, &schemas.ActionInvocation{InvocationID: inv, SessionID: uuid.NewString(),
		Integration: "linear", Action: "create_issue", RiskLevel: schemas.RiskWrite, Mode: schemas.ModeRequireApproval,
		Status: status, ApprovedBy: by}))
}

// rows dumps org's trail, every column, newest first.
func (e *env) rows(org string) []string {
	rs, err := e.pool.Query(context.Background(), `SELECT event_id::text, occurred_at, source, action, actor_type, coalesce(actor_id, ''),
		target_type, target_id, coalesce(request_id, ''), details::text FROM audit_events WHERE org_id = $1 ORDER BY occurred_at DESC, event_id DESC`, org)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id, source, action, actorType, actor, tt, tid, req, details string
		var at time.Time
		if err := rs.Scan(&id, &at, &source, &action, &actorType, &actor, &tt, &tid, &req, &details); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, fmt.Sprint(id, at.UnixMilli(), source, action, actorType, actor, tt, tid, req, details))
	}
	if err := rs.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestRedeliveryAndReplayChangeNothing: audit events and invocation changes
// produced with duplicates materialize once per event id; a second group
// replaying both topics from the start changes no row.
func TestRedeliveryAndReplayChangeNothing(t *testing.T) {
	e := newEnv(t)
	org, approver := uuid.NewString(), uuid.NewString()
	var recs []*kgo.Record
	for i := range 60 {
		recs = append(recs, e.auditRecord(org, "secret.create", fmt.Sprintf("secret-%d", i)))
	}
	for range 20 {
		inv := uuid.NewString()
		recs = append(recs, e.invocationRecord(org, inv, schemas.ActionPending, nil),
			e.invocationRecord(org, inv, schemas.ActionApproved, &approver))
	}
	e.Produce(recs...)
	e.Produce(recs[10:50]...) // redelivered (a producer retry, an outbox relay crash)
	e.run(actionmaterializer.Group.Name)
	e.WaitCaughtUp(actionmaterializer.Group.Name, topics.AuditEvents, topics.ActionsInvocations)
	first := e.rows(org)
	if len(first) != 100 {
		t.Fatalf("%d rows, want 100 (one per event id)", len(first))
	}

	// The API's reader: who approved what.
	approved, err := audit.List(context.Background(), e.pool, org, audit.Filter{Action: "action_invocation.approved"},
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff", 100)
	if err != nil || len(approved) != 20 {
		t.Fatalf("approved = %d, %v", len(approved), err)
	}
	if a := approved[0]; a.ActorType != schemas.AuditActorUser || a.ActorID == nil || *a.ActorID != approver || a.TargetType != "action_invocation" {
		t.Fatalf("approval row = %+v", a)
	}

	e.Produce(recs[:30]...) // redelivered again
	e.run("action-materializer-replay")
	e.WaitCaughtUp("action-materializer-replay", topics.AuditEvents, topics.ActionsInvocations)
	e.WaitCaughtUp(actionmaterializer.Group.Name, topics.AuditEvents, topics.ActionsInvocations)
	if after := e.rows(org); fmt.Sprint(after) != fmt.Sprint(first) {
		t.Fatalf("replay changed rows: %d before, %d after", len(first), len(after))
	}
}

// TestPoisonRecordDeadLettered: records that can never become a row (not
// Avro; an audit event whose org is not a UUID; an event type the trail
// does not take) go to the group's dead-letter topic and the partition
// moves on.
func TestPoisonRecordDeadLettered(t *testing.T) {
	e := newEnv(t)
	org := uuid.NewString()
	garbage := &kgo.Record{Topic: topics.AuditEvents, Key: []byte(org), Value: []byte("not avro")}
	bad := e.Record(topics.AuditEvents, org, schemas.New("not-a-uuid", &schemas.AuditEvent{Action: "secret.create", ActorType: "user"}))
	wrong := e.Record(topics.AuditEvents, org, schemas.New(org, &schemas.LLMSpend{Model: "m"}))
	good := e.auditRecord(org, "secret.delete", "after-the-poison")
	e.Produce(garbage, bad, wrong, good)
	e.run(actionmaterializer.Group.Name)
	testenv.Eventually(t, 30*time.Second, "the good record to apply", func() bool { return len(e.rows(org)) == 1 })
	dl := e.ReadAll(actionmaterializer.Group.DeadLetter(), 3)
	if len(dl) != 3 || string(dl[0].Value) != "not avro" {
		t.Fatalf("dead letters: %d", len(dl))
	}
}

// TestReplayRebuildsTheTrail: `proliferate replay --group
// action-materializer` truncates audit_events (the one table the group
// owns) and rebuilds it from the topics: identical rows.
func TestReplayRebuildsTheTrail(t *testing.T) {
	e := newEnv(t)
	org, approver := uuid.NewString(), uuid.NewString()
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, e.auditRecord(org, "member.role_change", fmt.Sprintf("user-%d", i)))
		inv := uuid.NewString()
		recs = append(recs, e.invocationRecord(org, inv, schemas.ActionDenied, &approver))
	}
	recs = append(recs, &kgo.Record{Topic: topics.AuditEvents, Key: []byte(org), Value: []byte("poison")})
	e.Produce(recs...)
	stop := e.run(actionmaterializer.Group.Name)
	e.WaitCaughtUp(actionmaterializer.Group.Name, topics.AuditEvents, topics.ActionsInvocations)
	stop()
	before := e.rows(org)
	if len(before) != 60 {
		t.Fatalf("%d rows before the replay, want 60", len(before))
	}
	rep, err := consumers.Replay(context.Background(), consumers.ReplayOptions{
		Group: actionmaterializer.Group.Name, Topics: actionmaterializer.Group.Inputs, Tables: actionmaterializer.Group.Owns,
		Pool: e.pool, Kafka: kafka.Options{Seeds: e.Seeds}, Codec: e.Codec,
		BatchHandler: actionmaterializer.BatchHandler(actionmaterializer.Deps{Pool: e.pool}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != 60 || rep.Skipped != 1 {
		t.Fatalf("replay applied %d, skipped %d; want 60 and 1", rep.Applied, rep.Skipped)
	}
	if after := e.rows(org); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("replay changed rows: %d before, %d after", len(before), len(after))
	}
}
