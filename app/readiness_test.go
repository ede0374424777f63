package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/broker"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/topics"
)

// stoppableBroker is an embedded broker a test stops and starts again on
// the same address with the same data (topics, group offsets).
type stoppableBroker struct {
	t    *testing.T
	addr string
	dir  string
	b    *broker.Broker
}

func newStoppableBroker(t *testing.T) *stoppableBroker {
	sb := &stoppableBroker{t: t, addr: "127.0.0.1:0", dir: filepath.Join(t.TempDir(), "kafka")}
	sb.start()
	sb.addr = sb.b.Addr()
	t.Cleanup(sb.stop)
	return sb
}

func (sb *stoppableBroker) start() {
	sb.t.Helper()
	b, err := broker.Start(broker.Options{Addr: sb.addr, DataDir: sb.dir})
	if err != nil {
		sb.t.Fatal(err)
	}
	sb.b = b
}

func (sb *stoppableBroker) stop() {
	if sb.b != nil {
		sb.b.Close()
		sb.b = nil
	}
}

// roleConfig is the configuration of a role process using the external
// broker at addr.
func roleConfig(t *testing.T, addr string, overrides ...string) *config.Config {
	return devConfig(t, filepath.Join(t.TempDir(), "unused-kafka"), append([]string{"KAFKA_BROKERS", addr}, overrides...)...)
}

// ensureTopics creates the catalog's topics on the broker at addr.
func ensureTopics(t *testing.T, addr string) {
	t.Helper()
	a := app.New(roleConfig(t, addr), obs.NewLogger(io.Discard, "error", "text"))
	defer a.Close()
	if _, err := a.EnsureTopics(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// runRoles builds roles in a's process and runs them until the test ends;
// it returns the URL of a's ops endpoints (what OpsRole serves).
func runRoles(t *testing.T, a *app.App, builders ...app.RoleBuilder) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	roles, err := app.BuildRoles(ctx, builders...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return runBuilt(t, a, ctx, cancel, roles)
}

func runBuilt(t *testing.T, a *app.App, ctx context.Context, cancel context.CancelFunc, roles []app.Role) string {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- app.RunRoles(ctx, roles...) }()
	ops := httptest.NewServer(obs.Handler(a.Reg, a.Checks))
	t.Cleanup(func() {
		ops.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("roles stopped with %v", err)
		}
		a.Close()
	})
	return ops.URL
}

type readyz struct {
	Code    int
	Status  string       `json:"status"`
	Checks  []obs.Result `json:"checks"`
	Failing []string     `json:"failing"`
	Body    string
}

func getReadyz(t *testing.T, ops string) readyz {
	t.Helper()
	resp, err := http.Get(ops + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := readyz{Code: resp.StatusCode, Body: string(b)}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("/readyz body %q: %v", b, err)
	}
	return r
}

func (r readyz) names() []string {
	var n []string
	for _, c := range r.Checks {
		n = append(n, c.Name)
	}
	return n
}

func (r readyz) check(name string) obs.Result {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return obs.Result{}
}

// awaitReadyz polls /readyz until it answers code, and returns that answer.
func awaitReadyz(t *testing.T, ops string, code int, what string) readyz {
	t.Helper()
	var last readyz
	testenv.Eventually(t, 90*time.Second, what, func() bool {
		last = getReadyz(t, ops)
		return last.Code == code
	})
	return last
}

func assertLive(t *testing.T, ops string) {
	t.Helper()
	resp, err := http.Get(ops + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz = %d", resp.StatusCode)
	}
}

// Ingest is ready only while it could accept a webhook: its /readyz checks
// Postgres and a metadata round trip for webhooks.raw, is 503 naming the
// kafka check while the broker is gone, and 200 again once it is back;
// /healthz stays 200 throughout.
func TestIngestReadinessFollowsKafka(t *testing.T) {
	kb := newStoppableBroker(t)
	ensureTopics(t, kb.addr)
	a := app.New(roleConfig(t, kb.addr), obs.NewLogger(io.Discard, "error", "text"))
	ops := runRoles(t, a, a.IngestRole)

	r := awaitReadyz(t, ops, http.StatusOK, "ingest ready with the broker up")
	if got := strings.Join(r.names(), ","); got != "kafka,postgres" {
		t.Fatalf("ingest's readiness checks = %s, want kafka,postgres", got)
	}
	for _, c := range r.Checks {
		if c.Status != obs.StatusOK || c.Timeout == "" {
			t.Fatalf("check %+v", c)
		}
	}
	assertLive(t, ops)

	kb.stop()
	r = awaitReadyz(t, ops, http.StatusServiceUnavailable, "ingest not ready with the broker gone")
	k := r.check("kafka")
	if k.Status != obs.StatusFailing || k.OK || k.Error == "" || !strings.Contains(k.Error, topics.WebhooksRaw) {
		t.Fatalf("kafka check while the broker is gone: %+v", k)
	}
	if r.Status != "not ready" || !slices.Equal(r.Failing, []string{"kafka"}) || r.check("postgres").Status != obs.StatusOK {
		t.Fatalf("/readyz while the broker is gone: %s", r.Body)
	}
	if u, err := url.Parse(testenv.DatabaseURL(t)); err == nil {
		if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(r.Body, pw) {
			t.Fatal("/readyz shows the database password")
		}
	}
	assertLive(t, ops)

	kb.start()
	awaitReadyz(t, ops, http.StatusOK, "ingest ready again once the broker is back")
	assertLive(t, ops)
}

