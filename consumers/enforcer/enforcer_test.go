package enforcer_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/gatewaytest"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// keys records revocations (the LLM proxy's key contract).
type keys struct {
	mu      sync.Mutex
	orgs    []string
	revoked []string
}

func (k *keys) Issue(context.Context, string, string) (llmkeys.Key, error) {
	return llmkeys.Key{Value: "vk", BaseURL: "http://llm.test/v1"}, nil
}

func (k *keys) RevokeSession(_ context.Context, id, _ string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.revoked = append(k.revoked, id)
	return nil
}

func (k *keys) RevokeOrg(_ context.Context, org, _ string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.orgs = append(k.orgs, org)
	return nil
}

func (k *keys) orgRevoked(org string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.orgs, org)
}

// world: the API (credentials), a real gateway with the simulated sandbox
// provider, and the enforcer's deps pausing through that gateway.
type world struct {
	api   *apitest.Env
	codec *schemas.Codec
	store *sessions.Store
	prov  *agentsim.Provider
	hubs  *hub.Manager
	keys  *keys
	deps  enforcer.Deps
	org   string
	user  string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	e := apitest.New(t, []func(*api.Server) error{identity.Register})
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	prov := agentsim.NewProvider(agentsim.Options{})
	t.Cleanup(prov.Close)
	w := &world{api: e, codec: codec, store: &sessions.Store{Pool: e.Deps.Pool, Codec: codec}, prov: prov, keys: &keys{}}
	g := gatewaytest.Start(t, gateway.Deps{Cfg: e.Deps.Cfg, Pool: e.Deps.Pool, Redis: e.Deps.Redis, Codec: codec,
		Sessions: w.store, Authenticator: e.Server.Authenticator()}, hub.Deps{Provider: prov, LLMKeys: w.keys})
	w.hubs = g.Hubs
	w.deps = enforcer.Deps{Pool: e.Deps.Pool, Pauser: enforcer.GatewayPauser{C: g.ServiceClient("enforcer")}, Keys: w.keys,
		Log: slog.New(slog.DiscardHandler)}
	u := e.NewUser(t)
	w.org, w.user = u.OrgID, u.ID
	w.setState(t, "active")
	return w
}

func (w *world) setState(t *testing.T, state string) {
	t.Helper()
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `UPDATE organizations SET billing_state = $2 WHERE id = $1`, w.org, state); err != nil {
		t.Fatal(err)
	}
}

