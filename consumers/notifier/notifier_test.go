package notifier_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/notifier"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/outbox/outboxtest"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/sessionnotify"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/slack"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const webApp = "https://app.example.test"

// env is one test's world: an org with an automation and a Slack
// installation (its bot token sealed like api/integrations seals it), a
// fake Slack, a Kafka broker and a notifier runner.
type env struct {
	t          *testing.T
	pool       *pgxpool.Pool
	codec      *schemas.Codec
	box        *secretbox.Box
	slack      *slackfake.Server
	tokens     *integrations.Service
	logs       *testenv.LogBuffer
	kafka      *consumerstest.World
	org, auto  string
	trig, inst string
	team       string
	token      string
	processed  atomic.Int64 // records the handler finished (nil)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New([]string{"test:ZGV2LW9ubHktMzItYnl0ZS1lbmNyeXB0aW9uLWtleSE="})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Options{Cfg: &config.Config{}, Pool: pool, Box: box})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pool: pool, codec: codec, box: box, slack: slackfake.New(t), tokens: svc, logs: &testenv.LogBuffer{},
		team: "T" + strings.ToUpper(uuid.NewString()[:8]), token: "xoxb-" + uuid.NewString()}
	e.org = runstest.Org(t, pool)
	e.auto = runstest.Automation(t, pool, e.org)
	e.trig = runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: e.org, AutomationID: e.auto})
	e.inst = e.installSlack(e.team, e.token)
	e.slack.AddChannel(e.team, "C-RUNS")
	e.kafka = consumerstest.New(t, consumerstest.Options{Partitions: 2}, notifier.Group)
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), e.token) {
			t.Errorf("the bot token was logged")
		}
	})
	return e
}

