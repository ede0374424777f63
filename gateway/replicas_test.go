package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/meter"
)

// replica is one gateway process of a multi-gateway installation: its own
// hub manager (instance id), its own sandbox provider, its address
// registered (AdvertiseURL); Postgres and Redis are shared.
type replica struct {
	*gw
	prov *agentsim.Provider
	id   string
}

func (w *world) startReplica(t *testing.T, name string) *replica {
	t.Helper()
	prov := agentsim.NewProvider(agentsim.Options{TokenDelay: 2 * time.Millisecond})
	t.Cleanup(prov.Close)
	g := w.startGateway(t, gwOptions{Instance: name, Provider: prov,
		// Fast lease renewals: the owner's sandbox checks (and with them the
		// liveness heartbeat) follow its provider closely.
		Hub: func(d *hub.Deps) { d.RenewEvery = 20 * time.Millisecond }, Advertise: true})
	return &replica{gw: g, prov: prov, id: g.hubs.InstanceID()}
}

// runningOn starts the session's runtime on r (through r's OpenCode proxy)
// and returns its sandbox id.
func runningOn(t *testing.T, w *world, r *replica, sid, token string) string {
	t.Helper()
	resp, body := testenv.Request(t, "GET", proxyURL(r.gw, sid, token, "session/status"), "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("start on %s: %d %s", r.id, resp.StatusCode, body)
	}
	sess, err := w.store.Get(context.Background(), "", sid)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != sessions.StatusRunning || sess.SandboxID == nil {
		t.Fatalf("session %s after start: %s", sid, sess.Status)
	}
	if owner, _ := hub.OwnerOf(context.Background(), w.api.Deps.Redis, sid); owner != r.id {
		t.Fatalf("owner %q, want %q", owner, r.id)
	}
	return *sess.SandboxID
}

