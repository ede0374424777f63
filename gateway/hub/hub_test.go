package hub_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestOwnerLeaseAcrossManagers(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	a := e.manager(t, e.deps(unique("gw-a-")))
	b := e.manager(t, e.deps(unique("gw-b-")))

	ha, ca := attach(t, a, id, e.principal())
	if owner, _ := hub.OwnerOf(ctx, e.rdb, id); owner != a.InstanceID() {
		t.Fatalf("owner = %q, want %q", owner, a.InstanceID())
	}
	ca.wait(t, protocol.MsgInit, nil)

	hb, err := b.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hb.Attach(ctx, &recClient{}, e.principal()); !errors.Is(err, hub.ErrNotOwner) {
		t.Fatalf("second instance Attach = %v, want ErrNotOwner", err)
	}
	if err := hb.EnsureRuntimeReady(ctx); !errors.Is(err, hub.ErrNotOwner) {
		t.Fatalf("second instance EnsureRuntimeReady = %v, want ErrNotOwner", err)
	}
	if err := hb.Prompt(ctx, e.principal(), "hi"); !errors.Is(err, hub.ErrNotOwner) {
		t.Fatalf("second instance Prompt = %v, want ErrNotOwner", err)
	}
	if e.prov.Created() != 1 {
		t.Fatalf("sandboxes created = %d, want 1 (the non-owner must not provision)", e.prov.Created())
	}
	// The owner keeps renewing.
	testenv.Eventually(t, 10*time.Second, "owner lease renewed past its TTL", func() bool {
		ttl, _ := e.rdb.PTTL(ctx, "lease:owner:"+id).Result()
		return ttl > 2*time.Second && ha.Owner()
	})
	if alive, _ := hub.RuntimeAlive(ctx, e.rdb, id); !alive {
		t.Fatal("runtime lease not set while the runtime is up")
	}

	// After the owner shuts down, the other instance takes over at once.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	a.Shutdown(sctx)
	cancel()
	if closed, code, _ := ca.closedWith(); !closed || code != protocol.CloseOwnershipLost {
		t.Fatalf("client after shutdown closed=%v code=%d", closed, code)
	}
	_, cb := attach(t, b, id, e.principal())
	cb.wait(t, protocol.MsgInit, nil)
	if owner, _ := hub.OwnerOf(ctx, e.rdb, id); owner != b.InstanceID() {
		t.Fatalf("owner after takeover = %q", owner)
	}
	// The sandbox was adopted, not recreated.
	if e.prov.Created() != 1 {
		t.Fatalf("sandboxes created = %d after takeover, want 1", e.prov.Created())
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Add(f.off)
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.off += d
	f.mu.Unlock()
}

func TestRenewalLagBeyondTTLTerminatesHub(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	clock := &fakeClock{}
	d := e.deps(unique("gw-"))
	d.Now = clock.Now
	m := e.manager(t, d)
	h, c := attach(t, m, id, e.principal())
	c.wait(t, protocol.MsgStatus, running)

	// The process "stalls" longer than the owner TTL between renewals.
	clock.Advance(d.OwnerTTL + time.Second)
	testenv.Eventually(t, 10*time.Second, "hub self-terminated", func() bool {
		closed, code, reason := c.closedWith()
		return closed && code == protocol.CloseOwnershipLost && reason == protocol.ReasonOwnershipLost
	})
	<-h.Done()
	if _, ok := m.Get(id); ok {
		t.Fatal("terminated hub still registered")
	}
	if owner, _ := hub.OwnerOf(ctx, e.rdb, id); owner != "" {
		t.Fatalf("lease still held by %q after self-termination", owner)
	}
	if _, err := h.Attach(ctx, &recClient{}, e.principal()); !errors.Is(err, hub.ErrClosed) {
		t.Fatalf("Attach on terminated hub = %v", err)
	}
	// A fresh hub (here or elsewhere) can take over.
	other := e.manager(t, e.deps(unique("gw-")))
	_, c2 := attach(t, other, id, e.principal())
	c2.wait(t, protocol.MsgInit, nil)
}

func TestStolenLeaseTerminatesHub(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	m := e.manager(t, e.deps(unique("gw-")))
	h, c := attach(t, m, id, e.principal())
	// Another instance got the lease (e.g. it expired during a partition).
	if err := e.rdb.Set(ctx, "lease:owner:"+id, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if closed, code, _ := c.closedWith(); !closed || code != protocol.CloseOwnershipLost {
		t.Fatalf("client closed=%v code=%d", closed, code)
	}
	if owner, _ := hub.OwnerOf(ctx, e.rdb, id); owner != "someone-else" {
		t.Fatalf("the terminated hub must not clear another owner's lease (owner %q)", owner)
	}
}

func TestPromptTranslatesEventsInOrder(t *testing.T) {
	e := newEnv(t, agentsim.Options{TokenDelay: time.Millisecond})
	ctx := context.Background()
	id := e.session(t, sessionstest.Options{})
	d := e.deps(unique("gw-"))
	d.TelemetryEvery = 50 * time.Millisecond
	m := e.manager(t, d)
	h, c := attach(t, m, id, e.principal())
	c.wait(t, protocol.MsgStatus, running)

	if err := h.Prompt(ctx, e.principal(), "[[tokens:30]][[tool:bash]][[pr:https://github.com/acme/app/pull/7]]"); err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgMessageComplete, nil)

	var want strings.Builder
	for i := 0; i < 30; i++ {
		want.WriteString("tok" + strconv.Itoa(i) + " ")
	}
	want.WriteString("Opened https://github.com/acme/app/pull/7")
	if got := c.tokens(); got != want.String() {
		t.Fatalf("tokens joined = %q, want %q", got, want.String())
	}
	// Order of the protocol messages (tokens collapsed).
	var seqTypes []string
	for _, typ := range c.types() {
		if typ == protocol.MsgStatus || typ == protocol.MsgInit {
			continue
		}
		if n := len(seqTypes); typ == protocol.MsgToken && n > 0 && seqTypes[n-1] == protocol.MsgToken {
			continue
		}
		seqTypes = append(seqTypes, typ)
	}
	wantSeq := []string{protocol.MsgMessage, protocol.MsgMessage, protocol.MsgToken, protocol.MsgTextPartComplete, protocol.MsgToolStart, protocol.MsgToolMetadata,
		protocol.MsgToolEnd, protocol.MsgToken, protocol.MsgTextPartComplete, protocol.MsgMessageComplete}
	if strings.Join(seqTypes, ",") != strings.Join(wantSeq, ",") {
		t.Fatalf("message sequence\n got %v\nwant %v", seqTypes, wantSeq)
	}
	if !c.has(protocol.MsgMessage, func(f map[string]any) bool {
		msg := f["message"].(map[string]any)
		return msg["role"] == "user" && strings.HasPrefix(msg["content"].(string), "[[tokens:30]]")
	}) {
		t.Fatal("no user message broadcast")
	}
	if !c.has(protocol.MsgToolEnd, func(f map[string]any) bool {
		return f["tool"] == "bash" && f["status"] == "completed" && f["result"] == "bash done\n"
	}) {
		t.Fatal("tool_end lacks status/result")
	}
	if n := c.count(protocol.MsgToken); n >= 31 {
		t.Fatalf("%d token frames for 31 deltas: not batched", n)
	}
	c.wait(t, protocol.MsgStatus, agentIdle)

	// get_messages answers the requester only, with history from the agent.
	other := &recClient{}
	detach, err := h.Attach(ctx, other, e.principal())
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	other.wait(t, protocol.MsgInit, func(f map[string]any) bool { return len(f["messages"].([]any)) == 2 })
	h.HandleClientMessage(ctx, other, e.principal(), []byte(`{"type":"ping"}`))
	other.wait(t, protocol.MsgPong, nil)
	if c.has(protocol.MsgPong, nil) {
		t.Fatal("pong was broadcast to another client")
	}
	h.HandleClientMessage(ctx, other, e.principal(), []byte(`{"type":"bogus"}`))
	other.wait(t, protocol.MsgError, func(f map[string]any) bool { return f["code"] == "invalid_message" })

	// Telemetry reaches the session row periodically ...
	testenv.Eventually(t, 5*time.Second, "telemetry flushed", func() bool {
		s, err := e.store.Get(ctx, "", id)
		return err == nil && s.ToolCalls == 1 && s.MessagesExchanged == 2 && len(s.PRURLs) == 1 &&
			s.LatestTask != nil && *s.LatestTask == "Running bash"
	})
	// ... and on termination, without double counting.
	if err := h.Terminate(ctx, "completed", "success", "done"); err != nil {
		t.Fatal(err)
	}
	s, err := e.store.Get(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Status != sessions.StatusStopped || s.ToolCalls != 1 || s.MessagesExchanged != 2 || len(s.PRURLs) != 1 {
		t.Fatalf("after terminate: status=%s tools=%d msgs=%d prs=%v task=%v", s.Status, s.ToolCalls, s.MessagesExchanged, s.PRURLs, s.LatestTask)
	}
	if closed, code, _ := c.closedWith(); !closed || code != protocol.CloseSessionEnded {
		t.Fatalf("client closed=%v code=%d after terminate", closed, code)
	}
	if alive, _ := hub.RuntimeAlive(ctx, e.rdb, id); alive {
		t.Fatal("runtime lease left after terminate")
	}
}

func TestTokenBatching(t *testing.T) {
	e := newEnv(t, agentsim.Options{TokenDelay: time.Millisecond})
	ctx := context.Background()
	id := e.session(t, sessionstest.Options{})
	d := e.deps(unique("gw-"))
	d.TokenBatch = 100 * time.Millisecond
	m := e.manager(t, d)
	h, c := attach(t, m, id, e.principal())
	start := time.Now()
	if err := h.Prompt(ctx, e.principal(), "[[tokens:200]]"); err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgMessageComplete, nil)
	elapsed := time.Since(start)
	n := c.count(protocol.MsgToken)
	// At most one frame per batch window (plus the final flush).
	maxFrames := int(elapsed/d.TokenBatch) + 2
	if n < 1 || n > maxFrames {
		t.Fatalf("%d token frames in %s, want 1..%d", n, elapsed, maxFrames)
	}
	if strings.Count(c.tokens(), "tok") != 200 {
		t.Fatalf("lost tokens: %q", c.tokens())
	}
}

// stuckWriter never completes a write: the client's queue only grows.
type stuckWriter struct {
	block  chan struct{}
	closed chan int
}

func (w *stuckWriter) WriteFrame([]byte) error { <-w.block; return errors.New("closed") }
func (w *stuckWriter) CloseWith(code int, reason string) error {
	w.closed <- code
	return nil
}

func TestSlowClientIsDisconnected(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	d := e.deps(unique("gw-"))
	d.TokenBatch = -1 // one frame per delta: maximum pressure
	m := e.manager(t, d)
	h, fast := attach(t, m, id, e.principal())

	w := &stuckWriter{block: make(chan struct{}), closed: make(chan int, 1)}
	defer close(w.block)
	slow := hub.NewSocketClient(w, 16<<10)
	if _, err := h.Attach(ctx, slow, e.principal()); err != nil {
		t.Fatal(err)
	}
	if err := h.Prompt(ctx, e.principal(), "[[tokens:3000]]"); err != nil {
		t.Fatal(err)
	}
	fast.wait(t, protocol.MsgMessageComplete, nil)
	select {
	case code := <-w.closed:
		if code != protocol.CloseSlowClient {
			t.Fatalf("slow client closed with %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("slow client was not disconnected")
	}
	if got := strings.Count(fast.tokens(), "tok"); got != 3000 {
		t.Fatalf("fast client got %d tokens, want all 3000", got)
	}
	if st := h.Status(); st.Clients != 1 {
		t.Fatalf("clients = %d, want 1 (slow one dropped)", st.Clients)
	}
}

func TestCancelAndAgentErrors(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	m := e.manager(t, e.deps(unique("gw-")))
	h, c := attach(t, m, id, e.principal())
	if err := h.Prompt(ctx, e.principal(), "[[tokens:3]][[hang]]"); err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgStatus, func(f map[string]any) bool { return f["agent"] == "busy" })
	testenv.Eventually(t, 5*time.Second, "status busy", func() bool { return h.Status().Agent == protocol.AgentBusy })
	h.HandleClientMessage(ctx, c, e.principal(), []byte(`{"type":"cancel"}`))
	c.wait(t, protocol.MsgMessageCancelled, nil)
	c.wait(t, protocol.MsgStatus, agentIdle)
	if c.has(protocol.MsgMessageComplete, nil) {
		t.Fatal("cancelled turn also reported message_complete")
	}
	if c.has(protocol.MsgError, nil) {
		t.Fatal("abort surfaced as an error")
	}
	if err := h.Prompt(ctx, e.principal(), "[[error:rate limited]]"); err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgError, func(f map[string]any) bool { return f["code"] == "agent_error" && f["message"] == "rate limited" })

	// Only the creator (or a service) may prompt; sandbox tokens may not attach.
	stranger := &auth.Principal{Kind: auth.KindUser, UserID: "00000000-0000-0000-0000-000000000001", OrgID: e.org}
	if err := h.Prompt(ctx, stranger, "hi"); !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("stranger prompt = %v", err)
	}
	if err := h.Cancel(ctx, stranger); !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("stranger cancel = %v", err)
	}
	h.HandleClientMessage(ctx, c, stranger, []byte(`{"type":"prompt","content":"x"}`))
	c.wait(t, protocol.MsgError, func(f map[string]any) bool { return f["code"] == "forbidden" })
	if _, err := h.Attach(ctx, &recClient{}, &auth.Principal{Kind: auth.KindSandbox, SessionID: id}); !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("sandbox attach = %v", err)
	}
	if _, err := h.Attach(ctx, &recClient{}, &auth.Principal{Kind: auth.KindUser, UserID: e.user, OrgID: "other-org"}); !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("other-org attach = %v", err)
	}
	if err := h.Prompt(ctx, &auth.Principal{Kind: auth.KindService, Service: "worker"}, "[[tokens:1]]"); err != nil {
		t.Fatalf("service prompt = %v", err)
	}
}