// installSlack stores an active installation with its bot token sealed as
// internal/integrations seals it (additional data slack:{org}:{team}).
func (e *env) installSlack(team, token string) string {
	e.t.Helper()
	e.slack.AddToken(token, team)
	sealed, err := e.box.Seal([]byte(token), []byte("slack:"+e.org+":"+team))
	if err != nil {
		e.t.Fatal(err)
	}
	var id string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO slack_installations (org_id, team_id, team_name, bot_user_id, encrypted_bot_token)
		VALUES ($1, $2, 'Acme', 'UBOT', $3) RETURNING id::text`, e.org, team, sealed).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

// destination sets the automation's notification destination.
func (e *env) destination(kind, channel, user string) {
	e.t.Helper()
	var inst *string
	if kind != notifier.DestinationNone {
		inst = &e.inst
	}
	e.exec(`UPDATE automations SET name = 'Triage <bugs> & more', notification_destination_type = $2,
		notification_channel_id = nullif($3, ''), notification_slack_user_id = nullif($4, ''),
		notification_slack_installation_id = $5 WHERE id = $1`, e.auto, kind, channel, user, inst)
}

// runTo queues a run, moves it to running and ends it with to (through
// runs.Complete for an agent outcome, runs.Apply for timed_out).
func (e *env) runTo(to, summary string) string {
	e.t.Helper()
	ctx := context.Background()
	var runID string
	e.tx(func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, e.codec, runs.Source{OrgID: e.org, TriggerID: e.trig, AutomationID: e.auto, TriggerType: "webhook"},
			runs.Event{Provider: "github", EventType: "issue_opened", OccurredAt: time.Now(), DedupKey: uuid.NewString(),
				Title: "Login page crashes", URL: "https://github.com/acme/web/issues/7", Context: map[string]any{"n": 7}})
		runID = out.RunID
		return err
	})
	for _, st := range []string{runs.StatusEnriching, runs.StatusReady, runs.StatusRunning} {
		e.move(runID, nil, st)
	}
	switch to {
	case runs.StatusTimedOut:
		e.move(runID, []string{runs.StatusRunning}, runs.StatusTimedOut)
	default:
		e.tx(func(tx pgx.Tx) error {
			_, err := runs.Complete(ctx, tx, e.codec, e.org, "", runs.Completion{RunID: runID, CompletionID: "c-" + runID,
				Outcome: to, SummaryMarkdown: summary})
			return err
		})
	}
	return runID
}

func (e *env) move(runID string, from []string, to string) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		r, err := runs.Lock(context.Background(), tx, e.org, runID)
		if err != nil {
			return err
		}
		if from == nil {
			from = []string{r.Status}
		}
		_, err = runs.Apply(context.Background(), tx, e.codec, r, runs.Move{From: from, To: to, Reason: "test"})
		return err
	})
}

func (e *env) tx(fn func(pgx.Tx) error) {
	e.t.Helper()
	if err := pgx.BeginFunc(context.Background(), e.pool, fn); err != nil {
		e.t.Fatal(err)
	}
}

// lifecycle returns the runs.lifecycle records the run's transitions wrote to
// the outbox, in order: exactly what the relay would publish.
func (e *env) lifecycle(runID string) []*kgo.Record {
	e.t.Helper()
	return outboxtest.Records(e.t, e.pool, topics.RunsLifecycle, runID)
}

func (e *env) sessionStopped(sessionID, kind string) *kgo.Record {
	e.t.Helper()
	ev := schemas.New(e.org, &schemas.SessionEvent{SessionID: sessionID, Kind: kind, Title: new("Fix the flaky test"), Outcome: new("completed")})
	rec, err := kafka.EventRecord(e.codec, topics.SessionsEvents, sessionID, ev)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func (e *env) produce(recs ...*kgo.Record) {
	e.t.Helper()
	e.kafka.Produce(recs...)
}

// start runs the notifier under a consumers.Runner in group until the test
// ends.
func (e *env) start(group string) {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := notifier.Handler(notifier.Deps{Pool: e.pool, Tokens: e.tokens, WebAppURL: webApp, Log: log,
		Slack: slack.New(slack.Options{BaseURL: e.slack.URL()}), Box: e.box})
	counted := func(ctx context.Context, m *consumers.Message) error {
		err := h(ctx, m)
		if err == nil {
			e.processed.Add(1)
		}
		return err
	}
	e.kafka.Start(notifier.Group, counted, consumers.Config{
		Group:  group,
		Codec:  e.codec,
		Retry:  consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
		Logger: log,
	})
}

// await waits until the handler finished n records in total.
func (e *env) await(n int64) {
	e.t.Helper()
	testenv.Eventually(e.t, 30*time.Second, "records processed", func() bool { return e.processed.Load() >= n })
}

func (e *env) sideEffects() int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM automation_side_effects WHERE org_id = $1`, e.org).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// A run that succeeded is posted once to the automation's channel with its
// name, outcome, summary, trigger and a link to the run; the earlier
// transitions post nothing.
func TestChannelPost(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationChannel, "C-RUNS", "")
	run := e.runTo(runs.StatusSucceeded, "Fixed the crash in `login.tsx`; opened PR #12.")
	recs := e.lifecycle(run)
	if len(recs) != 5 {
		t.Fatalf("%d lifecycle records", len(recs))
	}
	e.start(notifier.Group.Name)
	e.produce(recs...)
	e.await(5)

	posts := e.slack.Posts()
	if len(posts) != 1 {
		t.Fatalf("posts: %+v", posts)
	}
	p := posts[0]
	blocks := blockText(p)
	for _, want := range []string{":white_check_mark:", "*Triage &lt;bugs&gt; &amp; more* succeeded", "Fixed the crash in `login.tsx`",
		"<https://github.com/acme/web/issues/7|Login page crashes>", webApp + "/automations/" + e.auto + "/runs/" + run} {
		if !strings.Contains(blocks, want) {
			t.Errorf("blocks lack %q: %s", want, blocks)
		}
	}
	if p.Channel != "C-RUNS" || p.Team != e.team || !strings.Contains(p.Text, "succeeded") {
		t.Fatalf("post: %+v", p)
	}
	if n := e.sideEffects(); n != 1 {
		t.Fatalf("%d side effects", n)
	}
}

// slack_dm_user opens the DM with the configured user, then posts there.
func TestDirectMessage(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationDM, "", "U123")
	run := e.runTo(runs.StatusNeedsHuman, "Which environment should I deploy to?")
	e.start(notifier.Group.Name)
	e.produce(e.lifecycle(run)...)
	e.await(5)
	if opens := e.slack.Opens(); len(opens) != 1 || opens[0].User != "U123" {
		t.Fatalf("opens: %+v", opens)
	}
	posts := e.slack.Posts()
	if len(posts) != 1 || posts[0].Channel != "D123" || !strings.Contains(posts[0].Text, "needs a human") {
		t.Fatalf("posts: %+v", posts)
	}
}

// Destination none posts nothing; a person resolving an ended run
// (terminal → terminal) is not announced again.
func TestNoneAndResolvedPostNothing(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationNone, "", "")
	quiet := e.runTo(runs.StatusSucceeded, "done")
	e.destination(notifier.DestinationChannel, "C-RUNS", "")
	failed := e.runTo(runs.StatusFailed, "could not reproduce")
	e.move(failed, []string{runs.StatusFailed}, runs.StatusSucceeded) // resolved by a person
	recs := append(e.lifecycle(quiet), e.lifecycle(failed)...)
	if len(recs) != 11 {
		t.Fatalf("%d records", len(recs))
	}
	// The quiet run's records are read while its automation says channel
	// now; make it none again for them.
	e.destination(notifier.DestinationNone, "", "")
	e.start(notifier.Group.Name)
	e.produce(e.lifecycle(quiet)...)
	e.await(5)
	if len(e.slack.Posts()) != 0 || e.slack.Calls("chat.postMessage") != 0 {
		t.Fatalf("none posted: %+v", e.slack.Posts())
	}
	e.destination(notifier.DestinationChannel, "C-RUNS", "")
	e.produce(e.lifecycle(failed)...)
	e.await(11)
	posts := e.slack.Posts()
	if len(posts) != 1 || !strings.Contains(posts[0].Text, "failed") || !strings.Contains(posts[0].Text, "could not reproduce") {
		t.Fatalf("posts: %+v", posts)
	}
}