func livenessRow(t *testing.T, w *world, sid string) (status string, failures int) {
	t.Helper()
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT status, alive_check_failures FROM sessions WHERE id = $1`,
		sid).Scan(&status, &failures); err != nil {
		t.Fatal(err)
	}
	return status, failures
}

// The compute meter runs on one replica (b here) and must not judge
// another replica's sandboxes by its own provider: a healthy session owned
// by a stays running however many cycles b's meter runs; when a's sandbox
// really dies, b's meter pauses the session (sandbox_dead) on its third
// consecutive failed check, as with one gateway.
func TestMeterOnAnotherReplicaAsksTheOwner(t *testing.T) {
	w := newWorld(t)
	a, b := w.startReplica(t, "a"), w.startReplica(t, "b")
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbID := runningOn(t, w, a, sid, owner.Token)
	ctx := context.Background()
	newMeter := func(d meter.Deps) *meter.Meter {
		d.Pool, d.Codec, d.Sessions, d.Interval = w.api.Deps.Pool, w.codec, w.store, time.Second
		m, err := meter.New(d)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// The problem: b's provider does not know a's sandbox, so a meter that
	// asks it counts a failure for a healthy session (three = paused).
	if _, err := newMeter(meter.Deps{Provider: b.prov}).Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if st, f := livenessRow(t, w, sid); st != sessions.StatusRunning || f != 1 {
		t.Fatalf("provider-only meter on b: %s, %d failures; want running, 1", st, f)
	}

	// Liveness as the owner sees it: alive, the failure is forgotten.
	mtr := newMeter(meter.Deps{Provider: b.prov, Liveness: hub.Liveness{Redis: w.api.Deps.Redis, Provider: b.prov}})
	for i := range billing.LivenessFailures + 1 {
		res, err := mtr.Cycle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Only this session is judged: the package's earlier tests leave
		// running sessions behind whose owners are gone, and the meter
		// rightly counts (and pauses) those as dead.
		if res.Failed != 0 {
			t.Fatalf("cycle %d on b: %+v", i, res)
		}
		if st, f := livenessRow(t, w, sid); st != sessions.StatusRunning || f != 0 {
			t.Fatalf("cycle %d on b: %s, %d failures; want running, 0", i, st, f)
		}
	}

	// a's sandbox dies: a's provider says so, a drops the heartbeat.
	a.prov.Kill(sid)
	lv := hub.Liveness{Redis: w.api.Deps.Redis, Provider: b.prov}
	testenv.Eventually(t, 10*time.Second, "a's heartbeat of the dead sandbox to go", func() bool {
		alive, err := lv.SandboxAlive(ctx, sid, sbID, a.prov.Name())
		return err == nil && !alive
	})
	for i := 1; i <= billing.LivenessFailures; i++ {
		res, err := mtr.Cycle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, f := livenessRow(t, w, sid)
		if i < billing.LivenessFailures {
			if st != sessions.StatusRunning || f != i || res.Failed != 0 {
				t.Fatalf("failed check %d: %s, %d failures, %+v", i, st, f, res)
			}
			continue
		}
		if res.Dead < 1 || res.Paused < 1 || st != sessions.StatusPaused {
			t.Fatalf("failed check %d: %s, %+v; want paused", i, st, res)
		}
	}
	sess, err := w.store.Get(ctx, "", sid)
	if err != nil {
		t.Fatal(err)
	}
	if sess.PauseReason == nil || *sess.PauseReason != meter.PauseReason {
		t.Fatalf("pause reason %v, want %s", sess.PauseReason, meter.PauseReason)
	}
}

// With no owner and no heartbeat the owner process is gone: a sandbox the
// asking replica's provider does not know (a local sandbox that died with
// its gateway) is dead, one it knows alive (a cloud sandbox outliving its
// gateway) is alive; an owner without a heartbeat is not alive.
func TestLivenessWithoutOwner(t *testing.T) {
	w := newWorld(t)
	rdb := w.api.Deps.Redis
	prov := agentsim.NewProvider(agentsim.Options{})
	t.Cleanup(prov.Close)
	owner := w.api.NewUser(t)
	ctx := context.Background()
	lv := hub.Liveness{Redis: rdb, Provider: prov}

	gone := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	if alive, err := lv.SandboxAlive(ctx, gone, "sim-gone-1", prov.Name()); err != nil || alive {
		t.Fatalf("ownerless unknown sandbox: %v %v, want dead", alive, err)
	}

	kept := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sb, err := prov.EnsureSandbox(ctx, sandbox.Spec{SessionID: kept, OrgID: owner.OrgID})
	if err != nil {
		t.Fatal(err)
	}
	if alive, err := lv.SandboxAlive(ctx, kept, sb.ID, prov.Name()); err != nil || !alive {
		t.Fatalf("ownerless sandbox the provider runs: %v %v, want alive", alive, err)
	}
	if alive, err := lv.SandboxAlive(ctx, kept, sb.ID, "another-provider"); err != nil || alive {
		t.Fatalf("ownerless sandbox of another provider: %v %v, want dead", alive, err)
	}
	// An owner that does not renew the heartbeat (stalled, or it found the
	// sandbox dead) is believed over this replica's provider.
	if err := rdb.Set(ctx, "lease:owner:"+kept, "stalled-instance", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if alive, err := lv.SandboxAlive(ctx, kept, sb.ID, prov.Name()); err != nil || alive {
		t.Fatalf("owned sandbox without heartbeat: %v %v, want not alive", alive, err)
	}
}

// Commands sent to a replica that does not own the session are forwarded
// to the owner and succeed in one request: prompt, heartbeat, the agent
// proxy, a sandbox's tool callback, the session stream, and pauses (a person's, and the billing enforcer's through the
// gateway URL); a request already forwarded is never forwarded again.
func TestCommandsReachTheOwner(t *testing.T) {
	w := newWorld(t)
	a, b := w.startReplica(t, "a"), w.startReplica(t, "b")
	owner := w.api.NewUser(t)
	newSession := func() string {
		return sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	}

	sid := newSession()
	runningOn(t, w, a, sid, owner.Token)
	if st, body := call(t, "POST", b.url+"/proliferate/"+sid+"/message", owner.Token, map[string]string{"content": "hi"}, nil); st != http.StatusAccepted {
		t.Fatalf("prompt through b: %d %s", st, body)
	}
	if st, body := call(t, "POST", b.url+"/proliferate/"+sid+"/heartbeat", owner.Token, nil, nil); st != http.StatusNoContent {
		t.Fatalf("heartbeat through b: %d %s", st, body)
	}
	// The OpenCode proxy through b reaches a's sandbox.
	if resp, body := testenv.Request(t, "GET", proxyURL(b.gw, sid, owner.Token, "session/status"), "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("agent proxy through b: %d %s", resp.StatusCode, body)
	}
	// A tool callback of a's sandbox (with the token a's boot minted)
	// that lands on b runs on a.
	var onA, onB atomic.Int32
	registerEcho(a.gw, &onA)
	registerEcho(b.gw, &onB)
	var tok string
	for _, spec := range a.prov.Specs() {
		if spec.SessionID == sid {
			tok = spec.SandboxToken
		}
	}
	if st, res, body := toolCall(t, b.gw, tok, sid, "echo_test", "forwarded-1", map[string]int{"n": 1}); st != http.StatusOK || !res.Success {
		t.Fatalf("tool callback through b: %d %s", st, body)
	}
	if onA.Load() != 1 || onB.Load() != 0 {
		t.Fatalf("tool ran %d times on a, %d on b; want 1, 0", onA.Load(), onB.Load())
	}
	// The session stream through b is a's.
	st, ws := dialWS(t, b.gw, sid, owner.Token, false)
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("session stream through b: %d", st)
	}
	readUntil(t, ws, protocol.MsgInit)
	_ = ws.Close()
	// Loop guard: a request marked as forwarded is answered where it lands.
	st, body := call(t, "POST", b.url+"/proliferate/"+sid+"/message", owner.Token, map[string]string{"content": "again"},
		map[string]string{gateway.ForwardedHeader: "x"})
	if st != http.StatusServiceUnavailable || errorCode(t, body) != "not_owner" {
		t.Fatalf("forwarded request on a non-owner: %d %s", st, body)
	}
	if _, ok := b.hubs.Get(sid); !ok {
		t.Fatal("the non-owner served the marked request itself (it should have a hub that is not the owner)")
	}
	// A person's pause through b: one request, the session is paused by a.
	var v protocol.Session
	st, body = call(t, "POST", b.url+"/proliferate/"+sid+"/pause", owner.Token, nil, nil)
	if st != http.StatusOK {
		t.Fatalf("pause through b: %d %s", st, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != sessions.StatusPaused || v.PauseReason == nil || *v.PauseReason != "manual" {
		t.Fatalf("paused view: %s", body)
	}
	if a.prov.Snapshots() != 1 || b.prov.Created() != 0 {
		t.Fatalf("a snapshots %d, b sandboxes %d: the pause must be a's", a.prov.Snapshots(), b.prov.Created())
	}

	// The billing enforcer pauses through whichever replica its URL hits:
	// the first try lands.
	sid2 := newSession()
	runningOn(t, w, a, sid2, owner.Token)
	pauser := enforcer.GatewayPauser{C: client.New(b.url, w.serviceToken(t))}
	if err := pauser.Pause(context.Background(), owner.OrgID, sid2, sessions.PauseCreditLimit); err != nil {
		t.Fatalf("enforcer pause through b: %v", err)
	}
	sess, err := w.store.Get(context.Background(), "", sid2)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != sessions.StatusPaused || sess.PauseReason == nil || *sess.PauseReason != sessions.PauseCreditLimit {
		t.Fatalf("after the enforcer's pause: %s %v", sess.Status, sess.PauseReason)
	}
}

// An owner that cannot be reached (its process is gone but its leases and
// address have not expired yet) is a prompt 503 not_owner with
// Retry-After, not a hang.
func TestUnreachableOwnerIsNotOwner(t *testing.T) {
	w := newWorld(t)
	a, b := w.startReplica(t, "a"), w.startReplica(t, "b")
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	runningOn(t, w, a, sid, owner.Token)
	a.hs.CloseClientConnections()
	a.hs.Close() // a's listener is gone; its hubs still hold the leases

	hc := &http.Client{Timeout: 30 * time.Second} // a hang fails the test instead of blocking it
	for _, path := range []string{"/pause", "/message", "/heartbeat"} {
		req, err := http.NewRequest("POST", b.url+"/proliferate/"+sid+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+owner.Token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s through b: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != "not_owner" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s through b with a gone: %d %s", path, resp.StatusCode, body)
		}
	}
	if !strings.Contains(w.logs.String(), "forwarding to the session's owner failed") {
		t.Fatal("the failed forward was not logged")
	}
	sess, err := w.store.Get(context.Background(), "", sid)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != sessions.StatusRunning || b.prov.Created() != 0 {
		t.Fatalf("b acted on a's session: %s, %d sandboxes", sess.Status, b.prov.Created())
	}
}
