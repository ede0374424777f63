package invocations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const linearToken = "lin_oauth_secret_token_123"

// connSource is a connector-like source ("connector:<uuid>"): search
// (read) and wipe (danger); it counts executions and answers with result.
type connSource struct {
	id     string
	execs  atomic.Int64
	mu     sync.Mutex
	result json.RawMessage
	last   json.RawMessage // params of the last execution
}

func (c *connSource) ID() string          { return c.id }
func (c *connSource) DisplayName() string { return "Docs connector" }
func (c *connSource) Guide(context.Context, actions.ExecContext) (string, error) {
	return "# Docs\nsearch the docs", nil
}

func (c *connSource) ListActions(context.Context, actions.ExecContext) ([]actions.Definition, error) {
	return []actions.Definition{
		{ID: "search", Risk: actions.RiskRead, Description: "search",
			Params: json.RawMessage(`{"type":"object","required":["query"],"properties":{"query":{"type":"string"},"api_key":{"type":"string"}}}`)},
		{ID: "wipe", Risk: actions.RiskDanger, Params: json.RawMessage(`{"type":"object"}`)},
	}, nil
}

func (c *connSource) Execute(_ context.Context, actionID string, params json.RawMessage, ec actions.ExecContext) (json.RawMessage, error) {
	c.execs.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = params
	if c.result != nil {
		return c.result, nil
	}
	return json.RawMessage(fmt.Sprintf(`{"action":%q,"params":%s}`, actionID, params)), nil
}

// staticSources serves fixed sources to every session.
type staticSources struct {
	srcs    []actions.Source
	drifted atomic.Bool
}

func (s *staticSources) List(ctx context.Context, sess sessions.Session) ([]invocations.Available, error) {
	var out []invocations.Available
	for _, src := range s.srcs {
		defs, err := src.ListActions(ctx, actions.ExecContext{})
		if err != nil {
			return nil, err
		}
		out = append(out, invocations.Available{Integration: src.ID(), DisplayName: src.DisplayName(), Actions: defs})
	}
	return out, nil
}

func (s *staticSources) Get(_ context.Context, sess sessions.Session, id string) (actions.Source, actions.ExecContext, *string, error) {
	for _, src := range s.srcs {
		if src.ID() == id {
			return src, actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID, Token: linearToken}, nil, nil
		}
	}
	return nil, actions.ExecContext{}, nil, invocations.ErrUnknownIntegration
}

// Drifted answers like the catalog for a tool whose server still lists
// def: drifted when the test says so, made against def.
func (s *staticSources) Drifted(_ context.Context, _ sessions.Session, _ string, def actions.Definition) (invocations.Drift, error) {
	d := invocations.Drift{Drifted: s.drifted.Load(), Current: &def, CurrentHash: actions.DefinitionHash(def)}
	if d.Drifted {
		d.ReviewedHash = "reviewed-hash"
		diff := actions.DiffDefinitions(nil, &def)
		d.Diff = &diff
	}
	return d, nil
}

func (s *staticSources) CurrentDefinition(ctx context.Context, _ sessions.Session, id, action string) (actions.Definition, bool, error) {
	for _, src := range s.srcs {
		if src.ID() != id {
			continue
		}
		defs, err := src.ListActions(ctx, actions.ExecContext{})
		if err != nil {
			return actions.Definition{}, false, err
		}
		for _, d := range defs {
			if d.ID == action {
				return d, true, nil
			}
		}
		return actions.Definition{}, false, nil
	}
	return actions.Definition{}, false, invocations.ErrUnknownIntegration
}

// recNotifier records notifications.
type recNotifier struct {
	mu  sync.Mutex
	got []invocations.Invocation
}

func (n *recNotifier) InvocationChanged(_ context.Context, inv invocations.Invocation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, inv)
}

func (n *recNotifier) statuses(id string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, i := range n.got {
		if i.ID == id {
			out = append(out, i.Status)
		}
	}
	return out
}

// clock is a test clock: real time plus an offset.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

