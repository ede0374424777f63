// Package capabilities writes the platform capability files into a sandbox
// workspace so OpenCode discovers them at start-up:
//
//   - the platform tools as OpenCode custom tools (.opencode/tool/<name>.ts),
//     each a thin wrapper that POSTs {tool_call_id, args} to
//     {gateway}/proliferate/{session}/tools/{name} with the sandbox token and
//     returns the gateway's answer to the model;
//   - the instructions file (.opencode/instructions.md) carrying the
//     session's system prompt and the environment notes, listed in the
//     OpenCode config's "instructions" so it reaches every model call;
//   - the actions guide (.proliferate/actions-guide.md).
//
// Every tool is gateway-mediated, request_env_variables included (the
// gateway surfaces the request to the session's clients and answers at
// once), so the gateway sees and records every platform tool call.
//
// The tool wrapper generates nothing itself: the tool_call_id is OpenCode's
// call id (context.callID), stable for one logical call. Network failures,
// timeouts, 5xx, 429 and 409 (the same call still executing on the gateway)
// are retried with that SAME id, with exponential backoff (500 ms base,
// 5 retries, ~15 s in all), because save_snapshot can freeze a sandbox and
// drop the socket of the very call that asked for it; the gateway's
// idempotency by tool_call_id makes the retry safe. Other 4xx answers and
// {success:false} results fail the tool call with the gateway's message.
//
// Secrets stay off the workspace disk (and so out of snapshots): the tools
// read the gateway URL, session id and sandbox token from the agent's
// environment (Env), the files only carry non-secret defaults.
//
// Tool injection is mode-scoped (fixing the original's known limitation):
// save_service_commands only for setup sessions, automation_complete only
// for automation sessions (session_type or client_type automation). Write
// removes platform tool files outside the mode, e.g. left behind by a
// setup snapshot restored into a coding session. The dotted alias
// "automation.complete" is not written as a tool: Anthropic's API only
// accepts tool names matching ^[a-zA-Z0-9_-]{1,64}$, so a tool file named
// automation.complete.ts would make every model call fail; the gateway
// still accepts both names on its callback route.
package capabilities

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Tool names.
const (
	ToolSaveSnapshot        = "save_snapshot"
	ToolSaveServiceCommands = "save_service_commands"
	ToolAutomationComplete  = "automation_complete"
	ToolRequestEnvVariables = "request_env_variables"
	ToolVerify              = "verify"
)

// AllTools are every platform tool, in a stable order.
var allTools = []string{ToolSaveSnapshot, ToolRequestEnvVariables, ToolVerify, ToolAutomationComplete, ToolSaveServiceCommands}

// AllTools returns every platform tool name.
func AllTools() []string { return slices.Clone(allTools) }

// Environment variables the tools read (see Env).
const (
	EnvGatewayURL   = "PROLIFERATE_GATEWAY_URL"
	EnvSessionID    = "PROLIFERATE_SESSION_ID"
	EnvSandboxToken = "PROLIFERATE_SANDBOX_TOKEN"
	// EnvTerminalToken is the credential of a terminal a person opened in
	// the sandbox (never the agent's): the CLI acts as that person.
	EnvTerminalToken = "PROLIFERATE_TERMINAL_TOKEN"
)

// Paths relative to the workspace root.
const (
	ToolDir          = ".opencode/tool"
	InstructionsFile = ".opencode/instructions.md"
	ActionsGuideFile = ".proliferate/actions-guide.md"
)

// CapabilitySpec selects and parameterises the capability files.
type CapabilitySpec struct {
	SessionType string // setup | coding | automation
	ClientType  string // web | api | slack | cli | automation
	// GatewayURL and SessionID are the tools' defaults when the agent's
	// environment lacks them (Env sets both).
	GatewayURL string
	SessionID  string
	// SandboxToken is NOT written to disk; Env puts it in the agent's
	// environment. Never logged.
	SandboxToken string
	// Tools overrides the tool set; nil means ToolsFor(SessionType,
	// ClientType). Unknown names are an error.
	Tools []string
	// SystemPrompt is written to the instructions file.
	SystemPrompt string
}

// Files reports what Write wrote.
type Files struct {
	// Tools are the tool names written, in AllTools order.
	Tools []string
	// Instructions is the absolute path of the instructions file; list it
	// in the OpenCode config's "instructions".
	Instructions string
	// ActionsGuide is the absolute path of the actions guide.
	ActionsGuide string
}

