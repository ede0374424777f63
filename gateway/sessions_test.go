package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/client/runsessions"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Creation: the creator and org come from the credential; the idempotency
// key (header or body) returns the same session; platform-only fields are
// refused from people; services must name the organization.
func TestCreateSession(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	ctx := context.Background()
	c := g.c(owner.Token)

	s, err := c.CreateSession(ctx, protocol.CreateSessionRequest{Title: "first", IdempotencyKey: "k-1", OrgID: owner.OrgID})
	if err != nil || !s.Created || s.CreatedBy == nil || *s.CreatedBy != owner.ID || s.OrgID != owner.OrgID ||
		s.Status != sessions.StatusStarting || s.ClientType != "api" || s.SandboxMode != "deferred" {
		t.Fatalf("%+v %v", s, err)
	}
	again, err := c.CreateSession(ctx, protocol.CreateSessionRequest{Title: "second", IdempotencyKey: "k-1"})
	if err != nil || again.Created || again.ID != s.ID || again.Title != "first" {
		t.Fatalf("retry: %+v %v", again, err)
	}
	// The key may come in the body instead of the header.
	st, body := call(t, "POST", g.url+"/proliferate/sessions", owner.Token, map[string]any{"idempotency_key": "k-1"}, nil)
	var b protocol.Session
	_ = json.Unmarshal(body, &b)
	if st != 200 || b.ID != s.ID {
		t.Fatalf("body key: %d %s", st, body)
	}
	// Deferred: nothing started.
	if w.prov.Created() != 0 {
		t.Fatal("a deferred session started a sandbox")
	}
	for name, req := range map[string]map[string]any{
		"run id":           {"run_id": uuid.NewString()},
		"automation type":  {"session_type": "automation"},
		"other org":        {"org_id": uuid.NewString()},
		"setup w/o config": {"session_type": "setup"},
		"unknown mode":     {"sandbox_mode": "eventually"},
	} {
		if st, body := call(t, "POST", g.url+"/proliferate/sessions", owner.Token, req, nil); st != 422 {
			t.Fatalf("%s: %d %s", name, st, body)
		}
	}
	// An unknown field is a validation failure (422, naming it), as in
	// the REST API; only a body that is not JSON is 400.
	if st, body := call(t, "POST", g.url+"/proliferate/sessions", owner.Token, map[string]any{"user_id": owner.ID}, nil); st != 422 ||
		errorCode(t, body) != "validation_failed" {
		t.Fatalf("unknown field: %d %s", st, body)
	}
	if resp, body := testenv.Request(t, "POST", g.url+"/proliferate/sessions", `{"title":`, map[string]string{"Authorization": "Bearer " + owner.Token}); resp.StatusCode != 400 ||
		errorCode(t, body) != "bad_request" {
		t.Fatalf("not JSON: %d %s", resp.StatusCode, body)
	}
	// Another org's configuration is not usable.
	stranger := w.api.NewUser(t)
	cfg := sessionstest.Configuration(t, w.api.Deps.Pool, stranger.OrgID, "theirs")
	if _, err := c.CreateSession(ctx, protocol.CreateSessionRequest{ConfigurationID: &cfg}); !isStatus(err, 422) {
		t.Fatalf("foreign configuration: %v", err)
	}
	// Services create headless sessions in the org they name.
	svc := g.c(w.serviceToken(t))
	h, err := svc.CreateSession(ctx, protocol.CreateSessionRequest{OrgID: owner.OrgID, Title: "headless"})
	if err != nil || h.CreatedBy != nil || h.OrgID != owner.OrgID {
		t.Fatalf("service: %+v %v", h, err)
	}
}

func isStatus(err error, status int) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == status
}