func TestEnsureRuntimeReadyIsSingleFlight(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	ctx := context.Background()
	prompt := "[[tokens:2]] initial"
	id := e.session(t, sessionstest.Options{InitialPrompt: prompt})
	m := e.manager(t, e.deps(unique("gw-")))
	var hubs sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 20; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			h, err := m.Hub(ctx, id)
			if err != nil {
				errs <- err
				return
			}
			hubs.Store(h, true)
			errs <- h.EnsureRuntimeReady(ctx)
		}()
		go func() {
			defer wg.Done()
			h, err := m.Hub(ctx, id)
			if err != nil {
				errs <- err
				return
			}
			_, err = h.Attach(ctx, &recClient{}, e.principal())
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	hubs.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d hubs for one session", n)
	}
	if e.prov.Created() != 1 || len(e.prov.Specs()) != 1 {
		t.Fatalf("sandboxes created=%d ensure calls=%d, want 1/1", e.prov.Created(), len(e.prov.Specs()))
	}
	spec := e.prov.Specs()[0]
	if !auth.WellFormedSandboxToken(spec.SandboxToken) || spec.GatewayURL != "http://gateway.test" || spec.OrgID != e.org {
		t.Fatalf("spec: gateway %q org %q", spec.GatewayURL, spec.OrgID)
	}
	srv, _ := e.prov.Server(id)
	testenv.Eventually(t, 5*time.Second, "initial prompt sent", func() bool { return len(srv.Prompts()) == 1 })
	s, _ := e.store.Get(ctx, "", id)
	if s.Status != sessions.StatusRunning || s.InitialPromptSentAt == nil || s.SandboxID == nil || s.CodingAgentSessionID == nil {
		t.Fatalf("session after boot: %+v", s)
	}
	if got := srv.Prompts(); len(got) != 1 || got[0] != prompt {
		t.Fatalf("prompts = %q, want the initial prompt once", got)
	}
	// The boot's sandbox token authenticates this session.
	if sid, org, err := sessions.VerifySandboxToken(ctx, e.store.Pool, spec.SandboxToken); err != nil || sid != id || org != e.org {
		t.Fatalf("the boot's sandbox token: session %q org %q err %v", sid, org, err)
	}
}

