package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/notifier"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// TestReplayRebuildsSessionHistory: the session-materializer builds the
// history, the table is damaged, `proliferate replay` (App.Replay) rebuilds
// it from the topics with identical rows (and tombstones), commits the
// replayed point so the restarted group continues after it (the poison
// record is not dead-lettered twice), and refuses while the group runs.
func TestReplayRebuildsSessionHistory(t *testing.T) {
	group := sessionmaterializer.Group.Name
	k := consumerstest.New(t, consumerstest.Options{Partitions: 4}, sessionmaterializer.Group)
	a := app.New(devConfig(t, filepath.Join(t.TempDir(), "kafka")), obs.NewLogger(io.Discard, "error", "text"))
	a.SetSeeds(k.Seeds)
	t.Cleanup(a.Close)
	ctx := context.Background()
	if err := a.OpenPostgres(ctx); err != nil {
		t.Fatal(err)
	}
	org := uuid.NewString()
	transcriptRec := func(session, kind, text string, i int) *kgo.Record {
		p := &schemas.SessionTranscript{SessionID: session, Kind: kind, Text: &text}
		if kind == schemas.TranscriptToolCallKind {
			p.Text = nil
			p.Tool = &schemas.TranscriptToolCall{ToolCallID: fmt.Sprintf("call_%d", i), Name: "bash", Status: "completed",
				InputJSON: `{"command":"go test ./..."}`, Output: "ok", DurationMs: int64(10 * i)}
		}
		return k.Record(topics.SessionsTranscript, session, schemas.New(org, p))
	}
	sessions := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	var recs []*kgo.Record
	for i := range 30 {
		s := sessions[i%len(sessions)]
		kind := []string{schemas.TranscriptUserMessage, schemas.TranscriptAgentMessage, schemas.TranscriptToolCallKind}[(i/3)%3]
		recs = append(recs, transcriptRec(s, kind, fmt.Sprintf("entry %d of %s", i, s[:8]), i))
	}
	k.Produce(recs...)
	// A poison record (not an event) and the deletion of the third session.
	k.Produce(&kgo.Record{Topic: topics.SessionsTranscript, Key: []byte(sessions[0]), Value: []byte("not an event")})
	deleted := sessions[2]
	k.Produce(k.Record(topics.SessionsEvents, deleted, schemas.New(org, &schemas.SessionEvent{SessionID: deleted, Kind: schemas.SessionKindDeleted})))

	// The live group materializes everything and commits.
	stopGroup := startGroup(t, a, group)
	testenv.Eventually(t, 60*time.Second, "the group to commit the end of its topics", func() bool {
		return k.CaughtUp(group, topics.SessionsTranscript, topics.SessionsEvents)
	})
	stopGroup()
	before := historyRows(t, a, org)
	if len(before) != 20 { // 30 entries, 10 of them the deleted session's
		t.Fatalf("materialized %d rows, want 20", len(before))
	}
	if !tombstoned(t, a, deleted) {
		t.Fatal("the deleted session has no tombstone")
	}
	dlqEnd := k.EndOffsets(topics.DeadLetterTopic(group))
	if dlqEnd != 1 {
		t.Fatalf("dead-letter topic holds %d records, want the poison one", dlqEnd)
	}

	// Damage the history: rows lost, a row altered, a foreign row added.
	if _, err := a.Pool.Exec(ctx, `DELETE FROM session_messages WHERE session_id = $1`, sessions[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pool.Exec(ctx, `UPDATE session_messages SET text = 'corrupted' WHERE session_id = $1`, sessions[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pool.Exec(ctx, `TRUNCATE session_message_tombstones`); err != nil {
		t.Fatal(err)
	}

	rep, err := a.Replay(ctx, group, app.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Truncated, []string{"session_messages", "session_message_tombstones", "session_message_search", "session_message_search_queue"}) || rep.Applied != 31 || rep.Skipped != 1 {
		t.Fatalf("replay report %+v, want both tables truncated, 31 records applied (30 entries and the deletion), the poison one skipped", rep)
	}
	after := historyRows(t, a, org)
	if !slices.Equal(before, after) {
		t.Fatalf("replayed history differs:\nbefore %v\nafter  %v", before, after)
	}
	if !tombstoned(t, a, deleted) {
		t.Fatal("the replay did not tombstone the deleted session again")
	}
	if !k.CaughtUp(group, topics.SessionsTranscript, topics.SessionsEvents) {
		t.Fatal("the replay did not commit the replayed point for the group")
	}

	// The restarted group continues after the replayed point: a new entry
	// is materialized, and the poison record is not dead-lettered again.
	k.Produce(transcriptRec(sessions[0], schemas.TranscriptAgentMessage, "after the replay", 100))
	startGroup(t, a, group)
	testenv.Eventually(t, 60*time.Second, "the new entry to be materialized", func() bool {
		return len(historyRows(t, a, org)) == len(before)+1 && k.CaughtUp(group, topics.SessionsTranscript)
	})
	if got := k.EndOffsets(topics.DeadLetterTopic(group)); got != dlqEnd {
		t.Fatalf("dead-letter topic holds %d records after the restart, want %d: the group re-read the replayed records", got, dlqEnd)
	}

	// While the group runs, replay refuses and touches nothing.
	_, err = a.Replay(ctx, group, app.ReplayOptions{})
	if !errors.Is(err, consumers.ErrGroupActive) {
		t.Fatalf("replay with the group running: %v, want ErrGroupActive", err)
	}
	if got := len(historyRows(t, a, org)); got != len(before)+1 {
		t.Fatalf("a refused replay changed the history: %d rows", got)
	}
}

// TestReplayRefusesGroupsItCannotRebuild: an unknown group and a group that
// declares no owned tables are refused before anything is touched.
func TestReplayRefusesGroupsItCannotRebuild(t *testing.T) {
	a := app.New(devConfig(t, filepath.Join(t.TempDir(), "kafka")), obs.NewLogger(io.Discard, "error", "text"))
	t.Cleanup(a.Close)
	_, err := a.Replay(context.Background(), "no-such-group", app.ReplayOptions{})
	if err == nil || !strings.Contains(err.Error(), `unknown consumer group "no-such-group"`) {
		t.Fatalf("unknown group: %v", err)
	}
	_, err = a.Replay(context.Background(), notifier.Group.Name, app.ReplayOptions{})
	if err == nil || !strings.Contains(err.Error(), "owns no tables") || !strings.Contains(err.Error(), sessionmaterializer.Group.Name) {
		t.Fatalf("group without owned tables: %v", err)
	}
}

// startGroup runs one consumer group of a until the returned stop (or the
// test's end); stop returns once the member has left the group.
func startGroup(t *testing.T, a *app.App, group string) func() {
	t.Helper()
	roles, err := a.WorkerRoles(context.Background(), []string{group})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunRoles(ctx, roles...) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("group %s: %v", group, err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// historyRows are an organization's history rows without seq (a global
// order key that a rebuild assigns anew), in each session's order.
func historyRows(t *testing.T, a *app.App, org string) []string {
	t.Helper()
	rs, err := a.Pool.Query(context.Background(), `SELECT (to_jsonb(m) - 'seq' - 'search')::text FROM session_messages m
		WHERE org_id = $1 ORDER BY session_id, seq`, org)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func tombstoned(t *testing.T, a *app.App, session string) bool {
	t.Helper()
	var ok bool
	if err := a.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM session_message_tombstones WHERE session_id = $1)`, session).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestReplayRefusesAfterRetentionLoss: when retention has deleted a topic's
// oldest records, truncating would lose the rows built from them, so replay
// refuses (and truncates nothing) unless told to accept the loss.
func TestReplayRefusesAfterRetentionLoss(t *testing.T) {
	group := sessionmaterializer.Group.Name
	k := consumerstest.New(t, consumerstest.Options{}, sessionmaterializer.Group)
	a := app.New(devConfig(t, filepath.Join(t.TempDir(), "kafka")), obs.NewLogger(io.Discard, "error", "text"))
	a.SetSeeds(k.Seeds)
	t.Cleanup(a.Close)
	ctx := context.Background()
	if err := a.OpenPostgres(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		k.Produce(&kgo.Record{Topic: topics.SessionsTranscript, Value: []byte("x")})
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topics.SessionsTranscript, Partition: 0, At: 1})
	if _, err := kadm.NewClient(k.Client).DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	org, session := uuid.NewString(), uuid.NewString()
	if _, err := a.Pool.Exec(ctx, `INSERT INTO session_messages (event_id, org_id, session_id, kind, text, occurred_at)
		VALUES ($1, $2, $3, 'user_message', 'kept', now())`, uuid.NewString(), org, session); err != nil {
		t.Fatal(err)
	}
	_, err := a.Replay(ctx, group, app.ReplayOptions{})
	if !errors.Is(err, consumers.ErrRetentionLoss) || !strings.Contains(err.Error(), topics.SessionsTranscript+"/0 before offset 1") {
		t.Fatalf("replay after retention deleted records: %v, want ErrRetentionLoss naming the partition", err)
	}
	if n := len(historyRows(t, a, org)); n != 1 {
		t.Fatalf("a refused replay truncated the history (%d rows left)", n)
	}
	rep, err := a.Replay(ctx, group, app.ReplayOptions{AllowRetentionLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != 0 || rep.Skipped != 1 || len(historyRows(t, a, org)) != 0 {
		t.Fatalf("replay accepting the loss: %+v, %d rows left; want the table rebuilt from the one retained (undecodable) record", rep, len(historyRows(t, a, org)))
	}
}