// A Slack 5xx on the first try is retried; exactly one message is posted.
func TestSlack5xxRetriedPostsOnce(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationDM, "", "U9")
	run := e.runTo(runs.StatusTimedOut, "")
	e.slack.FailNext(1, 500) // conversations.open
	e.start(notifier.Group.Name)
	e.produce(e.lifecycle(run)...)
	e.await(5)
	if len(e.slack.Posts()) != 1 || e.slack.Calls("conversations.open") != 2 {
		t.Fatalf("posts %d, opens %d", len(e.slack.Posts()), e.slack.Calls("conversations.open"))
	}

	e2 := newEnv(t)
	e2.destination(notifier.DestinationChannel, "C-RUNS", "")
	run2 := e2.runTo(runs.StatusSucceeded, "ok")
	e2.slack.FailNext(2, 502)
	e2.start(notifier.Group.Name)
	e2.produce(e2.lifecycle(run2)...)
	e2.await(5)
	if len(e2.slack.Posts()) != 1 || e2.slack.Calls("chat.postMessage") != 3 {
		t.Fatalf("posts %d, calls %d", len(e2.slack.Posts()), e2.slack.Calls("chat.postMessage"))
	}
	if !strings.Contains(e2.logs.String(), "record failed, retrying") {
		t.Fatalf("retries not logged: %s", e2.logs.String())
	}
}

// The same records delivered twice, then the whole topic replayed by a fresh
// consumer group, post once.
func TestDuplicateAndReplayPostOnce(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationDM, "", "U77")
	run := e.runTo(runs.StatusSucceeded, "done")
	recs := e.lifecycle(run)
	e.start(notifier.Group.Name)
	e.produce(recs...)
	e.produce(e.lifecycle(run)...) // duplicate delivery
	e.await(10)
	e.start("notifier-replay") // a group with no offsets reads the topic from offset 0
	e.await(20)
	if len(e.slack.Posts()) != 1 || len(e.slack.Opens()) != 1 {
		t.Fatalf("posts %d opens %d", len(e.slack.Posts()), len(e.slack.Opens()))
	}
	if n := e.sideEffects(); n != 2 {
		t.Fatalf("%d side effects", n)
	}
}

// Permanent Slack errors and a revoked installation are logged at warn and
// the record is done: no retry storm, nothing dead-lettered.
func TestPermanentErrorsAreNotRetried(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationChannel, "C-GONE", "") // not a channel of the workspace
	run := e.runTo(runs.StatusFailed, "x")
	e.start(notifier.Group.Name)
	e.produce(e.lifecycle(run)...)
	e.await(5)
	if calls := e.slack.Calls("chat.postMessage"); calls != 1 {
		t.Fatalf("chat.postMessage called %d times", calls)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "slack_error=channel_not_found") {
		t.Fatalf("not logged: %s", logs)
	}
	if strings.Contains(logs, "dead-lettered") {
		t.Fatalf("dead-lettered: %s", logs)
	}

	e.destination(notifier.DestinationChannel, "C-RUNS", "")
	e.slack.FailWith("chat.postMessage", "not_in_channel", 1)
	run2 := e.runTo(runs.StatusSucceeded, "y")
	e.produce(e.lifecycle(run2)...)
	e.await(10)

	e.exec(`UPDATE slack_installations SET status = 'revoked', encrypted_bot_token = NULL, revoked_at = now() WHERE id = $1`, e.inst)
	run3 := e.runTo(runs.StatusSucceeded, "z")
	e.produce(e.lifecycle(run3)...)
	e.await(15)
	if calls := e.slack.Calls("chat.postMessage"); calls != 2 || len(e.slack.Posts()) != 0 {
		t.Fatalf("calls %d posts %d", calls, len(e.slack.Posts()))
	}
	if !strings.Contains(e.logs.String(), "Slack installation missing or revoked") {
		t.Fatalf("revoked installation not logged: %s", e.logs.String())
	}
	if n := e.sideEffects(); n != 0 {
		t.Fatalf("%d side effects recorded for undelivered notifications", n)
	}
}

