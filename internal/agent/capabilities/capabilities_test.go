package capabilities_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestToolsForIsModeScoped(t *testing.T) {
	cases := []struct {
		sessionType, clientType string
		want                    []string
	}{
		{"coding", "web", []string{"save_snapshot", "request_env_variables", "verify"}},
		{"coding", "slack", []string{"save_snapshot", "request_env_variables", "verify"}},
		{"setup", "web", []string{"save_snapshot", "request_env_variables", "verify", "save_service_commands"}},
		{"automation", "automation", []string{"save_snapshot", "request_env_variables", "verify", "automation_complete"}},
		{"coding", "automation", []string{"save_snapshot", "request_env_variables", "verify", "automation_complete"}},
	}
	for _, c := range cases {
		if got := capabilities.ToolsFor(c.sessionType, c.clientType); !slices.Equal(got, c.want) {
			t.Errorf("ToolsFor(%s, %s) = %v, want %v", c.sessionType, c.clientType, got, c.want)
		}
	}
}

func listTools(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, capabilities.ToolDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteRemovesToolsOutsideTheModeAndKeepsTheTokenOffDisk(t *testing.T) {
	dir := t.TempDir()
	spec := capabilities.CapabilitySpec{SessionType: "setup", ClientType: "web", GatewayURL: "http://gw.test/",
		SessionID: "s-1", SandboxToken: "secret-token-1", SystemPrompt: "You are the setup agent."}
	files, err := capabilities.Write(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := listTools(t, dir); !slices.Equal(got, []string{"request_env_variables.ts", "save_service_commands.ts", "save_snapshot.ts", "verify.ts"}) {
		t.Fatalf("setup tool files %v", got)
	}
	instr, err := os.ReadFile(files.Instructions)
	if err != nil || !strings.Contains(string(instr), "You are the setup agent.") || !strings.Contains(string(instr), "save_service_commands") {
		t.Fatalf("instructions %q, %v", instr, err)
	}
	if _, err := os.Stat(files.ActionsGuide); err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile(filepath.Join(dir, capabilities.ToolDir, "save_snapshot.ts"))
	if !strings.Contains(string(src), `"http://gw.test"`) || !strings.Contains(string(src), `"s-1"`) {
		t.Fatalf("tool source lacks its defaults:\n%s", src)
	}

	// The same workspace restored into a coding session: setup-only tools go.
	spec.SessionType = "coding"
	if _, err := capabilities.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	if got := listTools(t, dir); !slices.Equal(got, []string{"request_env_variables.ts", "save_snapshot.ts", "verify.ts"}) {
		t.Fatalf("coding tool files %v", got)
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(p); strings.Contains(string(data), "secret-token-1") {
				t.Errorf("sandbox token written to %s", p)
			}
		}
		return nil
	})
	env := capabilities.Env(spec)
	if !slices.Contains(env, "PROLIFERATE_SANDBOX_TOKEN=secret-token-1") || !slices.Contains(env, "PROLIFERATE_GATEWAY_URL=http://gw.test") {
		t.Fatalf("env %v", env)
	}
	if _, err := capabilities.Write(dir, capabilities.CapabilitySpec{Tools: []string{"automation.complete"}}); err == nil {
		t.Fatal("unknown tool accepted")
	}
}

// TestEveryToolRunsInOpenCode loads all five tool files into a real
// OpenCode and has the scripted model call each one in a single turn: every
// module compiles, its schema accepts the documented arguments, and each
// reaches the gateway with the sandbox token and the call's id.
func TestEveryToolRunsInOpenCode(t *testing.T) {
	ctx := t.Context()
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(ctx, filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	sim := llmsim.New(llmsim.Options{APIKey: "k"})
	llm := httptest.NewServer(sim.Handler())
	t.Cleanup(llm.Close)

	type call struct{ path, auth, id string }
	var mu sync.Mutex
	calls := map[string]call{}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ToolCallID string          `json:"tool_call_id"`
			Args       json.RawMessage `json:"args"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		tool := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		mu.Lock()
		calls[tool] = call{r.URL.Path, r.Header.Get("Authorization"), body.ToolCallID}
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"success": true, "result": "ok " + tool})
	}))
	t.Cleanup(gw.Close)

	ws := t.TempDir()
	spec := capabilities.CapabilitySpec{SessionType: "setup", GatewayURL: gw.URL, SessionID: "sess-all",
		SandboxToken: "tok-all", Tools: capabilities.AllTools(), SystemPrompt: "Test agent."}
	files, err := capabilities.Write(ws, spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opencode.Launch(ctx, opencode.LaunchOptions{
		Binary: tools.Binary, PluginDir: tools.PluginDir, Workspace: ws, StateDir: t.TempDir(),
		Provider: opencode.Provider{ID: "sim", BaseURL: llm.URL + "/v1", APIKey: "k", Models: []string{"m"}},
		Model:    "m", ExtraConfig: map[string]any{"instructions": []string{files.Instructions}},
		Env: capabilities.Env(spec),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)

	if err := sim.Register("all-tools", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{
			{Name: "save_snapshot", Input: json.RawMessage(`{"message":"configured"}`)},
			{Name: "save_service_commands", Input: json.RawMessage(`{"commands":[{"name":"web","command":"npm run dev","cwd":"app"}]}`)},
			{Name: "automation_complete", Input: json.RawMessage(`{"run_id":"r1","completion_id":"c1","outcome":"needs_human","summary_markdown":"x","citations":["a"]}`)},
			{Name: "request_env_variables", Input: json.RawMessage(`{"keys":[{"key":"API_KEY","type":"secret","required":true,"suggestions":[{"label":"Dashboard"}]}]}`)},
			{Name: "verify", Input: json.RawMessage(`{"paths":["test-results.txt","shots/home.png"],"summary":"tests pass"}`)},
		}},
		{Text: "done"},
	}}); err != nil {
		t.Fatal(err)
	}
	c := p.Client()
	sess, err := c.CreateSession(ctx, "all tools")
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AssignSession(sess.ID, "all-tools"); err != nil {
		t.Fatal(err)
	}
	if err := c.PromptAsync(ctx, sess.ID, []opencode.PartInput{opencode.TextPart("go")}, opencode.PromptOptions{}); err != nil {
		t.Fatal(err)
	}
	var parts []opencode.Part
	testenv.Eventually(t, 60*time.Second, "the agent's final answer", func() bool {
		msgs, err := c.Messages(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		parts = parts[:0]
		finished := false
		for _, m := range msgs {
			for _, part := range m.Parts {
				if part.Type == opencode.PartTool {
					parts = append(parts, part)
				}
			}
			finished = finished || (m.Info.Role == "assistant" && m.Text() == "done" && m.Info.Time.Completed != 0)
		}
		return finished
	})
	if len(parts) != 5 {
		t.Fatalf("tool parts %+v", parts)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, part := range parts {
		got := calls[part.Tool]
		if part.State.Status != opencode.ToolCompleted || !strings.HasPrefix(part.State.Output, "ok "+part.Tool) {
			t.Errorf("%s: state %s output %q error %q", part.Tool, part.State.Status, part.State.Output, part.State.Error)
		}
		if got.path != "/proliferate/sess-all/tools/"+part.Tool || got.auth != "Bearer tok-all" || got.id != part.CallID {
			t.Errorf("%s: gateway saw %+v, want call id %s", part.Tool, got, part.CallID)
		}
	}
}
