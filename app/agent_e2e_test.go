package app_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/testenv"
)

// These tests run the whole platform with the real gateway, the local
// sandbox provider and the real OpenCode agent, talking to the scripted LLM
// the gateway serves in process (no model key). A [[script:NAME]] marker in
// a prompt picks the script the "model" plays.

// A webhook starts a run; the executor creates a real session through the
// gateway; the agent (scripted to call automation_complete with the run id
// and completion id of its prompt) finishes the run succeeded, and its
// session stops with that outcome.
func TestWebhookRunFinishedByTheAgent(t *testing.T) {
	p := startPipelineWith(t, "RUN_SESSIONS", "gateway")
	base := "http://" + p.dev.app.APIAddr()
	if code := apiCall(t, base, "PATCH", "/automations/"+p.automationID, p.token,
		map[string]any{"agent_instructions": "Triage the alert, then report. [[script:complete]]"}, nil); code != 200 {
		t.Fatalf("patch automation %d", code)
	}
	if code := p.send(t, []byte(`{"title":"Disk full on db-1"}`)); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}
	var runID, status string
	testenv.Eventually(t, 180*time.Second, "the agent to finish the run", func() bool {
		_ = p.dev.app.Pool.QueryRow(context.Background(), `SELECT id::text, status FROM automation_runs WHERE trigger_id = $1`,
			p.triggerID).Scan(&runID, &status)
		return status == "succeeded" || status == "failed" || status == "timed_out"
	})
	if status != "succeeded" {
		var reason, msg *string
		_ = p.dev.app.Pool.QueryRow(context.Background(), `SELECT status_reason, error_message FROM automation_runs WHERE id = $1`, runID).Scan(&reason, &msg)
		t.Fatalf("run ended %s (%v: %v)", status, deref(reason), deref(msg))
	}
	// The tool call is recorded and the session ends with the outcome just
	// after the agent got its answer.
	var sessStatus, outcome, clientType string
	var toolCalls int
	testenv.Eventually(t, 60*time.Second, "the session to stop with the run's outcome", func() bool {
		if err := p.dev.app.Pool.QueryRow(context.Background(), `SELECT s.status, coalesce(s.outcome, ''), s.client_type,
				(SELECT count(*) FROM session_tool_invocations i WHERE i.session_id = s.id AND i.status = 'completed'
					AND i.tool_name IN ('automation.complete', 'automation_complete'))
			FROM sessions s JOIN automation_runs r ON r.session_id = s.id WHERE r.id = $1`, runID).Scan(&sessStatus, &outcome, &clientType, &toolCalls); err != nil {
			t.Fatal(err)
		}
		return sessStatus == "stopped" && toolCalls == 1
	})
	if outcome != "succeeded" || clientType != "automation" {
		t.Fatalf("session %s outcome %q client %s, %d completions", sessStatus, outcome, clientType, toolCalls)
	}
	want := []string{"queued", "enriching", "ready", "running", "succeeded"}
	if got := lifecycleOf(t, p, runID, len(want)); !slices.Equal(got, want) {
		t.Fatalf("runs.lifecycle %v", got)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// frames collects a WebSocket client's frames by type.
type frames struct {
	mu   sync.Mutex
	list []client.Message
}

func (f *frames) add(m client.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, m)
}

func (f *frames) count(typ string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.list {
		if m.Type == typ {
			n++
		}
	}
	return n
}

// A person's WebSocket client prompts the real agent and receives the
// streamed tokens, the bash tool's start and end, and message_complete; the
// file the tool wrote is in the session's workspace. Then a slow answer is
// cancelled: message_cancelled.
func TestWebSocketPromptToolsAndCancel(t *testing.T) {
	dir := t.TempDir()
	cfg := devConfig(t, filepath.Join(dir, "kafka"), "RUN_SESSIONS", "gateway")
	p := &pipeline{dev: startDev(t, cfg)}
	base := "http://" + p.dev.app.APIAddr()
	var signup struct {
		AccessToken string `json:"access_token"`
	}
	if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": "ws-" + time.Now().Format("150405.000000") + "@example.com",
		"password": "correct horse battery", "name": "W"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	var sess struct {
		ID string `json:"id"`
	}
	if code := apiCall(t, base, "POST", "/sessions", signup.AccessToken, map[string]any{"title": "Try it"}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	gw := client.New("http://"+p.dev.app.GatewayAddr(), signup.AccessToken)
	var got frames
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := gw.Connect(ctx, sess.ID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 60*time.Second, "init", func() bool { return got.count(protocol.MsgInit) > 0 })

	if err := conn.Prompt("Make a file. [[script:bash]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "the answer to complete", func() bool { return got.count(protocol.MsgMessageComplete) > 0 })
	if got.count(protocol.MsgToolStart) == 0 || got.count(protocol.MsgToolEnd) == 0 || got.count(protocol.MsgToken) == 0 {
		t.Fatalf("frames: %d tool_start, %d tool_end, %d token", got.count(protocol.MsgToolStart), got.count(protocol.MsgToolEnd), got.count(protocol.MsgToken))
	}
	testenv.Eventually(t, 10*time.Second, "hello.txt in the workspace", func() bool {
		matches, _ := filepath.Glob(filepath.Join(cfg.SandboxDataDir, "sandboxes", sess.ID, "workspace", "hello.txt"))
		return len(matches) == 1
	})

	before := got.count(protocol.MsgToken)
	if err := conn.Prompt("Tell me a long story. [[script:slow]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the slow answer to stream", func() bool { return got.count(protocol.MsgToken) > before })
	if err := conn.Cancel(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "message_cancelled", func() bool { return got.count(protocol.MsgMessageCancelled) > 0 })

	// The agent works on after a cancel, and nothing of the cancelled
	// answer is streamed again (OpenCode sends the aborted part's final text
	// after the abort).
	completes := got.count(protocol.MsgMessageComplete)
	if err := conn.Prompt("Say hello. [[script:hello]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the next answer", func() bool { return got.count(protocol.MsgMessageComplete) > completes })
	got.mu.Lock()
	defer got.mu.Unlock()
	cancelled := ""
	for _, m := range got.list {
		switch m.Type {
		case protocol.MsgMessageCancelled:
			var mc protocol.MessageCancelledMessage
			_ = m.Decode(&mc)
			cancelled = mc.MessageID
		case protocol.MsgToken, protocol.MsgTextPartComplete:
			var tok protocol.TokenMessage
			_ = m.Decode(&tok)
			if cancelled != "" && tok.MessageID == cancelled {
				t.Fatalf("%s of the cancelled message %s after message_cancelled", m.Type, cancelled)
			}
		}
	}
}
