// Package sandbox defines the interface between the sessions gateway and the
// places where coding agents run. A Provider turns a Spec (the session, its
// repositories, system prompt, gateway callback address and sandbox token,
// and the LLM the agent talks to) into a running Sandbox: a workspace with
// the repos checked out, the platform capability files written and an
// OpenCode server listening at AgentURL.
//
// Providers are idempotent per session: EnsureSandbox for a session whose
// sandbox is still alive returns that sandbox (recovery after a gateway
// restart or owner change) instead of creating a second one. Snapshots
// capture the workspace so a paused session can resume later, possibly on
// another machine; Pause is Snapshot followed by stopping the sandbox.
//
// Implementations: internal/sandbox/local (a process per session on this
// machine, for development, tests and single-host installs).
//
// Every implementation proves the contract with the behavioural suite of
// internal/sandbox/sandboxtest (sandboxtest.Run in its tests).
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound reports a sandbox or snapshot the provider does not know
// (terminated, never created, or lost with its host).
var ErrNotFound = errors.New("sandbox: not found")

// ErrRestoreFailed wraps every failure to restore Spec.SnapshotID (missing,
// expired, corrupt). The caller clears the session's snapshot reference so
// the next attempt starts fresh instead of retrying the same dead snapshot
// forever (idle-snapshotting.md, constraint 5).
var ErrRestoreFailed = errors.New("sandbox: snapshot could not be restored")

// Repo is a repository to check out in the workspace.
type Repo struct {
	// CloneURL is the git URL (https://…, or file://… in tests).
	CloneURL string
	// WorkspacePath is the directory relative to the workspace root;
	// empty means the last path element of CloneURL without ".git".
	WorkspacePath string
	// Branch to check out; empty means the remote's default branch.
	Branch string
	// Token authenticates the clone (GitHub installation token). It is
	// never logged nor written into the repository's git config.
	Token string
}

// LLM is the model endpoint the agent talks to (the LLM proxy in
// production, the scripted simulator in tests). It becomes the single
// provider of the generated opencode.json.
type LLM struct {
	// ProviderID is the provider id in OpenCode's config ("anthropic",
	// "sim"…).
	ProviderID string
	// NPM is the AI SDK package; empty means "@ai-sdk/anthropic".
	NPM string
	// BaseURL is the API base OpenCode calls ({BaseURL}/messages).
	BaseURL string
	// APIKey is sent as x-api-key (a per-session proxy key). Never logged.
	APIKey string
	// Model is the model id; Spec.ModelID overrides it when set.
	Model string
}

// Spec describes the sandbox a session needs.
type Spec struct {
	SessionID string
	OrgID     string
	// SessionType is setup | coding | automation; it selects the platform
	// tools (save_service_commands only for setup).
	SessionType string
	// ClientType is web | api | slack | cli | automation.
	ClientType string
	// Repos are cloned into the workspace (ignored when SnapshotID
	// restores a workspace).
	Repos []Repo
	// SnapshotID restores a previous Snapshot/Pause instead of cloning.
	SnapshotID string
	// ModelID overrides LLM.Model when set.
	ModelID string
	// SystemPrompt becomes the agent's instructions (AGENTS.md of the
	// platform instructions).
	SystemPrompt string
	// GatewayURL is the gateway base URL the platform tools call
	// ({GatewayURL}/proliferate/{session}/tools/{tool}).
	GatewayURL string
	// SandboxToken authenticates the tools to the gateway for this session
	// only. Never logged.
	SandboxToken string
	// EnvVars are the session's variables (the org's secrets that apply
	// to it, resolved at every boot by the caller): the environment of the
	// agent, its shell commands, the sandbox's terminals and Exec
	// commands, in this sandbox only. Keys SessionEnvAllowed refuses are
	// dropped. Never logged.
	EnvVars map[string]string
	// EnvFiles are dotenv files written into the workspace before the
	// agent starts (EnvFile: git-excluded, left out of snapshots,
	// rewritten at every boot). Never logged.
	EnvFiles []EnvFile
	// LLM is the model endpoint.
	LLM LLM
}