type world struct {
	pool   *pgxpool.Pool
	rdb    *redis.Client
	codec  *schemas.Codec
	fake   *linearfake.Server
	conn   *connSource
	srcs   *staticSources
	notes  *recNotifier
	clock  *clock
	svc    *invocations.Svc
	org    string
	admin  string
	member string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{pool: testenv.Postgres(t), rdb: testenv.Redis(t), notes: &recNotifier{}, clock: &clock{}}
	var err error
	if w.codec, err = schemas.NewCodec(); err != nil {
		t.Fatal(err)
	}
	w.fake = linearfake.New(t)
	w.fake.AddToken(linearToken, "user-ada")
	w.fake.AddUser(linearfake.User{ID: "user-ada", Name: "Ada", Email: "ada@example.com"})
	w.fake.AddTeam(linearfake.Team{ID: "team-eng", Key: "ENG", Name: "Engineering"})
	w.conn = &connSource{id: "connector:" + uuid.NewString()}
	w.srcs = &staticSources{srcs: []actions.Source{linear.New(linear.Options{BaseURL: w.fake.URL()}), w.conn}}
	w.svc = w.newService()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.pool.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ('Acme', $1) RETURNING id::text`,
		"acme-"+uuid.NewString()).Scan(&w.org))
	w.admin = w.user(t, w.org, "admin")
	w.member = w.user(t, w.org, "member")
	return w
}

func (w *world) newService() *invocations.Svc {
	return invocations.New(invocations.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Sources: w.srcs,
		Validator: actions.NewValidator(0), Notifier: w.notes, RunHooks: invocations.NewRunHooks(w.codec), Now: w.clock.Now})
}

func (w *world) user(t testing.TB, org, role string) string {
	t.Helper()
	var id string
	ctx := context.Background()
	if err := w.pool.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id::text`,
		uuid.NewString()+"@example.com").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `INSERT INTO members (org_id, user_id, role) VALUES ($1, $2, $3)`, org, id, role); err != nil {
		t.Fatal(err)
	}
	return id
}

func (w *world) approver(role string) invocations.Approver {
	if role == "member" {
		return invocations.Approver{UserID: w.member, OrgID: w.org, Role: role}
	}
	return invocations.Approver{UserID: w.admin, OrgID: w.org, Role: role}
}

// session creates an interactive session.
func (w *world) session(t testing.TB) sessions.Session {
	t.Helper()
	var id string
	if err := w.pool.QueryRow(context.Background(), `INSERT INTO sessions (org_id, title) VALUES ($1, 'Fix the bug')
		RETURNING id::text`, w.org).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return sessions.Session{ID: id, OrgID: w.org, Title: "Fix the bug", Status: "running"}
}

// runSession creates an automation, a running run and its session.
func (w *world) runSession(t testing.TB) (sessions.Session, string, string) {
	t.Helper()
	ctx := context.Background()
	var auto, trig, te, run, sid string
	q := func(sql string, dst *string, args ...any) {
		t.Helper()
		if err := w.pool.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(`INSERT INTO automations (org_id, name) VALUES ($1, 'Triage') RETURNING id::text`, &auto, w.org)
	q(`INSERT INTO triggers (org_id, automation_id, trigger_type, provider) VALUES ($1, $2, 'manual', 'manual') RETURNING id::text`, &trig, w.org, auto)
	q(`INSERT INTO trigger_events (org_id, trigger_id, status, provider, dedup_key) VALUES ($1, $2, 'processing', 'manual', $3)
		RETURNING id::text`, &te, w.org, trig, uuid.NewString())
	q(`INSERT INTO automation_runs (org_id, automation_id, trigger_event_id, trigger_id, status) VALUES ($1, $2, $3, $4, 'running')
		RETURNING id::text`, &run, w.org, auto, te, trig)
	q(`INSERT INTO sessions (org_id, session_type, client_type, automation_id, run_id, title)
		VALUES ($1, 'automation', 'automation', $2, $3, 'Run') RETURNING id::text`, &sid, w.org, auto, run)
	if _, err := w.pool.Exec(ctx, `UPDATE automation_runs SET session_id = $2 WHERE id = $1`, run, sid); err != nil {
		t.Fatal(err)
	}
	return sessions.Session{ID: sid, OrgID: w.org, AutomationID: &auto, RunID: &run, Title: "Run"}, auto, run
}

func (w *world) runStatus(t testing.TB, run string) string {
	t.Helper()
	var st string
	if err := w.pool.QueryRow(context.Background(), `SELECT status FROM automation_runs WHERE id = $1`, run).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// events decodes the actions.invocations outbox rows of an invocation, in
// order, checking each record's key and envelope.
func (w *world) events(t testing.TB, inv string) []*schemas.ActionInvocation {
	t.Helper()
	rows, err := w.pool.Query(context.Background(), `SELECT key, value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`,
		topics.ActionsInvocations, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*schemas.ActionInvocation
	for rows.Next() {
		var key string
		var val []byte
		if err := rows.Scan(&key, &val); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(val), linearToken) {
			t.Fatalf("event of %s contains the credential", inv)
		}
		ev, err := w.codec.Decode(val)
		if err != nil {
			t.Fatalf("decode event: %v", err)
		}
		p, ok := ev.Payload.(*schemas.ActionInvocation)
		if !ok || ev.OrgID != w.org || p.InvocationID != inv {
			t.Fatalf("unexpected event %+v", ev)
		}
		out = append(out, p)
	}
	return out
}

// transitions renders events as "prev>status" steps.
func transitions(evs []*schemas.ActionInvocation) string {
	var parts []string
	for _, e := range evs {
		prev := ""
		if e.PreviousStatus != nil {
			prev = *e.PreviousStatus
		}
		parts = append(parts, prev+">"+e.Status)
	}
	return strings.Join(parts, " ")
}

func (w *world) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
