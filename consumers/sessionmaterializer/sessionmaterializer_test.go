package sessionmaterializer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	*consumerstest.World
	t    *testing.T
	pool *pgxpool.Pool
	orgs []string
}

func newEnv(t *testing.T) *env {
	w := consumerstest.New(t, consumerstest.Options{Partitions: 4}, sessionmaterializer.Group)
	return &env{World: w, t: t, pool: w.Pool()}
}

// run starts the group's runner (group id: id) until the test ends.
func (e *env) run(id string) {
	e.StartBatch(sessionmaterializer.Group, sessionmaterializer.BatchHandler(sessionmaterializer.Deps{Pool: e.pool}), consumerstest.FastRetry(id))
}

func (e *env) record(org, session, kind, text string, seq int) *kgo.Record {
	p := &schemas.SessionTranscript{SessionID: session, Kind: kind}
	if text != "" {
		p.Text = &text
	}
	if kind == schemas.TranscriptToolCallKind {
		p.Tool = &schemas.TranscriptToolCall{ToolCallID: fmt.Sprintf("call_%d", seq), Name: "bash", Status: "completed",
			InputJSON: `{"command":"ls"}`, Output: "README.md", DurationMs: int64(seq)}
	}
	return e.Record(topics.SessionsTranscript, session, schemas.New(org, p))
}

type row struct {
	seq                  int64
	event, session, kind string
	text                 string
	toolName, toolInput  string
	duration             int64
}

func (e *env) rows() []row {
	rs, err := e.pool.Query(context.Background(), `SELECT seq, event_id::text, session_id::text, kind, coalesce(text, ''), coalesce(tool_name, ''), coalesce(tool_input, ''), coalesce(duration_ms, -1)
		FROM session_messages WHERE org_id = ANY($1) ORDER BY seq`, e.orgs)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.seq, &r.event, &r.session, &r.kind, &r.text, &r.toolName, &r.toolInput, &r.duration); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestReplayAndDuplicatesChangeNothing: a transcript produced with
// duplicates (the same records produced again, as after a producer retry
// or an outbox relay crash) materializes each event once, in the order
// produced per session; a second group replaying the topic from the start
// changes no row, not even its position.
func TestReplayAndDuplicatesChangeNothing(t *testing.T) {
	e := newEnv(t)
	org := uuid.NewString()
	e.orgs = []string{org}
	sessions := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	var recs []*kgo.Record
	want := map[string][]string{} // session → event ids in order
	kinds := []string{schemas.TranscriptUserMessage, schemas.TranscriptAgentMessage, schemas.TranscriptToolCallKind, schemas.TranscriptStatus}
	for i := range 300 {
		s := sessions[i%len(sessions)]
		r := e.record(org, s, kinds[i%len(kinds)], fmt.Sprintf("entry %d of %s", i, s[:8]), i)
		recs = append(recs, r)
		want[s] = append(want[s], string(r.Headers[1].Value))
	}
	e.Produce(recs...)
	e.Produce(recs[100:200]...) // duplicates, later in the partitions
	e.run(sessionmaterializer.Group.Name)
	testenv.Eventually(t, 30*time.Second, "the group to commit everything", func() bool {
		return e.CaughtUp(sessionmaterializer.Group.Name, topics.SessionsTranscript)
	})
	first := e.rows()
	if len(first) != 300 {
		t.Fatalf("%d rows, want 300 (one per event id)", len(first))
	}
	got := map[string][]string{}
	for _, r := range first {
		got[r.session] = append(got[r.session], r.event)
	}
	for _, s := range sessions {
		if fmt.Sprint(got[s]) != fmt.Sprint(want[s]) {
			t.Fatalf("session %s: rows not in produced order", s)
		}
	}
	// The API's reader pages them in the same order.
	page, err := transcript.List(context.Background(), e.pool, org, sessions[0], "", 1000)
	if err != nil || len(page) != 100 {
		t.Fatalf("List = %d messages, %v", len(page), err)
	}
	if page[2].Tool == nil || page[2].Tool.Name != "bash" || string(page[2].Tool.Input) != `{"command":"ls"}` {
		t.Fatalf("tool call row = %+v", page[2])
	}

	e.Produce(recs[:50]...) // redelivered again
	e.run("session-materializer-replay")
	testenv.Eventually(t, 30*time.Second, "the replaying group to commit everything", func() bool {
		return e.CaughtUp("session-materializer-replay", topics.SessionsTranscript) &&
			e.CaughtUp(sessionmaterializer.Group.Name, topics.SessionsTranscript)
	})
	if after := e.rows(); fmt.Sprint(after) != fmt.Sprint(first) {
		t.Fatalf("replay changed rows: %d before, %d after", len(first), len(after))
	}
}

// TestPoisonRecordDeadLettered: a record that can never apply (not Avro;
// a transcript event whose ids are not UUIDs) goes to the group's
// dead-letter topic and the partition moves on.
func TestPoisonRecordDeadLettered(t *testing.T) {
	e := newEnv(t)
	org, sess := uuid.NewString(), uuid.NewString()
	e.orgs = []string{org}
	bad := e.record(org, "not-a-uuid", schemas.TranscriptUserMessage, "x", 0)
	bad.Key = []byte(sess) // same partition as the good ones
	garbage := &kgo.Record{Topic: topics.SessionsTranscript, Key: []byte(sess), Value: []byte("not avro")}
	good := e.record(org, sess, schemas.TranscriptUserMessage, "after the poison", 1)
	e.Produce(garbage, bad, good)
	e.run(sessionmaterializer.Group.Name)
	testenv.Eventually(t, 30*time.Second, "the good record to apply", func() bool { return len(e.rows()) == 1 })
	dl := e.ReadAll(sessionmaterializer.Group.DeadLetter(), 2)
	if len(dl) != 2 || string(dl[0].Value) != "not avro" {
		t.Fatalf("dead letters: %d", len(dl))
	}
}

// TestDeletedSessionHistoryGone: a session's deleted event removes its
// rows, and replaying its transcript afterwards brings nothing back.
func TestDeletedSessionHistoryGone(t *testing.T) {
	e := newEnv(t)
	org, sess, other := uuid.NewString(), uuid.NewString(), uuid.NewString()
	e.orgs = []string{org}
	a := e.record(org, sess, schemas.TranscriptUserMessage, "to be deleted", 0)
	b := e.record(org, other, schemas.TranscriptUserMessage, "kept", 1)
	e.Produce(a, b)
	e.run(sessionmaterializer.Group.Name)
	testenv.Eventually(t, 30*time.Second, "two rows", func() bool { return len(e.rows()) == 2 })
	del := e.Record(topics.SessionsEvents, sess, schemas.New(org, &schemas.SessionEvent{SessionID: sess, Kind: schemas.SessionKindDeleted}))
	e.Produce(del)
	testenv.Eventually(t, 30*time.Second, "the deleted session's row to go", func() bool { return len(e.rows()) == 1 })
	e.Produce(a) // replayed after the deletion
	testenv.Eventually(t, 30*time.Second, "the group to commit everything", func() bool {
		return e.CaughtUp(sessionmaterializer.Group.Name, topics.SessionsTranscript)
	})
	if rows := e.rows(); len(rows) != 1 || rows[0].session != other {
		t.Fatalf("rows after replay: %+v", rows)
	}
}