// running starts a session's sandbox through the gateway's hub.
func (w *world) running(t *testing.T) string {
	t.Helper()
	id := sessionstest.New(t, w.api.Deps.Pool, w.org, sessionstest.Options{CreatedBy: w.user})
	h, err := w.hubs.Hub(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return id
}

func (w *world) get(t *testing.T, id string) sessions.Session {
	t.Helper()
	s, err := w.store.Get(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func creditPaused(s sessions.Session) bool {
	return s.Status == sessions.StatusPaused && s.PauseReason != nil && *s.PauseReason == sessions.PauseCreditLimit &&
		s.SnapshotID != nil
}

// runGroup runs the enforcer group on billing.state until the test ends and
// returns a producer.
func (w *world) runGroup(t *testing.T) *kgo.Client {
	t.Helper()
	k := consumerstest.New(t, consumerstest.Options{Partitions: 3}, enforcer.Group)
	k.Start(enforcer.Group, enforcer.Handler(w.deps), consumers.Config{
		Codec:          w.codec,
		Retry:          consumers.RetryOptions{MaxAttempts: 3, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		CommitInterval: 100 * time.Millisecond,
		ClientOpts:     []kgo.Opt{kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
	})
	return k.Client
}

func (w *world) publish(t *testing.T, cl *kgo.Client, from, to string) {
	t.Helper()
	rec, err := kafka.EventRecord(w.codec, topics.BillingState, w.org, schemas.New(w.org, &schemas.BillingState{FromState: from, ToState: to,
		Reason: "balance_depleted"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// billing.state exhausted: every running session of the org is paused with
// a snapshot and credit_limit, its keys revoked; other orgs are untouched.
func TestExhaustedPausesRunningSessions(t *testing.T) {
	w := newWorld(t)
	a, b := w.running(t), w.running(t)
	cl := w.runGroup(t)
	w.setState(t, "exhausted")
	w.publish(t, cl, "trial", "exhausted")
	testenv.Eventually(t, 20*time.Second, "both sessions paused for the credit limit", func() bool {
		return creditPaused(w.get(t, a)) && creditPaused(w.get(t, b))
	})
	if !w.keys.orgRevoked(w.org) {
		t.Fatal("the organization's LLM keys were not revoked")
	}
	for _, id := range []string{a, b} {
		if _, alive := w.prov.Server(id); alive {
			t.Fatalf("sandbox of %s still running", id)
		}
	}
}

// A pause that fails (the provider's snapshot fails: the gateway answers
// 500) leaves the session running; the sweeper retries until it is paused.
func TestFailedPauseIsRetriedBySweeper(t *testing.T) {
	w := newWorld(t)
	id := w.running(t)
	w.setState(t, "suspended")
	w.prov.FailSnapshots(2)
	res, err := w.deps.EnforceOrg(context.Background(), w.org)
	if err != nil || res.Failed != 1 || res.Paused != 0 {
		t.Fatalf("first enforcement: %+v %v, want one failure", res, err)
	}
	if s := w.get(t, id); s.Status != sessions.StatusRunning {
		t.Fatalf("after a failed pause: %s, want still running", s.Status)
	}
	sw := enforcer.Sweeper{Deps: w.deps}
	var total enforcer.Result
	testenv.Eventually(t, 20*time.Second, "the sweeper to pause the session", func() bool {
		r, err := sw.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		total.Failed += r.Failed
		total.Paused += r.Paused
		return creditPaused(w.get(t, id))
	})
	if total.Failed != 1 || total.Paused != 1 {
		t.Fatalf("sweeps %+v, want one more failure then the pause", total)
	}
	// Nothing left: the next sweep has no work.
	if r, err := sw.Sweep(context.Background()); err != nil || r != (enforcer.Result{}) {
		t.Fatalf("sweep after: %+v %v", r, err)
	}
}

// creditsOnFirstPause is a Pauser that adds credits (state back to
// active) right after its first pause, as a purchase landing mid-way.
type creditsOnFirstPause struct {
	enforcer.Pauser
	w     *world
	t     *testing.T
	mu    sync.Mutex
	calls int
}

func (p *creditsOnFirstPause) Pause(ctx context.Context, orgID, id, reason string) error {
	err := p.Pauser.Pause(ctx, orgID, id, reason)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.calls == 1 {
		p.w.setState(p.t, "active")
	}
	return err
}

// Credits added (state back to active) stop further pauses: the state is
// re-checked right before each pause, so an event handled late, or a
// sweep, pauses nothing more.
func TestActiveAgainStopsPauses(t *testing.T) {
	w := newWorld(t)
	a, b := w.running(t), w.running(t)
	w.setState(t, "exhausted")
	d := w.deps
	d.Concurrency = 1
	p := &creditsOnFirstPause{Pauser: d.Pauser, w: w, t: t}
	d.Pauser = p
	res, err := d.EnforceOrg(context.Background(), w.org)
	if err != nil || res.Paused != 1 || res.Skipped != 1 {
		t.Fatalf("enforcement: %+v %v, want one pause then a stop", res, err)
	}
	pausedA, pausedB := creditPaused(w.get(t, a)), creditPaused(w.get(t, b))
	if pausedA == pausedB {
		t.Fatalf("paused a=%v b=%v, want exactly one", pausedA, pausedB)
	}
	// A stale exhausted event (the org is active now) and the sweeper
	// leave the other session running.
	cl := w.runGroup(t)
	w.publish(t, cl, "trial", "exhausted")
	sw := enforcer.Sweeper{Deps: d}
	if r, err := sw.Sweep(context.Background()); err != nil || r != (enforcer.Result{}) {
		t.Fatalf("sweep of an active org: %+v %v", r, err)
	}
	// The event is handled once the group has committed it.
	testenv.Eventually(t, 20*time.Second, "the stale event to be handled", func() bool { return committed(t, cl) })
	still := a
	if pausedA {
		still = b
	}
	if s := w.get(t, still); s.Status != sessions.StatusRunning {
		t.Fatalf("session %s: %s after credits were added, want running", still, s.Status)
	}
	if p.calls != 1 {
		t.Fatalf("%d pauses, want 1", p.calls)
	}
}

// committed reports whether the enforcer group committed every record of
// billing.state.
func committed(t *testing.T, cl *kgo.Client) bool {
	t.Helper()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, topics.BillingState)
	if err != nil {
		return false
	}
	offs, err := adm.FetchOffsets(ctx, enforcer.Group.Name)
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		c, found := offs.Lookup(o.Topic, o.Partition)
		if o.Offset > 0 && (!found || c.At < o.Offset) {
			ok = false
		}
	})
	return ok
}