// The concurrent-session limit of the store is a 409 session_limit.
func TestCreateSessionLimit(t *testing.T) {
	w := newWorld(t)
	w.store.MaxConcurrent = 1
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	c := g.c(owner.Token)
	if _, err := c.CreateSession(context.Background(), protocol.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateSession(context.Background(), protocol.CreateSessionRequest{})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 409 || e.Code != "session_limit" {
		t.Fatalf("%v", err)
	}
}

// A message with an Idempotency-Key is sent to the agent once however often
// it is posted; without a runtime yet, posting starts it (deferred mode).
func TestMessageSentOncePerIdempotencyKey(t *testing.T) {
	w, g, owner, sid := newSessionWorld(t)
	c := g.c(owner.Token)
	ctx := context.Background()
	for i := range 3 {
		sent, err := c.PostMessage(ctx, sid, "fix the tests", "msg-1")
		if err != nil || sent != (i == 0) {
			t.Fatalf("post %d: sent=%v %v", i, sent, err)
		}
	}
	if _, err := c.PostMessage(ctx, sid, "and the docs", "msg-2"); err != nil {
		t.Fatal(err)
	}
	sim, ok := w.prov.Server(sid)
	if !ok {
		t.Fatal("no sandbox was started")
	}
	testenv.Eventually(t, 5*time.Second, "two prompts", func() bool { return len(sim.Prompts()) == 2 })
	if p := sim.Prompts(); p[0] != "fix the tests" || p[1] != "and the docs" {
		t.Fatalf("prompts %q", p)
	}
	if _, err := c.PostMessage(ctx, sid, "   ", ""); !isStatus(err, 422) {
		t.Fatalf("empty prompt: %v", err)
	}
}

// A WebSocket client prompts and streams the answer; cancel aborts a turn.
func TestWebSocketPromptAndCancel(t *testing.T) {
	w, g, owner, sid := newSessionWorld(t)
	msgs := make(chan client.Message, 1024)
	conn, err := g.c(owner.Token).Connect(context.Background(), sid, client.Handler{OnMessage: func(m client.Message) { msgs <- m }})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitFor := func(typ string) client.Message {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			select {
			case m := <-msgs:
				t.Logf("got %s", m.Raw)
				if m.Type == typ {
					return m
				}
			case <-deadline:
				t.Fatalf("no %s; logs:\n%s", typ, w.logs.String())
			}
		}
	}
	waitFor(protocol.MsgInit)
	testenv.Eventually(t, 10*time.Second, "prompt accepted", func() bool { return conn.Prompt("[[tokens:5]]") == nil })
	var tok protocol.TokenMessage
	if err := waitFor(protocol.MsgToken).Decode(&tok); err != nil || tok.Token == "" {
		t.Fatalf("%+v %v", tok, err)
	}
	waitFor(protocol.MsgMessageComplete)
	if err := conn.Prompt("[[hang]]"); err != nil {
		t.Fatal(err)
	}
	sim := func() bool { s, ok := w.prov.Server(sid); return ok && len(s.Prompts()) == 2 }
	testenv.Eventually(t, 10*time.Second, "second prompt reached the agent", sim)
	if err := conn.Cancel(); err != nil {
		t.Fatal(err)
	}
	waitFor(protocol.MsgMessageCancelled)
}

