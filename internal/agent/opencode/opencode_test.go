package opencode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
)

// repoScript is scripts/opencode.sh relative to this package.
func repoScript(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "opencode.sh")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("scripts/opencode.sh: %v", err)
	}
	return p
}

// recorder collects the events of one stream.
type recorder struct {
	mu     sync.Mutex
	events []opencode.Event
	at     []time.Time
	err    error
}

func (r *recorder) snapshot() ([]opencode.Event, []time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]opencode.Event(nil), r.events...), append([]time.Time(nil), r.at...), r.err
}

// watch opens the event stream of c's directory and records it until the
// test ends; it returns once the server confirmed the subscription.
func watch(t *testing.T, c *opencode.Client) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.Events(ctx, opencode.EventsOptions{HeartbeatTimeout: 30 * time.Second})
	if err != nil {
		cancel()
		t.Fatalf("events: %v", err)
	}
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Next(ctx)
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.mu.Unlock()
				return
			}
			r.events = append(r.events, ev)
			r.at = append(r.at, time.Now())
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); stream.Close(); <-done })
	r.waitFor(t, 10*time.Second, "server.connected", func(ev opencode.Event) bool {
		return ev.Type == opencode.EventServerConnected
	})
	return r
}

// waitFor waits until some recorded event matches and returns it.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, match func(opencode.Event) bool) opencode.Event {
	t.Helper()
	var found opencode.Event
	testenv.Eventually(t, timeout, what, func() bool {
		evs, _, err := r.snapshot()
		for _, ev := range evs {
			if match(ev) {
				found = ev
				return true
			}
		}
		if err != nil {
			t.Fatalf("event stream failed while waiting for %s: %v", what, err)
		}
		return false
	})
	return found
}

func isSession(id, typ string) func(opencode.Event) bool {
	return func(ev opencode.Event) bool { return ev.Type == typ && ev.SessionID == id }
}

func rssKB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// newWorkspace makes a directory OpenCode can serve via ?directory=.
func newWorkspace(t *testing.T, plugin string) string {
	t.Helper()
	ws := t.TempDir()
	if err := opencode.SeedPluginDeps(filepath.Join(ws, ".opencode"), plugin); err != nil {
		t.Fatal(err)
	}
	return ws
}

const gatewayToolTS = `import { tool } from "@opencode-ai/plugin"

export default tool({
  description: "Echo a text through the platform gateway",
  args: { text: tool.schema.string().describe("text to echo") },
  async execute(args, context) {
    const res = await fetch(%q, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer %s" },
      body: JSON.stringify({ tool_call_id: context.callID, args }),
    })
    if (!res.ok) return "Gateway error " + res.status
    const body = await res.json()
    return body.result
  },
})
`

