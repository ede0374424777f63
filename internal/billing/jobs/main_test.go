package billingjobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	pool   *pgxpool.Pool
	ledger *billing.Ledger
	fake   *autumnfake.Server
	logs   *testenv.LogBuffer
	clock  *clock
	deps   billingjobs.Deps
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	fake := autumnfake.New(t)
	clk := &clock{t: time.Now().Add(time.Minute)} // ahead of rows the database stamps now()
	ledger := &billing.Ledger{Pool: pool, Codec: codec, Log: log}
	e := &env{pool: pool, ledger: ledger, fake: fake, logs: logs, clock: clk,
		deps: billingjobs.Deps{Pool: pool, Ledger: ledger, Autumn: autumn.New(fake.URL, autumnfake.Key, 5*time.Second), Log: log, Now: clk.Now}}
	// Events left due by earlier tests must not be posted by this one.
	e.exec(t, `UPDATE billing_events SET status = 'skipped' WHERE status IN ('pending', 'failed')`)
	return e
}

func (e *env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

var orgSeq struct {
	mu sync.Mutex
	n  int
}

// org creates an organization in state with a shadow balance (credits),
// billing settings and an Autumn customer (its id).
func (e *env) org(t *testing.T, state string, credits int64, settings string) string {
	t.Helper()
	orgSeq.mu.Lock()
	orgSeq.n++
	slug := fmt.Sprintf("bj-%d-%d", time.Now().UnixNano(), orgSeq.n)
	orgSeq.mu.Unlock()
	if settings == "" {
		settings = "{}"
	}
	var id string
	err := e.pool.QueryRow(context.Background(), `INSERT INTO organizations (name, slug) VALUES ('Test', $1) RETURNING id::text`, slug).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE organizations SET billing_state = $2, shadow_balance = $3, billing_plan = 'pro', billing_settings = $4::jsonb,
		autumn_customer_id = id::text, grace_expires_at = CASE WHEN $2 = 'grace' THEN now() + interval '5 minutes' END,
		grace_entered_at = CASE WHEN $2 = 'grace' THEN now() END WHERE id = $1`, id, state, credits, settings)
	return id
}

func (e *env) state(t *testing.T, orgID string) (string, int64) {
	t.Helper()
	a, err := billing.ReadAccount(context.Background(), e.pool, orgID)
	if err != nil {
		t.Fatal(err)
	}
	return a.State, a.BalanceMicros
}

// use applies one compute usage of credits (micros) under key (made
// unique per organization: tests share the database across -count runs).
func (e *env) use(t *testing.T, orgID, key string, creditsMicros int64) {
	t.Helper()
	_, err := e.ledger.Apply(context.Background(), orgID, []billing.Usage{{Key: key + ":" + orgID, Kind: schemas.UsageCompute,
		QuantityMicros: creditsMicros, CreditsMicros: creditsMicros}})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// logLines returns the JSON log lines containing every fragment.
func (e *env) logLines(frags ...string) []string {
	var out []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		ok := l != ""
		for _, f := range frags {
			ok = ok && strings.Contains(l, f)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

const c = billing.Micros // one credit in micros