// Two gateway instances share Redis: the one that owns the session streams
// it; the other closes the WebSocket with 4009 and the reason.
func TestNonOwnerInstanceRefusesWebSocket(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(t, "a"), w.start(t, "b")
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	st, ca := dialWS(t, a, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, ca, protocol.MsgInit)
	st, cb := dialWS(t, b, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	_ = cb.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := cb.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != protocol.CloseNotOwner || ce.Text != "session is owned by another gateway instance" {
		t.Fatalf("non-owner: %v", err)
	}
	// HTTP prompts on the non-owner are a retryable 503, not a failure.
	st, body := call(t, "POST", b.url+"/proliferate/"+sid+"/message", owner.Token, map[string]string{"content": "hi"}, nil)
	if st != http.StatusServiceUnavailable || errorCode(t, body) != "not_owner" {
		t.Fatalf("%d %s", st, body)
	}
}

// RunSessions (runs.Sessions over the gateway with a service token):
// idempotent creation of an automation session started immediately, the
// prompt sent once per key, and the session's state; refusals are
// ErrSessionRejected; another org's or a missing session does not exist.
func TestRunSessions(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	runID, _ := runningRun(t, w, owner.OrgID)
	var autoID string
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT automation_id::text FROM automation_runs WHERE id = $1`, runID).Scan(&autoID); err != nil {
		t.Fatal(err)
	}
	// The service credential comes from a token source (service tokens
	// expire); it is minted once and reused.
	c := g.c("")
	var mints atomic.Int32
	c.TokenSource = client.ServiceTokens(time.Hour, func(ttl time.Duration) (string, error) {
		mints.Add(1)
		return identity.IssueServiceToken(w.api.Deps.Cfg.ServiceToken, "worker", ttl)
	})
	rs := runsessions.New(c)
	ctx := context.Background()
	req := runs.SessionRequest{IdempotencyKey: "run:" + runID + ":session", OrgID: owner.OrgID, RunID: runID,
		AutomationID: autoID, Title: "Fix bug"}
	id, err := rs.CreateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := rs.CreateSession(ctx, req); err != nil || again != id {
		t.Fatalf("retry gave %s (%v), want %s", again, err, id)
	}
	s, err := w.store.Get(ctx, owner.OrgID, id)
	if err != nil || s.SessionType != "automation" || s.ClientType != "automation" || s.SandboxMode != "immediate" ||
		s.RunID == nil || *s.RunID != runID || s.AutomationID == nil || *s.AutomationID != autoID || s.CreatedBy != nil {
		t.Fatalf("%+v %v", s, err)
	}
	// Immediate: the sandbox starts without anyone connecting.
	testenv.Eventually(t, 10*time.Second, "sandbox started", func() bool {
		st, err := rs.SessionState(ctx, owner.OrgID, id)
		return err == nil && st.Exists && st.Status == sessions.StatusRunning && st.SandboxAlive
	})
	for range 2 {
		if err := rs.SendPrompt(ctx, owner.OrgID, id, "run_id: "+runID, "run:"+runID+":prompt"); err != nil {
			t.Fatal(err)
		}
	}
	sim, _ := w.prov.Server(id)
	testenv.Eventually(t, 5*time.Second, "prompt delivered", func() bool { return sim != nil && len(sim.Prompts()) == 1 })
	stranger := w.api.NewUser(t)
	for _, org := range []string{stranger.OrgID, owner.OrgID} {
		sid := id
		if org == owner.OrgID {
			sid = uuid.NewString()
		}
		if st, err := rs.SessionState(ctx, org, sid); err != nil || st.Exists {
			t.Fatalf("%+v %v", st, err)
		}
	}
	// A permanent refusal (a configuration of another org) is rejected.
	cfg := uuid.NewString()
	bad := req
	bad.IdempotencyKey, bad.ConfigurationID = "run:x:session", &cfg
	if _, err := rs.CreateSession(ctx, bad); !errors.Is(err, runs.ErrSessionRejected) {
		t.Fatalf("%v", err)
	}
	if err := rs.SendPrompt(ctx, stranger.OrgID, id, "x", "k"); !errors.Is(err, runs.ErrSessionRejected) {
		t.Fatalf("prompt to another org's session: %v", err)
	}
	if mints.Load() != 1 {
		t.Fatalf("minted %d service tokens", mints.Load())
	}
}

// The dashboard API's runtime (service credential, org-scoped): start
// brings the sandbox up, snapshot keeps it running, pause stops it and marks
// the session paused; another org's session is not found; people other
// than the creator cannot pause.
func TestSessionRuntimeStartSnapshotPause(t *testing.T) {
	w := newWorld(t)
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, "member")
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	rt := client.NewSessionRuntime(g.c(w.serviceToken(t)))
	ctx := context.Background()
	if err := rt.Start(ctx, owner.OrgID, sid); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "running", func() bool {
		s, err := w.store.Get(ctx, "", sid)
		return err == nil && s.Status == sessions.StatusRunning
	})
	snap, err := rt.Snapshot(ctx, owner.OrgID, sid)
	if err != nil || snap == "" {
		t.Fatalf("%q %v", snap, err)
	}
	if _, err := g.c(member.Token).Pause(ctx, sid); !isStatus(err, 403) || !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("member pause: %v", err)
	}
	if err := rt.Pause(ctx, w.api.NewUser(t).OrgID, sid); !isStatus(err, 404) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("other org: %v", err)
	}
	if err := rt.Pause(ctx, owner.OrgID, sid); err != nil {
		t.Fatal(err)
	}
	s, err := w.store.Get(ctx, "", sid)
	if err != nil || s.Status != sessions.StatusPaused || s.SnapshotID == nil {
		t.Fatalf("%+v %v", s, err)
	}
}