// Sandbox is a running sandbox.
type Sandbox struct {
	// ID identifies the sandbox within its provider.
	ID string
	// AgentURL is the OpenCode server's base URL.
	AgentURL string
	// AgentPassword is the server's Basic-auth password. Never logged.
	AgentPassword string
	// Workspace is the workspace's path where the provider keeps it (the
	// local provider: a host path, which its Exec and snapshots use);
	// processes inside an isolated sandbox may see it at another path
	// (/workspace).
	Workspace string
	// ExpiresAt is when the provider ends the sandbox on its own (its
	// lifetime); zero means never. The gateway migrates or pauses the
	// session shortly before.
	ExpiresAt time.Time
}

// SnapshotInfo describes a stored snapshot.
type SnapshotInfo struct {
	// ID is the provider's snapshot id (sessions.snapshot_id).
	ID string
	// Bytes is the stored size (0 when the provider cannot tell).
	Bytes int64
}

// Provider creates, snapshots and stops sandboxes.
type Provider interface {
	// Name is the provider's name as stored in sessions.sandbox_provider.
	Name() string
	// EnsureSandbox returns the live sandbox of spec.SessionID or creates
	// one (restoring spec.SnapshotID when set). Idempotent: concurrent and
	// repeated calls for a session yield one sandbox.
	EnsureSandbox(ctx context.Context, spec Spec) (Sandbox, error)
	// Snapshot captures the workspace and the agent's state (its
	// conversation); the sandbox keeps running.
	Snapshot(ctx context.Context, sessionID, sandboxID string) (SnapshotInfo, error)
	// Pause snapshots the workspace and the agent's state and stops the
	// sandbox.
	Pause(ctx context.Context, sessionID, sandboxID string) (SnapshotInfo, error)
	// DeleteSnapshot removes a stored snapshot (retention, quotas).
	// Idempotent: an unknown snapshot is not an error.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	// Terminate stops the sandbox and discards its workspace (snapshots
	// are kept). Idempotent: an unknown sandbox is not an error.
	Terminate(ctx context.Context, sessionID, sandboxID string) error
	// Alive reports whether the sandbox's agent is still running.
	Alive(ctx context.Context, sandboxID string) (bool, error)
}

// Terminal is an interactive shell in a sandbox's workspace, on a
// pseudo-terminal: reads return its output, writes are keystrokes.
type Terminal interface {
	io.ReadWriteCloser
	// Resize sets the terminal's window size.
	Resize(cols, rows uint16) error
}

// Terminals is implemented by providers that can open a shell in a
// sandbox (the gateway's terminal WebSocket).
type Terminals interface {
	// OpenTerminal starts a login shell in the sandbox's workspace with
	// the given window size. env is added to the shell's environment (the
	// gateway gives it the terminal's own credential for the proliferate
	// CLI: PROLIFERATE_GATEWAY_URL, PROLIFERATE_SESSION_ID,
	// PROLIFERATE_TERMINAL_TOKEN); a provider that reaches the gateway at
	// another address inside the sandbox replaces PROLIFERATE_GATEWAY_URL
	// with it. Values are never logged. ErrNotFound when the sandbox is
	// not live.
	OpenTerminal(ctx context.Context, sessionID, sandboxID string, cols, rows uint16, env map[string]string) (Terminal, error)
}

// Limit kinds (LimitEvent.Kind).
const (
	// LimitMemory: the kernel killed a process of the sandbox because the
	// sandbox reached its memory limit (out of memory).
	LimitMemory = "memory"
	// LimitPids: the sandbox reached its process limit and a fork or
	// thread creation was refused.
	LimitPids = "pids"
)

// LimitEvent reports that a sandbox hit one of its resource limits.
type LimitEvent struct {
	SessionID string
	SandboxID string
	// Kind is LimitMemory or LimitPids.
	Kind string
	// Detail says what happened, for people (the limit, how many times);
	// it holds no secret.
	Detail string
	// AgentAlive is whether the sandbox's agent was still running when
	// the event was read (an out-of-memory kill may have hit it).
	AgentAlive bool
}

// LimitWatcher is implemented by providers that enforce resource limits
// on their sandboxes and can tell when one is hit (the gateway turns it
// into an error frame for the session's clients).
type LimitWatcher interface {
	// WatchLimits calls f for every limit event of every sandbox of the
	// provider until stop is called. f must not block for long.
	WatchLimits(f func(LimitEvent)) (stop func())
}
