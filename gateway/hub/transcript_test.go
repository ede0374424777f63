package hub_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// staticEnv gives every session the same variables.
type staticEnv map[string]string

func (s staticEnv) Boot(context.Context, sessions.Session) (map[string]string, []sandbox.EnvFile, error) {
	return s, nil, nil
}
func (staticEnv) Repos(context.Context, sessions.Session) ([]string, error) { return nil, nil }
func (staticEnv) Save(context.Context, sessions.Session, string, []secrets.SubmittedSecret) ([]secrets.SaveResult, error) {
	return nil, nil
}

// TestTranscriptOfARealAgentSession: a real agent (OpenCode, scripted
// model) reads a secret from its environment with bash and writes it into
// its answer; the person also pastes it into the prompt. The transcript
// the gateway publishes holds the prompt, the agent's text, the bash call
// and the status changes, and the secret nowhere. Materialized by the
// session-materializer's handler, the history is what a client attaching
// to the stopped session gets in init and get_messages.
func TestTranscriptOfARealAgentSession(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "transcript-secret-7f3a9c2e"
	sim := llmsim.New(llmsim.Options{APIKey: "sim-key"})
	if err := sim.Register("transcript-secret", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"printf %s \"$TRANSCRIPT_SECRET\"","description":"read the key"}`)}}},
		{Text: "The pelican migration is done; the key was {{tool_result}}."},
	}}); err != nil {
		t.Fatal(err)
	}
	d, _ := realAgent(t, e, local.Options{}, sim.Handler())
	d.Env = staticEnv{"TRANSCRIPT_SECRET": secret}
	pub := transcript.NewPublisher(transcript.PublisherOptions{Pool: e.pool, Codec: codec})
	t.Cleanup(func() { pub.Close(context.Background()) })
	d.Transcript, d.History = pub, e.pool
	m := e.manager(t, d)
	id := e.session(t, sessionstest.Options{ModelID: "claude-sim", Title: "transcript"})

	h, c := attach(t, m, id, e.principal())
	if err := h.Prompt(ctx, e.principal(), "[[script:transcript-secret]] use my key "+secret+" please"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "the agent's answer", func() bool {
		return c.has(protocol.MsgMessageComplete, nil) && c.has(protocol.MsgTextPartComplete, func(f map[string]any) bool {
			return strings.Contains(f["text"].(string), "pelican")
		})
	})
	if !c.has(protocol.MsgToolEnd, func(f map[string]any) bool { return strings.Contains(f["result"].(string), secret) }) {
		t.Fatal("the agent's bash did not read the secret (the test would prove nothing)")
	}
	if err := h.Terminate(ctx, "completed", "success", ""); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	// The outbox rows for sessions.transcript: everything, no secret.
	rows, err := e.pool.Query(ctx, `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topics.SessionsTranscript, id)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*consumers.Message
	kinds := map[string]int{}
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(v), secret) {
			t.Fatalf("the secret reached the topic: %q", v)
		}
		ev, err := codec.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		p := ev.Payload.(*schemas.SessionTranscript)
		kinds[p.Kind]++
		if p.Kind == schemas.TranscriptToolCallKind && (p.Tool.Name != "bash" || !strings.Contains(p.Tool.InputJSON, "TRANSCRIPT_SECRET") ||
			!strings.Contains(p.Tool.Output, "[REDACTED]")) {
			t.Fatalf("tool call = %+v", p.Tool)
		}
		msgs = append(msgs, &consumers.Message{Event: ev})
	}
	rows.Close()
	if kinds[schemas.TranscriptUserMessage] != 1 || kinds[schemas.TranscriptAgentMessage] < 1 || kinds[schemas.TranscriptToolCallKind] != 1 ||
		kinds[schemas.TranscriptStatus] < 2 {
		t.Fatalf("transcript kinds = %v", kinds)
	}

	// Materialize (the group's handler), twice: the second changes nothing.
	apply := sessionmaterializer.BatchHandler(sessionmaterializer.Deps{Pool: e.pool})
	for range 2 {
		if err := apply(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM session_messages WHERE session_id = $1`, id).Scan(&n); err != nil || n != len(msgs) {
		t.Fatalf("%d rows for %d events (%v)", n, len(msgs), err)
	}

	// A client of the stopped session gets the history in init.
	d2 := e.deps(unique("gw-"))
	d2.History = e.pool
	m3 := e.manager(t, d2)
	h3, err := m3.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c3 := &recClient{}
	detach, err := h3.Attach(ctx, c3, e.principal())
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	c3.wait(t, protocol.MsgInit, nil)
	init := c3.all()[0]
	raw, _ := json.Marshal(init)
	if strings.Contains(string(raw), secret) {
		t.Fatal("the secret is in the init frame")
	}
	var im protocol.InitMessage
	if err := json.Unmarshal(raw, &im); err != nil {
		t.Fatal(err)
	}
	// OpenCode answers in two assistant messages: the bash step, the text.
	if len(im.Messages) != 3 || im.Messages[0].Role != "user" || !strings.Contains(im.Messages[0].Content, "use my key [REDACTED]") ||
		im.Messages[2].Role != "assistant" || !strings.Contains(im.Messages[2].Content, "pelican migration is done; the key was [REDACTED]") {
		t.Fatalf("init history = %+v", im.Messages)
	}
	if p := im.Messages[1].Parts; len(p) != 1 || p[0].Type != "tool" || p[0].Tool != "bash" || p[0].Status != "completed" ||
		p[0].Output != "[REDACTED]" || !strings.Contains(string(p[0].Input), "TRANSCRIPT_SECRET") {
		t.Fatalf("tool part = %+v", im.Messages[1].Parts)
	}
	h3.HandleClientMessage(ctx, c3, e.principal(), []byte(`{"type":"get_messages"}`))
	testenv.Eventually(t, 10*time.Second, "get_messages", func() bool { return c3.count(protocol.MsgInit) == 2 })
}