func TestSSEReconnectAndSandboxLoss(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	m := e.manager(t, e.deps(unique("gw-")))
	h, c := attach(t, m, id, e.principal())
	srv, _ := e.prov.Server(id)
	srv.DropStreams()
	testenv.Eventually(t, 5*time.Second, "event stream reconnected", func() bool { return srv.Subscribers() == 1 })
	if err := h.Prompt(ctx, e.principal(), "after blip"); err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgMessageComplete, nil)
	if c.tokens() != "Echo: after blip" {
		t.Fatalf("tokens after reconnect = %q", c.tokens())
	}
	// The sandbox dies: the hub notices and boots a new one for its client.
	e.prov.Kill(id)
	testenv.Eventually(t, 10*time.Second, "new sandbox", func() bool { return e.prov.Created() == 2 && h.Status().RuntimeReady })
	if err := h.Prompt(ctx, e.principal(), "again"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "reply from new sandbox", func() bool { return strings.Contains(c.tokens(), "Echo: again") })
}

func TestPauseAndResumeFromSnapshot(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	m := e.manager(t, e.deps(unique("gw-")))
	h, c := attach(t, m, id, e.principal())
	sandboxID := h.Status().SandboxID
	h.HandleClientMessage(ctx, c, e.principal(), []byte(`{"type":"save_snapshot"}`))
	c.wait(t, protocol.MsgSnapshotResult, func(f map[string]any) bool { return f["success"] == true })
	if err := h.Pause(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	s, _ := e.store.Get(ctx, "", id)
	if s.Status != sessions.StatusPaused || s.SnapshotID == nil {
		t.Fatalf("after pause: %s snapshot=%v", s.Status, s.SnapshotID)
	}
	if closed, code, _ := c.closedWith(); !closed || code != protocol.CloseSessionEnded {
		t.Fatalf("client closed=%v code=%d", closed, code)
	}
	if ok, _ := e.prov.Alive(ctx, sandboxID); ok || sandboxID == "" {
		t.Fatal("sandbox still alive after pause")
	}
	// Attaching again resumes from the snapshot.
	h2, c2 := attach(t, m, id, e.principal())
	if h2 == h {
		t.Fatal("paused hub reused")
	}
	c2.wait(t, protocol.MsgStatus, running)
	specs := e.prov.Specs()
	if last := specs[len(specs)-1]; last.SnapshotID != *s.SnapshotID {
		t.Fatalf("resume spec snapshot = %q, want %q", last.SnapshotID, *s.SnapshotID)
	}
	s, _ = e.store.Get(ctx, "", id)
	if s.Status != sessions.StatusRunning {
		t.Fatalf("after resume: %s", s.Status)
	}
}

func TestIdleHubIsPausedAndEvicted(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	d := e.deps(unique("gw-"))
	d.IdleTTL = 200 * time.Millisecond
	d.IdleCheckEvery = 20 * time.Millisecond
	d.IdleGrace = 100 * time.Millisecond
	m := e.manager(t, d)
	h, _, detach := attachOnly(t, m, id, e.principal())
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	// A tool callback in flight keeps the session (and its hub) even
	// without clients.
	done := h.ToolCallStarted()
	detach()
	testenv.Eventually(t, 10*time.Second, "sweeps to look at the hub past its idle TTL", func() bool { return m.IdleKept() >= 3 })
	if _, ok := m.Get(id); !ok {
		t.Fatal("hub evicted while a tool call was in flight")
	}
	if s, _ := e.store.Get(ctx, "", id); s.Status != sessions.StatusRunning {
		t.Fatalf("snapshotted while a tool call was in flight: %s", s.Status)
	}
	done()
	// Idle: snapshotted and paused, then (no runtime, untouched) evicted.
	testenv.Eventually(t, 10*time.Second, "idle hub evicted", func() bool { _, ok := m.Get(id); return !ok })
	s, _ := e.store.Get(ctx, "", id)
	if s.Status != sessions.StatusPaused || s.PauseReason == nil || *s.PauseReason != sessions.PauseInactivity || s.SnapshotID == nil {
		t.Fatalf("idle session: status=%s reason=%v snapshot=%v", s.Status, s.PauseReason, s.SnapshotID)
	}
	// The lease is released as the evicted hub closes (just after it left
	// the registry).
	testenv.Eventually(t, 10*time.Second, "the owner lease released after eviction", func() bool {
		owner, _ := hub.OwnerOf(ctx, e.rdb, id)
		return owner == ""
	})
}