// A stopped session DMs each person subscribed to its completion, once;
// people who unsubscribed and other kinds of session events get nothing.
func TestSessionCompletionSubscriptions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	session := sessionstest.New(t, e.pool, e.org, sessionstest.Options{})
	var users []string
	for i := range 3 {
		var id string
		if err := e.pool.QueryRow(ctx, `INSERT INTO users (email, name) VALUES ($1, 'U') RETURNING id::text`,
			uuid.NewString()+"@example.test").Scan(&id); err != nil {
			t.Fatal(err)
		}
		users = append(users, id)
		if _, err := sessionnotify.Subscribe(ctx, e.pool, e.org, session, id, e.inst, "U10"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := sessionnotify.Unsubscribe(ctx, e.pool, e.org, session, users[2]); err != nil || !ok {
		t.Fatalf("unsubscribe: %v %v", ok, err)
	}
	e.start(notifier.Group.Name)
	e.produce(e.sessionStopped(session, schemas.SessionKindRunning), e.sessionStopped(session, schemas.SessionKindStopped),
		e.sessionStopped(session, schemas.SessionKindStopped))
	e.await(3)
	posts := e.slack.Posts()
	if len(posts) != 2 {
		t.Fatalf("posts: %+v", posts)
	}
	got := map[string]bool{posts[0].Channel: true, posts[1].Channel: true}
	if !got["D100"] || !got["D101"] || got["D102"] {
		t.Fatalf("DMs to %v", got)
	}
	if raw := blockText(posts[0]); !strings.Contains(raw, "Fix the flaky test") || !strings.Contains(raw, webApp+"/sessions/"+session) {
		t.Fatalf("message: %s", raw)
	}
}

// blockText is the JSON of a post's blocks without HTML escaping, to search.
func blockText(p slackfake.Post) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p.Blocks)
	return b.String()
}

// A run whose session opened pull requests links them in its message.
func TestRunMessageLinksThePullRequests(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationChannel, "C-RUNS", "")
	run := e.runTo(runs.StatusSucceeded, "Fixed it.")
	sid := uuid.NewString()
	e.exec(`INSERT INTO sessions (id, org_id, pr_urls) VALUES ($1, $2, $3)`, sid, e.org,
		[]string{"https://github.com/acme/web/pull/12"})
	e.exec(`UPDATE automation_runs SET session_id = $2 WHERE id = $1`, run, sid)
	recs := e.lifecycle(run)
	e.start(notifier.Group.Name)
	e.produce(recs...)
	e.await(int64(len(recs)))
	posts := e.slack.Posts()
	if len(posts) != 1 {
		t.Fatalf("posts: %+v", posts)
	}
	if blocks := blockText(posts[0]); !strings.Contains(blocks, "Pull request: <https://github.com/acme/web/pull/12|acme/web#12>") {
		t.Fatalf("blocks lack the pull request: %s", blocks)
	}
	if !strings.Contains(posts[0].Text, "https://github.com/acme/web/pull/12") {
		t.Fatalf("text lacks the pull request: %q", posts[0].Text)
	}
}

// A run whose agent uploaded verification evidence (verify) says how many
// files there are, linked to the run when the dashboard's URL is known.
func TestRunMessageCountsTheEvidence(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationChannel, "C-RUNS", "")
	run := e.runTo(runs.StatusSucceeded, "Fixed it.")
	sid := uuid.NewString()
	e.exec(`INSERT INTO sessions (id, org_id) VALUES ($1, $2)`, sid, e.org)
	e.exec(`UPDATE automation_runs SET session_id = $2 WHERE id = $1`, run, sid)
	for i, p := range []string{"report.txt", "home.png"} {
		e.exec(`INSERT INTO session_evidence (org_id, session_id, run_id, tool_call_id, position, path, content_type, size_bytes, sha256, blob_ref)
			VALUES ($1, $2, $3, 'v-1', $4, $5, 'text/plain', 1, repeat('a', 64), 'file:x')`, e.org, sid, run, i, p)
	}
	recs := e.lifecycle(run)
	e.start(notifier.Group.Name)
	e.produce(recs...)
	e.await(int64(len(recs)))
	posts := e.slack.Posts()
	if len(posts) != 1 {
		t.Fatalf("posts: %+v", posts)
	}
	if blocks := blockText(posts[0]); !strings.Contains(blocks, ":paperclip: ") || !strings.Contains(blocks, "2 verification files") {
		t.Fatalf("blocks lack the evidence: %s", blocks)
	}
	if !strings.Contains(posts[0].Text, "[2 verification files]") {
		t.Fatalf("text lacks the evidence: %q", posts[0].Text)
	}
}
