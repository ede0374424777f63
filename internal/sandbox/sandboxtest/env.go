package sandboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/testenv"
)

// SimAPIKey is the API key the shared scripted LLM accepts.
const SimAPIKey = "sim-key"

// Env is what provider tests share within a test binary: the pinned
// OpenCode (installed by scripts/opencode.sh when missing) and the scripted
// LLM, with the sandbox.LLM pointing at it.
type Env struct {
	Tools opencode.Tools
	Sim   *llmsim.Server
	LLM   sandbox.LLM
}

var (
	simOnce sync.Once
	sim     *llmsim.Server
	simLLM  sandbox.LLM

	toolsOnce sync.Once
	tools     opencode.Tools
	toolsErr  error

	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// CLI returns the real proliferate binary (./cmd/proliferate) that
// sandboxes link, built once per test binary (linking it takes seconds)
// into a directory removed when the package's tests end (the package's
// TestMain calls testenv.Main).
func CLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "proliferate-cli-")
		if err != nil {
			cliErr = err
			return
		}
		testenv.AtExit(func() { _ = os.RemoveAll(dir) })
		_, file, _, _ := runtime.Caller(0)
		bin := filepath.Join(dir, "proliferate")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/proliferate")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build ./cmd/proliferate: %v\n%s", err, out)
			return
		}
		cliPath = bin
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

// Sim returns the scripted LLM shared by the test binary (started on first
// use, it lives as long as the binary) and the sandbox.LLM that points at
// it. Run gives it to every sandbox it creates.
func Sim() (*llmsim.Server, sandbox.LLM) {
	simOnce.Do(func() {
		sim = llmsim.New(llmsim.Options{APIKey: SimAPIKey})
		srv := httptest.NewServer(sim.Handler()) // lives for the test binary
		simLLM = sandbox.LLM{ProviderID: "sim", BaseURL: srv.URL + "/v1", APIKey: SimAPIKey, Model: "claude-sim"}
	})
	return sim, simLLM
}

// Shared returns the test binary's Env, resolving the pinned OpenCode
// once (a provider that runs the real agent needs it; Run itself does not).
func Shared(t testing.TB) Env {
	t.Helper()
	toolsOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "opencode.sh")
		tools, toolsErr = opencode.ResolveTools(context.Background(), script)
	})
	if toolsErr != nil {
		t.Fatalf("install opencode: %v", toolsErr)
	}
	s, llm := Sim()
	return Env{Tools: tools, Sim: s, LLM: llm}
}

// AgentClient is an OpenCode client for the sandbox's agent.
func AgentClient(t testing.TB, sb sandbox.Sandbox) *opencode.Client {
	t.Helper()
	c, err := opencode.NewClient(sb.AgentURL, opencode.ClientOptions{Password: sb.AgentPassword})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Prompt sends text to a new agent session of sb, bound to the scripted
// LLM's script (a name Sim knows; ignored by simulated agents), waits
// until the session is idle and returns its history.
func Prompt(t testing.TB, sb sandbox.Sandbox, script, text string) []opencode.MessageWithParts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := AgentClient(t, sb)
	stream, err := c.Events(ctx, opencode.EventsOptions{HeartbeatTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	sess, err := c.CreateSession(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if script != "" {
		s, _ := Sim()
		if err := s.AssignSession(sess.ID, script); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart(text)}, opencode.PromptOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the agent to finish: %v", err)
		}
		if ev.SessionID == sess.ID && ev.Type == opencode.EventSessionIdle {
			break
		}
	}
	msgs, err := c.Messages(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// ToolParts returns the tool parts of a history, in order.
func ToolParts(msgs []opencode.MessageWithParts) []opencode.Part {
	var out []opencode.Part
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == opencode.PartTool {
				out = append(out, p)
			}
		}
	}
	return out
}

// AgentBash has the agent of sb run command with its bash tool (the
// scripted LLM asks for it) and returns the tool's output.
func AgentBash(t testing.TB, sb sandbox.Sandbox, command string) string {
	t.Helper()
	input, err := json.Marshal(map[string]string{"command": command, "description": "run a command"})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Sim()
	name := "sandboxtest-bash-" + randomHex(6)
	if err := s.Register(name, llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: input}}},
		{Text: "{{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}
	parts := ToolParts(Prompt(t, sb, name, "Run the command."))
	if len(parts) != 1 || parts[0].State == nil {
		t.Fatalf("tool parts %+v, want one bash call", parts)
	}
	return parts[0].State.Output
}