// A worker is ready only once its consumer group joined: while no broker
// answers, /readyz is 503 with the group's check failing and naming the
// group; after the broker came (back) and the group joined, 200. /healthz
// is 200 throughout.
func TestWorkerReadinessFollowsItsGroup(t *testing.T) {
	kb := newStoppableBroker(t)
	ensureTopics(t, kb.addr)
	kb.stop()

	group := triggerprocessor.Group.Name
	a := app.New(roleConfig(t, kb.addr), obs.NewLogger(io.Discard, "error", "text"))
	ctx, cancel := context.WithCancel(context.Background())
	roles, err := a.WorkerRoles(ctx, []string{group})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ops := runBuilt(t, a, ctx, cancel, roles)

	r := getReadyz(t, ops)
	g := r.check(app.CheckGroupPrefix + group)
	if r.Code != http.StatusServiceUnavailable || g.Status != obs.StatusFailing || !strings.Contains(g.Error, group) {
		t.Fatalf("/readyz before the group could join = %d %s", r.Code, r.Body)
	}
	if want := []string{"blobstore", app.CheckGroupPrefix + group, "kafka", "postgres"}; !slices.Equal(r.names(), want) {
		t.Fatalf("worker's readiness checks = %v, want %v", r.names(), want)
	}
	assertLive(t, ops)

	kb.start()
	r = awaitReadyz(t, ops, http.StatusOK, "worker ready once its group joined")
	if g := r.check(app.CheckGroupPrefix + group); g.Status != obs.StatusOK {
		t.Fatalf("group check after the join: %+v", g)
	}
	assertLive(t, ops)
}

// The relay is ready while Postgres answers, a broker leads the outbox's
// topics and the backlog is young: an hour-old pending row it cannot publish
// yet (its topic's broker is down) makes /readyz 503 naming the outbox and
// kafka checks; once the broker is back the row goes out and /readyz is 200.
func TestRelayReadinessFollowsTheBacklog(t *testing.T) {
	kb := newStoppableBroker(t)
	ensureTopics(t, kb.addr)
	// Its own database: the package's is shared with tests whose outbox rows
	// this relay could not publish either, and the oldest of those decides.
	a := app.New(roleConfig(t, kb.addr, "DATABASE_URL", testenv.EmptyDatabase(t)), obs.NewLogger(io.Discard, "error", "text"))
	if err := a.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ops := runRoles(t, a, a.RelayRole)
	r := awaitReadyz(t, ops, http.StatusOK, "relay ready with the broker up and nothing pending")
	if got := strings.Join(r.names(), ","); got != "kafka,outbox,postgres" {
		t.Fatalf("the relay's readiness checks = %s, want kafka,outbox,postgres", got)
	}

	kb.stop()
	ctx := context.Background()
	var id int64
	if err := a.Pool.QueryRow(ctx, `INSERT INTO outbox (topic, key, value, created_at)
		VALUES ($1, 'run-ready', 'v', now() - interval '1 hour') RETURNING id`, topics.RunsLifecycle).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r = awaitReadyz(t, ops, http.StatusServiceUnavailable, "relay not ready with an hour-old pending row")
	if r.check("outbox").Status != obs.StatusFailing || !strings.Contains(r.check("outbox").Error, "oldest pending outbox row") {
		t.Fatalf("outbox check: %+v", r.check("outbox"))
	}
	assertLive(t, ops)

	kb.start()
	awaitReadyz(t, ops, http.StatusOK, "relay ready again once the row is published")
	var published bool
	if err := a.Pool.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM outbox WHERE id = $1`, id).Scan(&published); err != nil || !published {
		t.Fatalf("row %d published = %v, %v", id, published, err)
	}
}