func TestOpenCodeAgainstScriptedLLM(t *testing.T) {
	ctx := t.Context()
	tools, err := opencode.ResolveTools(ctx, repoScript(t))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}

	sim := llmsim.New(llmsim.Options{APIKey: "sim-key"})
	llm := httptest.NewServer(sim.Handler())
	t.Cleanup(llm.Close)

	// A stand-in for the gateway's tool-callback route.
	type callback struct{ auth, toolCallID, text string }
	var cbMu sync.Mutex
	var callbacks []callback
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ToolCallID string            `json:"tool_call_id"`
			Args       map[string]string `json:"args"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cbMu.Lock()
		callbacks = append(callbacks, callback{r.Header.Get("Authorization"), body.ToolCallID, body.Args["text"]})
		cbMu.Unlock()
		if r.Header.Get("Authorization") != "Bearer sandbox-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"success": true, "result": "gateway says: " + body.Args["text"]})
	}))
	t.Cleanup(gateway.Close)

	ws := t.TempDir()
	p, err := opencode.Launch(ctx, opencode.LaunchOptions{
		Binary:    tools.Binary,
		PluginDir: tools.PluginDir,
		Workspace: ws,
		StateDir:  t.TempDir(),
		Provider: opencode.Provider{ID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key",
			Models: []string{"claude-sim"}},
		Model:        "claude-sim",
		ReadyTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	t.Cleanup(p.Stop)
	t.Logf("measured: opencode start-to-ready %s (pid %d, RSS %d KB)", p.StartupDuration, p.Pid(), rssKB(p.Pid()))

	t.Run("WrongPasswordIsRejected", func(t *testing.T) {
		c, err := opencode.NewClient(p.URL, opencode.ClientOptions{Password: "wrong"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Health(ctx)
		var apiErr *opencode.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
			t.Fatalf("health with a wrong password: %v, want HTTP 401", err)
		}
		if h, err := p.Client().Health(ctx); err != nil || !h.Healthy {
			t.Fatalf("health: %+v %v", h, err)
		}
	})

	t.Run("PromptStreamsTextThenIdleAndHistory", func(t *testing.T) {
		c := p.Client()
		rec := watch(t, c)
		sess, err := c.CreateSession(ctx, "hello test")
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.AssignSession(sess.ID, "hello"); err != nil {
			t.Fatal(err)
		}
		if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("Say hello")}, opencode.PromptOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, 30*time.Second, "session.idle", isSession(sess.ID, opencode.EventSessionIdle))
		evs, _, _ := rec.snapshot()
		var deltas []string
		var finish *opencode.Part
		sawBusy := false
		for _, ev := range evs {
			if ev.SessionID != sess.ID {
				continue
			}
			switch {
			case ev.Type == opencode.EventMessagePartDelta && ev.Delta.Field == "text":
				deltas = append(deltas, ev.Delta.Delta)
			case ev.Type == opencode.EventMessagePartUpdated && ev.Part.Type == opencode.PartStepFinish:
				finish = ev.Part
			case ev.Type == opencode.EventSessionStatus && ev.Status.Type == "busy":
				sawBusy = true
			}
		}
		want := llmsim.BuiltinScripts()[0].Turns[0].Text
		if len(deltas) < 3 || strings.Join(deltas, "") != want {
			t.Fatalf("text deltas %q, want several deltas joining to %q", deltas, want)
		}
		if !sawBusy {
			t.Error("no session.status busy before idle")
		}
		if finish == nil || finish.Tokens == nil || finish.Tokens.Output == 0 {
			t.Fatalf("step-finish without output tokens: %+v", finish)
		}
		var simOut int
		for _, r := range sim.Records() {
			if r.SessionID == sess.ID && r.Script == "hello" {
				simOut = r.Usage.OutputTokens
			}
		}
		if finish.Tokens.Output != simOut {
			t.Errorf("OpenCode counted %d output tokens, the model reported %d", finish.Tokens.Output, simOut)
		}

		msgs, err := c.Messages(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Info.Role != "user" || msgs[0].Text() != "Say hello" ||
			msgs[1].Info.Role != "assistant" || msgs[1].Text() != want {
			t.Fatalf("history = %+v", msgs)
		}
		if msgs[1].Info.ModelID != "claude-sim" || msgs[1].Info.ProviderID != "sim" {
			t.Errorf("assistant model = %s/%s", msgs[1].Info.ProviderID, msgs[1].Info.ModelID)
		}
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := st[sess.ID]; ok && s.Type != "idle" {
			t.Errorf("status after idle = %+v", s)
		}
	})

	t.Run("BashToolRunsInWorkspace", func(t *testing.T) {
		ws2 := newWorkspace(t, tools.PluginDir)
		c := p.Client().WithDirectory(ws2)
		rec := watch(t, c)
		sess, err := c.CreateSession(ctx, "bash test")
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("Create the file [[script:bash]]")}, opencode.PromptOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, 30*time.Second, "session.idle", isSession(sess.ID, opencode.EventSessionIdle))
		idle := time.Now()
		data, err := os.ReadFile(filepath.Join(ws2, "hello.txt"))
		if err != nil || string(data) != "hi\n" {
			t.Fatalf("hello.txt = %q, %v", data, err)
		}
		evs, at, _ := rec.snapshot()
		var states []string
		var start, end time.Time
		for i, ev := range evs {
			if ev.Type == opencode.EventMessagePartUpdated && ev.SessionID == sess.ID && ev.Part.Type == opencode.PartTool {
				if ev.Part.Tool != "bash" || ev.Part.CallID == "" {
					t.Fatalf("tool part %+v", ev.Part)
				}
				s := ev.Part.State.Status
				if len(states) == 0 || states[len(states)-1] != s {
					states = append(states, s)
				}
				switch s {
				case opencode.ToolPending:
					start = at[i]
				case opencode.ToolCompleted:
					end = at[i]
					var in struct{ Command string }
					_ = json.Unmarshal(ev.Part.State.Input, &in)
					if in.Command != "echo hi > hello.txt" {
						t.Errorf("completed tool input %s", ev.Part.State.Input)
					}
				}
			}
		}
		if strings.Join(states, ">") != "pending>running>completed" {
			t.Fatalf("tool states %v, want pending>running>completed", states)
		}
		t.Logf("measured: bash tool pending→completed %s; prompt→idle (two model turns + tool) %s",
			end.Sub(start).Round(time.Millisecond), idle.Sub(sent).Round(time.Millisecond))
		msgs, err := c.Messages(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if last := msgs[len(msgs)-1]; !strings.Contains(last.Text(), "Created hello.txt") {
			t.Errorf("final assistant text %q", last.Text())
		}
	})

	t.Run("EditScriptWritesThenEditsAndTitleIsGenerated", func(t *testing.T) {
		ws4 := newWorkspace(t, tools.PluginDir)
		c := p.Client().WithDirectory(ws4)
		rec := watch(t, c)
		sess, err := c.CreateSession(ctx, "") // no title: OpenCode asks the model for one
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("Update the notes file [[script:edit]]")}, opencode.PromptOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, 30*time.Second, "session.idle", isSession(sess.ID, opencode.EventSessionIdle))
		data, err := os.ReadFile(filepath.Join(ws4, "notes.md"))
		if err != nil || string(data) != "# Notes\n\nstatus: done\n" {
			t.Fatalf("notes.md = %q, %v", data, err)
		}
		var tools []string
		evs, _, _ := rec.snapshot()
		for _, ev := range evs {
			if ev.Type == opencode.EventMessagePartUpdated && ev.SessionID == sess.ID && ev.Part.Type == opencode.PartTool &&
				ev.Part.State.Status == opencode.ToolCompleted {
				tools = append(tools, ev.Part.Tool)
			}
		}
		if strings.Join(tools, ",") != "write,edit" {
			t.Fatalf("completed tools %v, want write,edit", tools)
		}
		testenv.Eventually(t, 15*time.Second, "the generated title", func() bool {
			s, err := c.GetSession(ctx, sess.ID)
			return err == nil && s.Title == "Update the notes file"
		})
	})

	t.Run("CustomToolCallsGateway", func(t *testing.T) {
		ws3 := newWorkspace(t, tools.PluginDir)
		toolDir := filepath.Join(ws3, ".opencode", "tool")
		if err := os.MkdirAll(toolDir, 0o755); err != nil {
			t.Fatal(err)
		}
		src := fmt.Sprintf(gatewayToolTS, gateway.URL+"/proliferate/s1/tools/gateway_echo", "sandbox-token")
		if err := os.WriteFile(filepath.Join(toolDir, "gateway_echo.ts"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := sim.Register("gateway-echo", llmsim.Script{Turns: []llmsim.Turn{
			{ToolCalls: []llmsim.ToolCall{{Name: "gateway_echo", Input: json.RawMessage(`{"text":"ping"}`)}}},
			{Text: "The gateway answered: {{tool_result}}"},
		}}); err != nil {
			t.Fatal(err)
		}
		c := p.Client().WithDirectory(ws3)
		rec := watch(t, c)
		sess, err := c.CreateSession(ctx, "tool test")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("[[script:gateway-echo]] call it")}, opencode.PromptOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, 60*time.Second, "session.idle", isSession(sess.ID, opencode.EventSessionIdle))
		done := rec.waitFor(t, time.Second, "completed tool part", func(ev opencode.Event) bool {
			return ev.Type == opencode.EventMessagePartUpdated && ev.SessionID == sess.ID &&
				ev.Part.Type == opencode.PartTool && ev.Part.State.Status != opencode.ToolPending &&
				ev.Part.State.Status != opencode.ToolRunning
		})
		if done.Part.State.Status != opencode.ToolCompleted || done.Part.State.Output != "gateway says: ping" {
			t.Fatalf("tool part %+v (error %q)", done.Part.State, done.Part.State.Error)
		}
		cbMu.Lock()
		got := append([]callback(nil), callbacks...)
		cbMu.Unlock()
		if len(got) != 1 || got[0].auth != "Bearer sandbox-token" || got[0].text != "ping" ||
			got[0].toolCallID != done.Part.CallID || !strings.HasPrefix(got[0].toolCallID, "toolu_sim_") {
			t.Fatalf("gateway callbacks %+v, want one with the sandbox token and tool_call_id %s", got, done.Part.CallID)
		}
		msgs, err := c.Messages(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if last := msgs[len(msgs)-1].Text(); last != "The gateway answered: gateway says: ping" {
			t.Fatalf("the tool output did not reach the model: final text %q", last)
		}
	})

	t.Run("AbortStopsStreaming", func(t *testing.T) {
		c := p.Client()
		rec := watch(t, c)
		sess, err := c.CreateSession(ctx, "abort test")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("[[script:slow]] talk")}, opencode.PromptOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "three streamed deltas", func() bool {
			evs, _, _ := rec.snapshot()
			n := 0
			for _, ev := range evs {
				if ev.Type == opencode.EventMessagePartDelta && ev.SessionID == sess.ID {
					n++
				}
			}
			return n >= 3
		})
		st, err := c.Status(ctx)
		if err != nil || st[sess.ID].Type != "busy" {
			t.Fatalf("status while streaming = %+v, %v", st[sess.ID], err)
		}
		if err := c.Abort(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		ev := rec.waitFor(t, 10*time.Second, "session.error", isSession(sess.ID, opencode.EventSessionError))
		if ev.Error == nil || ev.Error.Name != "MessageAbortedError" {
			t.Fatalf("session.error = %+v", ev.Error)
		}
		rec.waitFor(t, 10*time.Second, "session.idle", isSession(sess.ID, opencode.EventSessionIdle))
		// The model request was cut off, not streamed to the end.
		testenv.Eventually(t, 10*time.Second, "llm-sim to see the stream cancelled", func() bool {
			for _, r := range sim.Records() {
				if r.SessionID == sess.ID && r.Script == "slow" {
					return r.Status == 499
				}
			}
			return false
		})
		msgs, err := c.Messages(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		last := msgs[len(msgs)-1]
		if last.Info.Error == nil || last.Info.Error.Name != "MessageAbortedError" {
			t.Fatalf("last message error = %+v", last.Info.Error)
		}
		if strings.Contains(last.Text(), "word200") {
			t.Fatal("the whole slow reply was streamed despite the abort")
		}
	})

	t.Run("StopKillsProcessGroup", func(t *testing.T) {
		// A bash tool leaves a background sleeper behind; Stop must reap it
		// together with the agent.
		if err := sim.Register("sleeper", llmsim.Script{Turns: []llmsim.Turn{
			{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(
				`{"command":"sleep 300 >/dev/null 2>&1 & echo $! > sleeper.pid","description":"Start a sleeper"}`)}}},
			{Text: "Started."},
		}}); err != nil {
			t.Fatal(err)
		}
		c := p.Client()
		rec := watch(t, c)
		sess, err := c.CreateSession(ctx, "stop test")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("[[script:sleeper]]")}, opencode.PromptOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, 30*time.Second, "session.idle", isSession(sess.ID, opencode.EventSessionIdle))
		data, err := os.ReadFile(filepath.Join(ws, "sleeper.pid"))
		if err != nil {
			t.Fatal(err)
		}
		sleeper, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || !alive(sleeper) {
			t.Fatalf("sleeper pid %q not running (%v)", data, err)
		}
		t.Logf("measured: opencode RSS after the suite %d KB", rssKB(p.Pid()))
		pid := p.Pid()
		stopped := time.Now()
		p.Stop()
		t.Logf("measured: Stop took %s", time.Since(stopped).Round(time.Millisecond))
		if alive(pid) {
			t.Fatalf("opencode pid %d still alive after Stop", pid)
		}
		testenv.Eventually(t, 5*time.Second, "sleeper to die", func() bool { return !alive(sleeper) })
		if err := syscall.Kill(pid, 0); err == nil && alive(pid) {
			t.Fatal("opencode still signalable")
		}
		if _, err := p.Client().Health(ctx); err == nil {
			t.Fatal("health answered after Stop")
		}
	})
}