// ToolsFor returns the platform tools of a session: save_snapshot,
// request_env_variables and verify always, save_service_commands for setup
// sessions, automation_complete for automation sessions.
func ToolsFor(sessionType, clientType string) []string {
	tools := []string{ToolSaveSnapshot, ToolRequestEnvVariables, ToolVerify}
	if sessionType == "automation" || clientType == "automation" {
		tools = append(tools, ToolAutomationComplete)
	}
	if sessionType == "setup" {
		tools = append(tools, ToolSaveServiceCommands)
	}
	return tools
}

// Env returns the environment entries (KEY=VALUE) the tools need in the
// agent's process, and GitCredentialEnv: git asks the platform for its
// HTTPS credentials.
func Env(spec CapabilitySpec) []string {
	return append([]string{
		EnvGatewayURL + "=" + strings.TrimRight(spec.GatewayURL, "/"),
		EnvSessionID + "=" + spec.SessionID,
		EnvSandboxToken + "=" + spec.SandboxToken,
	}, GitCredentialEnv...)
}

// GitCredentialEnv configures git (through GIT_CONFIG_* entries, the
// highest-precedence configuration, so nothing is written to a gitconfig or
// a snapshot) to ask `proliferate git-credential` for the credentials of
// HTTPS remotes, with the repository's path (useHttpPath), so the gateway
// can narrow the token to that repository. Earlier helpers (a system
// gitconfig's) are reset first.
var GitCredentialEnv = []string{
	"GIT_CONFIG_COUNT=3",
	"GIT_CONFIG_KEY_0=credential.helper", "GIT_CONFIG_VALUE_0=",
	"GIT_CONFIG_KEY_1=credential.helper", "GIT_CONFIG_VALUE_1=!proliferate git-credential",
	"GIT_CONFIG_KEY_2=credential.useHttpPath", "GIT_CONFIG_VALUE_2=true",
}

// Write writes the capability files into dir (the workspace root) and
// removes platform tool files outside the selected set. It is idempotent.
func Write(dir string, spec CapabilitySpec) (Files, error) {
	if dir == "" {
		return Files{}, errors.New("capabilities: workspace dir is required")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Files{}, fmt.Errorf("capabilities: workspace: %w", err)
	}
	want := spec.Tools
	if want == nil {
		want = ToolsFor(spec.SessionType, spec.ClientType)
	}
	for _, name := range want {
		if _, ok := toolArgs[name]; !ok {
			return Files{}, fmt.Errorf("capabilities: unknown platform tool %q", name)
		}
	}
	toolDir := filepath.Join(abs, ToolDir)
	if err := os.MkdirAll(toolDir, 0o755); err != nil {
		return Files{}, fmt.Errorf("capabilities: create tool dir: %w", err)
	}
	var files Files
	for _, name := range allTools {
		path := filepath.Join(toolDir, name+".ts")
		if !slices.Contains(want, name) {
			for _, stale := range []string{path, filepath.Join(toolDir, name+".txt")} {
				if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
					return Files{}, fmt.Errorf("capabilities: remove %s: %w", name, err)
				}
			}
			continue
		}
		if err := writeFile(path, ToolSource(name, spec)); err != nil {
			return Files{}, err
		}
		files.Tools = append(files.Tools, name)
	}
	files.Instructions = filepath.Join(abs, InstructionsFile)
	if err := writeFile(files.Instructions, instructions(spec, files.Tools)); err != nil {
		return Files{}, err
	}
	files.ActionsGuide = filepath.Join(abs, ActionsGuideFile)
	if err := os.MkdirAll(filepath.Dir(files.ActionsGuide), 0o755); err != nil {
		return Files{}, fmt.Errorf("capabilities: create %s: %w", filepath.Dir(ActionsGuideFile), err)
	}
	if err := writeFile(files.ActionsGuide, actionsGuide); err != nil {
		return Files{}, err
	}
	return files, nil
}

// writeFile writes atomically (temp file + rename) so a running agent never
// reads half a tool.
func writeFile(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("capabilities: write %s: %w", filepath.Base(path), err)
	}
	_, werr := tmp.WriteString(content)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("capabilities: write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("capabilities: write %s: %w", filepath.Base(path), err)
	}
	return nil
}
