package local_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// The CLI given as Options.CLIPath is on the agent's PATH as `proliferate`:
// the agent's bash tool runs it by that name, with the session's gateway
// environment, and the link lives outside the workspace.
func TestAgentRunsTheProliferateCLI(t *testing.T) {
	e := setup(t)
	cli := filepath.Join(t.TempDir(), "proliferate-build")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\necho \"cli-args=$* session=$PROLIFERATE_SESSION_ID gw=$PROLIFERATE_GATEWAY_URL\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir, CLIPath: cli})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-cli-1", OrgID: "org-1", SessionType: "coding",
		ClientType: "web", GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok-cli", LLM: e.llm})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sim.Register("run-cli", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"proliferate actions list","description":"list actions"}`)}}},
		{Text: "{{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}
	gw := "http://127.0.0.1:9"
	if p.Isolation() == local.IsolationBwrap {
		gw = local.JailGatewayURL // the sandbox's channel to the gateway
	}
	parts := toolParts(prompt(t, e, sb, "run-cli", "List the actions."))
	if len(parts) != 1 || !strings.Contains(parts[0].State.Output, "cli-args=actions list session=sess-cli-1 gw="+gw) {
		t.Fatalf("bash tool parts %+v", parts)
	}
	if matches := grepTree(t, sb.Workspace, "cli-args"); len(matches) != 0 {
		t.Fatalf("the CLI landed in the workspace: %v", matches)
	}
}

// A CLIPath that is not an executable file is refused at construction.
func TestCLIPathMustBeExecutable(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), plain, dir} {
		if _, err := local.New(local.Options{DataDir: t.TempDir(), CLIPath: path}); err == nil || !strings.Contains(err.Error(), "CLI path") {
			t.Errorf("CLIPath %s: %v", path, err)
		}
	}
}
