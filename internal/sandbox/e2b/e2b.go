// Package e2b is the sandbox provider that runs each session's agent in an
// E2B cloud sandbox (https://e2b.dev), through E2B's public REST API
// (api.go: create, list, get, connect/resume, pause, timeout, snapshots,
// kill) and envd, the agent E2B runs in every sandbox (envd.go: processes
// over Connect RPC, file upload and download).
//
// # Template contract
//
// The template (E2B_TEMPLATE) is an E2B template with user "user" (home
// /home/user), git, bash and coreutils, the pinned OpenCode at
// /opt/proliferate/bin/opencode and the OpenCode plugin SDK installed at
// /opt/proliferate/opencode-plugin (node_modules/@opencode-ai/plugin,
// package.json, package-lock.json; scripts/opencode.sh plugin-dir), so the
// agent never runs `npm install` at start, and the proliferate CLI (this
// repository's ./cmd/proliferate, built for the template's platform) at
// /opt/proliferate/bin/proliferate. /opt/proliferate/bin is first on the
// PATH of the agent, its shells, terminals, the services and Exec, so
// `proliferate services …`, `proliferate actions …`, `proliferate pr
// create` and git's credential helper (`proliferate git-credential`,
// capabilities.GitCredentialEnv) work in the sandbox as in a local one.
//
// # Boot
//
// EnsureSandbox, serialised per session: a running sandbox of the session
// (metadata proliferate_session) whose agent answers is returned; one whose
// agent is gone gets a new agent. Otherwise Spec.SnapshotID is restored — a
// paused sandbox's id (Pause's snapshot id: POST /sandboxes/{id}/connect
// resumes it) or "snapshot:<E2B snapshot id>" (Snapshot's: a new sandbox is
// created from it) — or a sandbox is created from the template and the
// repositories are cloned in it with git (the token as an http.extraHeader
// in the process environment, never in arguments or .git/config). Then the
// capability files (internal/agent/capabilities, written to a temporary
// directory here and uploaded) and the plugin dependencies go into
// /home/user/workspace, `opencode serve` starts on port 4096 with the
// OpenCode config of internal/agent/opencode (the LLM, a per-boot server
// password, the platform tools' gateway URL and sandbox token in its
// environment only) and the provider waits until /global/health answers at
// https://4096-{sandboxID}.{E2B_DOMAIN} (Sandbox.AgentURL).
//
// Before the agent, the services supervisor (`proliferate services
// daemon`, cmd/proliferate/services.go) starts in the workspace with the
// agent's environment (session variables, gateway URL, sandbox token, git
// credential helper, BASH_ENV) but not the agent's own secrets
// (OPENCODE_CONFIG_CONTENT with the LLM key, OPENCODE_SERVER_PASSWORD), so
// the configuration's service commands the gateway loads through Exec
// (`proliferate services load`) run next to the agent and share its
// localhost. A supervisor of an earlier boot (a sandbox kept running or
// resumed with its memory) is stopped with its services first: they hold
// the earlier boot's credentials, and the gateway loads them again.
//
// Exec commands get the session's variables (Spec.EnvVars, kept per live
// sandbox in this process and never logged) under the sandbox's own
// (HOME, PATH, LANG) and the command's.
//
// A Sandbox.ID is "{E2B sandbox id}_{boot}": a resumed sandbox keeps its
// E2B id but is a new boot with a new agent (new password and sandbox
// token), so ids of the earlier boot are no longer alive. The agent's
// process carries the tag "proliferate-agent-{boot}"; Alive asks E2B for
// the sandbox's state and envd for that process.
//
// The conversation lives in the agent's database in the sandbox's home
// (/home/user/.local/share/proliferate/opencode.db), so pauses and
// snapshots keep it; a snapshot restored into another session starts
// without it.
package e2b

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// ProviderName is the name stored in sessions.sandbox_provider.
const ProviderName = "e2b"

// Paths and ports inside an E2B sandbox.
const (
	Home      = "/home/user"
	Workspace = Home + "/workspace"
	AgentPort = 4096
	// stateDir holds the boot's marker (session, boot id, the agent's
	// password: the agent has it in its environment anyway).
	stateDir = Home + "/.proliferate"
	bootFile = stateDir + "/boot.json"
	agentDB  = Home + "/.local/share/proliferate/opencode.db"
	agentTag = "proliferate-agent-"
	// DefaultOpenCodeBin, DefaultPluginDir and DefaultCLIBin are the
	// template contract.
	DefaultOpenCodeBin = "/opt/proliferate/bin/opencode"
	DefaultPluginDir   = "/opt/proliferate/opencode-plugin"
	DefaultCLIBin      = "/opt/proliferate/bin/proliferate"
	// sandboxPath is the PATH of the agent, terminals, services and Exec:
	// the template's bin dir (OpenCode, the CLI) first.
	sandboxPath = "/opt/proliferate/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// servicesTag tags a boot's services supervisor; servicesPID holds
	// its pid (a later boot stops it and its services).
	servicesTag = "proliferate-services-"
	servicesPID = stateDir + "/services.pid"
	// DefaultTemplate is E2B_TEMPLATE's default.
	DefaultTemplate = "proliferate"
	// DefaultTimeout is a sandbox's lifetime when Options.Timeout is 0.
	DefaultTimeout = time.Hour
	// snapshotPrefix marks Snapshot's ids (a template to create from).
	snapshotPrefix = "snapshot:"
	// Metadata keys.
	metaSession = "proliferate_session"
	metaOrg     = "proliferate_org"
)

// Options configures the provider.
type Options struct {
	Client *Client
	// Template is the E2B template id or alias.
	Template string
	// Timeout is a sandbox's lifetime (E2B's timeout); 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// OpenCodeBin, PluginDir and CLIBin (the proliferate CLI) are paths
	// inside the template.
	OpenCodeBin, PluginDir, CLIBin string
	// ReadyTimeout bounds the agent's start; 0 means 90 s.
	ReadyTimeout time.Duration
	// Egress is the internet egress policy (SANDBOX_EGRESS), as E2B
	// network rules at creation: "open" (or empty) sets none; "allowlist"
	// allows the hosts of EgressAllow (ports dropped: E2B's rules have
	// none) and denies the rest; "none" denies all. The session's gateway
	// and LLM hosts are always allowed.
	Egress      string
	EgressAllow []string
	Logger      *slog.Logger
}

// Provider runs sandboxes on E2B. It is safe for concurrent use.
type Provider struct {
	opts Options
	c    *Client
	log  *slog.Logger

	mu    sync.Mutex
	locks map[string]*sessionLock
	live  map[string]sandbox.Sandbox // session id → its sandbox (this process's view)
	envds map[string]*Envd           // E2B sandbox id → envd client
	// envs holds the session variables of each live boot (Sandbox.ID →
	// Spec.EnvVars allowed by sandbox.SessionEnvAllowed) for Exec.
	envs map[string]map[string]string
}

type sessionLock struct {
	ch   chan struct{}
	refs int
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Executor  = (*Provider)(nil)
	_ sandbox.Terminals = (*Provider)(nil)
)

// New returns an E2B provider.
func New(opts Options) (*Provider, error) {
	if opts.Client == nil {
		return nil, errors.New("e2b: client is required")
	}
	if opts.Template == "" {
		opts.Template = DefaultTemplate
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.OpenCodeBin == "" {
		opts.OpenCodeBin = DefaultOpenCodeBin
	}
	if opts.PluginDir == "" {
		opts.PluginDir = DefaultPluginDir
	}
	if opts.CLIBin == "" {
		opts.CLIBin = DefaultCLIBin
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 90 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{opts: opts, c: opts.Client, log: log.With("provider", ProviderName),
		locks: map[string]*sessionLock{}, live: map[string]sandbox.Sandbox{}, envds: map[string]*Envd{},
		envs: map[string]map[string]string{}}, nil
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return ProviderName }

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func (p *Provider) lock(ctx context.Context, sessionID string) (func(), error) {
	p.mu.Lock()
	l := p.locks[sessionID]
	if l == nil {
		l = &sessionLock{ch: make(chan struct{}, 1)}
		p.locks[sessionID] = l
	}
	l.refs++
	p.mu.Unlock()
	release := func() {
		p.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(p.locks, sessionID)
		}
		p.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// splitID splits a Sandbox.ID into the E2B sandbox id and the boot.
func splitID(id string) (e2bID, boot string) {
	i := strings.LastIndexByte(id, '_')
	if i <= 0 {
		return id, ""
	}
	return id[:i], id[i+1:]
}

// bootInfo is bootFile's content.
type bootInfo struct {
	SessionID string `json:"session_id"`
	Boot      string `json:"boot"`
	Password  string `json:"password"`
}

// envd returns (and caches) the envd client of an E2B sandbox; an unknown
// or stopped sandbox is sandbox.ErrNotFound.
func (p *Provider) envd(ctx context.Context, e2bID string) (*Envd, error) {
	p.mu.Lock()
	e := p.envds[e2bID]
	p.mu.Unlock()
	if e != nil {
		return e, nil
	}
	d, err := p.c.Get(ctx, e2bID)
	if err != nil {
		return nil, err
	}
	if d.State != StateRunning {
		return nil, fmt.Errorf("e2b: sandbox %s is %s: %w", e2bID, d.State, sandbox.ErrNotFound)
	}
	e = p.c.Envd(SandboxInfo{SandboxID: d.SandboxID, EnvdAccessToken: d.EnvdAccessToken})
	p.mu.Lock()
	p.envds[e2bID] = e
	p.mu.Unlock()
	return e, nil
}

func (p *Provider) forgetEnvd(e2bID string) {
	p.mu.Lock()
	delete(p.envds, e2bID)
	p.mu.Unlock()
}

// agentRunning reports whether the boot's agent process runs.
func (p *Provider) agentRunning(ctx context.Context, e *Envd, boot string) (bool, error) {
	procs, err := e.List(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(procs, func(pi ProcessInfo) bool { return pi.Tag == agentTag+boot }), nil
}

// EnsureSandbox implements sandbox.Provider.
func (p *Provider) EnsureSandbox(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if !idRE.MatchString(spec.SessionID) {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: invalid session id %q", spec.SessionID)
	}
	unlock, err := p.lock(ctx, spec.SessionID)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: ensure %s: %w", spec.SessionID, err)
	}
	defer unlock()
	log := p.log.With("session_id", spec.SessionID)

	// This process's sandbox of the session, still alive.
	p.mu.Lock()
	cached, ok := p.live[spec.SessionID]
	p.mu.Unlock()
	if ok {
		if alive, err := p.Alive(ctx, cached.ID); err == nil && alive {
			return cached, nil
		}
		p.forget(spec.SessionID, cached.ID)
	}
	// Another process's (a gateway restart): a running sandbox of the
	// session whose agent still runs is recovered, with its password.
	running, err := p.c.List(ctx, map[string]string{metaSession: spec.SessionID}, StateRunning)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: find the sandbox of %s: %w", spec.SessionID, err)
	}
	for _, d := range running {
		if sb, ok := p.recover(ctx, d, spec); ok {
			log.Info("sandbox recovered", "sandbox_id", sb.ID)
			return sb, nil
		}
	}

	started := time.Now()
	var info SandboxInfo
	fresh := false
	switch {
	case len(running) > 0:
		// The session's sandbox runs but its agent is gone: a new agent on
		// the same workspace (and conversation). Extra sandboxes of the
		// session (a crash between create and boot) go.
		for _, d := range running[1:] {
			_ = p.c.Kill(ctx, d.SandboxID)
		}
		info, _, err = p.c.Connect(ctx, running[0].SandboxID, p.opts.Timeout)
		if err != nil {
			return sandbox.Sandbox{}, fmt.Errorf("e2b: connect to the sandbox of %s: %w", spec.SessionID, err)
		}
		log.Warn("sandbox agent gone; starting a new one", "e2b_id", info.SandboxID)
	case strings.HasPrefix(spec.SnapshotID, snapshotPrefix):
		info, err = p.c.Create(ctx, p.newSandbox(spec, strings.TrimPrefix(spec.SnapshotID, snapshotPrefix)))
		if err != nil {
			return sandbox.Sandbox{}, p.restoreErr(spec.SnapshotID, err)
		}
		log.Info("sandbox created from snapshot", "snapshot_id", spec.SnapshotID, "e2b_id", info.SandboxID)
	case spec.SnapshotID != "":
		var resumed bool
		info, resumed, err = p.c.Connect(ctx, spec.SnapshotID, p.opts.Timeout)
		if err != nil {
			return sandbox.Sandbox{}, p.restoreErr(spec.SnapshotID, err)
		}
		log.Info("paused sandbox resumed", "snapshot_id", spec.SnapshotID, "was_paused", resumed)
	default:
		info, err = p.c.Create(ctx, p.newSandbox(spec, p.opts.Template))
		if err != nil {
			return sandbox.Sandbox{}, fmt.Errorf("e2b: create sandbox for %s: %w", spec.SessionID, err)
		}
		fresh = true
		log.Info("sandbox created", "e2b_id", info.SandboxID, "template", p.opts.Template)
	}
	e := p.c.Envd(info)
	p.mu.Lock()
	p.envds[info.SandboxID] = e
	p.mu.Unlock()
	sb, err := p.boot(ctx, e, info.SandboxID, spec, fresh)
	if err != nil {
		if fresh {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = p.c.Kill(kctx, info.SandboxID)
			cancel()
			p.forgetEnvd(info.SandboxID)
		}
		if spec.SnapshotID != "" && len(running) == 0 && !errors.Is(err, ErrAuth) {
			return sandbox.Sandbox{}, fmt.Errorf("%w: %w", sandbox.ErrRestoreFailed, err)
		}
		return sandbox.Sandbox{}, err
	}
	p.mu.Lock()
	p.live[spec.SessionID] = sb
	p.envs[sb.ID] = sessionEnv(spec.EnvVars)
	p.mu.Unlock()
	log.Info("sandbox started", "sandbox_id", sb.ID, "fresh", fresh, "ms", time.Since(started).Milliseconds())
	return sb, nil
}

func (p *Provider) restoreErr(snapshotID string, err error) error {
	if errors.Is(err, ErrAuth) {
		return err
	}
	return fmt.Errorf("%w: e2b snapshot %s: %w", sandbox.ErrRestoreFailed, snapshotID, err)
}

func (p *Provider) newSandbox(spec sandbox.Spec, template string) NewSandbox {
	meta := map[string]string{metaSession: spec.SessionID}
	if spec.OrgID != "" {
		meta[metaOrg] = spec.OrgID
	}
	return NewSandbox{TemplateID: template, Timeout: int(p.opts.Timeout / time.Second), Secure: true, Metadata: meta,
		Network: p.network(spec)}
}

// network is the egress rules of a new sandbox of spec (Options.Egress).
func (p *Provider) network(spec sandbox.Spec) *NetworkConfig {
	if p.opts.Egress == "" || p.opts.Egress == "open" {
		return nil
	}
	n := &NetworkConfig{DenyOut: []string{"0.0.0.0/0"}}
	add := func(host string) {
		if host != "" && !slices.Contains(n.AllowOut, host) {
			n.AllowOut = append(n.AllowOut, host)
		}
	}
	for _, raw := range []string{spec.GatewayURL, spec.LLM.BaseURL} {
		if u, err := url.Parse(raw); err == nil {
			add(u.Hostname())
		}
	}
	if p.opts.Egress == "allowlist" {
		for _, e := range p.opts.EgressAllow {
			if h, _, err := net.SplitHostPort(e); err == nil {
				e = h
			}
			add(e)
		}
	}
	return n
}

// recover returns a running sandbox's live boot of the session.
func (p *Provider) recover(ctx context.Context, d SandboxDetail, spec sandbox.Spec) (sandbox.Sandbox, bool) {
	sessionID := spec.SessionID
	e, err := p.envd(ctx, d.SandboxID)
	if err != nil {
		return sandbox.Sandbox{}, false
	}
	data, err := e.ReadFile(ctx, bootFile)
	if err != nil {
		return sandbox.Sandbox{}, false
	}
	var b bootInfo
	if json.Unmarshal(data, &b) != nil || b.SessionID != sessionID || b.Boot == "" {
		return sandbox.Sandbox{}, false
	}
	if ok, err := p.agentRunning(ctx, e, b.Boot); err != nil || !ok {
		return sandbox.Sandbox{}, false
	}
	sb := sandbox.Sandbox{ID: d.SandboxID + "_" + b.Boot, AgentURL: p.c.PortURL(d.SandboxID, AgentPort),
		AgentPassword: b.Password, Workspace: Workspace, ExpiresAt: d.EndAt}
	p.mu.Lock()
	p.live[sessionID] = sb
	p.envs[sb.ID] = sessionEnv(spec.EnvVars)
	p.mu.Unlock()
	return sb, true
}

func (p *Provider) forget(sessionID, sandboxID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb, ok := p.live[sessionID]; ok && (sandboxID == "" || sb.ID == sandboxID) {
		delete(p.live, sessionID)
		delete(p.envs, sb.ID)
	}
	if sandboxID != "" {
		delete(p.envs, sandboxID)
	}
}

// run runs a shell script in the sandbox and fails on a non-zero exit.
func run(ctx context.Context, e *Envd, what, script string, env map[string]string, args ...string) error {
	exit, _, stderr, err := e.Run(ctx, ProcessConfig{Cmd: "/bin/bash", Args: append([]string{"-c", script, "proliferate"}, args...), Envs: env, Cwd: Home})
	if err != nil {
		return fmt.Errorf("e2b: %s: %w", what, err)
	}
	if exit != 0 {
		return fmt.Errorf("e2b: %s: exit %d: %s", what, exit, strings.TrimSpace(string(stderr)))
	}
	return nil
}

// boot prepares the workspace and starts the agent (a new boot).
func (p *Provider) boot(ctx context.Context, e *Envd, e2bID string, spec sandbox.Spec, fresh bool) (sandbox.Sandbox, error) {
	// An agent of an earlier boot (a memory snapshot keeps processes)
	// holds revoked credentials: it goes.
	procs, err := e.List(ctx)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: list processes: %w", err)
	}
	for _, pi := range procs {
		if strings.HasPrefix(pi.Tag, agentTag) {
			_ = e.Signal(ctx, pi.PID, SIGKILL)
		}
	}
	if err := p.stopServices(ctx, e, procs); err != nil {
		return sandbox.Sandbox{}, err
	}
	if fresh {
		if err := run(ctx, e, "create the workspace", "mkdir -p "+Workspace+" "+stateDir, nil); err != nil {
			return sandbox.Sandbox{}, err
		}
		if err := p.clone(ctx, e, spec.Repos); err != nil {
			return sandbox.Sandbox{}, err
		}
	} else {
		// A snapshot of another session (a setup or configuration
		// snapshot seeding this one) brings its workspace, not its
		// conversation.
		var prev bootInfo
		if data, err := e.ReadFile(ctx, bootFile); err == nil {
			_ = json.Unmarshal(data, &prev)
		}
		if prev.SessionID != spec.SessionID {
			if err := run(ctx, e, "drop another session's conversation", "rm -f "+agentDB+" "+agentDB+"-wal "+agentDB+"-shm", nil); err != nil {
				return sandbox.Sandbox{}, err
			}
		}
	}

	capSpec := capabilities.CapabilitySpec{SessionType: spec.SessionType, ClientType: spec.ClientType,
		GatewayURL: spec.GatewayURL, SessionID: spec.SessionID, SandboxToken: spec.SandboxToken, SystemPrompt: spec.SystemPrompt}
	if err := p.writeCapabilities(ctx, e, capSpec); err != nil {
		return sandbox.Sandbox{}, err
	}
	seed := `set -e
seed() { mkdir -p "$1"; [ -e "$1/package.json" ] || cp "$PLUGIN/package.json" "$PLUGIN/package-lock.json" "$1/"; [ -e "$1/node_modules" ] || ln -s "$PLUGIN/node_modules" "$1/node_modules"; }
seed "$WS/.opencode"; seed "$HOME/.config/opencode"
mkdir -p "$(dirname "$DB")"
if [ -d "$WS/.git" ]; then
  mkdir -p "$WS/.git/info"; touch "$WS/.git/info/exclude"
  for p in /.opencode/ /.proliferate/; do grep -qxF "$p" "$WS/.git/info/exclude" || echo "$p" >> "$WS/.git/info/exclude"; done
fi`
	if err := run(ctx, e, "seed the plugin dependencies", seed, map[string]string{"PLUGIN": p.opts.PluginDir, "WS": Workspace, "DB": agentDB}); err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := p.writeSessionEnv(ctx, e, spec); err != nil {
		return sandbox.Sandbox{}, err
	}

	model := spec.ModelID
	if model == "" {
		model = spec.LLM.Model
	}
	launch := opencode.LaunchOptions{
		Provider: opencode.Provider{ID: spec.LLM.ProviderID, NPM: spec.LLM.NPM, BaseURL: spec.LLM.BaseURL,
			APIKey: spec.LLM.APIKey, Models: []string{model}},
		Model:       model,
		ExtraConfig: map[string]any{"instructions": []string{path.Join(Workspace, capabilities.InstructionsFile)}},
	}
	config, err := opencode.BuildConfig(launch)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: %w", err)
	}
	boot := randomHex(6)
	password := randomHex(24)
	b, _ := json.Marshal(bootInfo{SessionID: spec.SessionID, Boot: boot, Password: password})
	if err := e.WriteFile(ctx, bootFile, b); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: write boot marker: %w", err)
	}
	env := agentEnv(spec, capSpec)
	env["BASH_ENV"] = runtimeEnvFile // the values submitted during the session (WriteEnv)
	if err := p.startServices(ctx, e, boot, env); err != nil {
		return sandbox.Sandbox{}, err
	}
	env["OPENCODE_CONFIG_CONTENT"] = config
	env["OPENCODE_SERVER_PASSWORD"] = password
	env["OPENCODE_DB"] = agentDB
	no := false
	s, err := e.Start(ctx, StartRequest{
		Process: ProcessConfig{Cmd: p.opts.OpenCodeBin, Args: []string{"serve", "--hostname", "0.0.0.0", "--port", fmt.Sprint(AgentPort)},
			Envs: env, Cwd: Workspace},
		Tag: agentTag + boot, Stdin: &no,
	})
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("e2b: start the agent: %w", err)
	}
	s.Close() // the agent outlives the stream
	sb := sandbox.Sandbox{ID: e2bID + "_" + boot, AgentURL: p.c.PortURL(e2bID, AgentPort), AgentPassword: password, Workspace: Workspace}
	if err := p.waitReady(ctx, e, sb, boot); err != nil {
		return sandbox.Sandbox{}, err
	}
	if d, err := p.c.Get(ctx, e2bID); err == nil {
		sb.ExpiresAt = d.EndAt
	} else {
		sb.ExpiresAt = time.Now().Add(p.opts.Timeout)
	}
	return sb, nil
}

// agentEnv is the agent's environment: home and XDG dirs, OpenCode's
// offline flags, git identity, the session's variables, then the
// platform's (which cannot be overridden).
func agentEnv(spec sandbox.Spec, capSpec capabilities.CapabilitySpec) map[string]string {
	env := map[string]string{
		"HOME": Home, "USER": DefaultUser, "LANG": "C.UTF-8",
		"PATH":            sandboxPath,
		"XDG_CONFIG_HOME": Home + "/.config", "XDG_DATA_HOME": Home + "/.local/share",
		"XDG_STATE_HOME": Home + "/.local/state", "XDG_CACHE_HOME": Home + "/.cache",
		"GIT_CEILING_DIRECTORIES": Home,
		"GIT_AUTHOR_NAME":         "Proliferate Agent", "GIT_AUTHOR_EMAIL": "agent@proliferate.dev",
		"GIT_COMMITTER_NAME": "Proliferate Agent", "GIT_COMMITTER_EMAIL": "agent@proliferate.dev",
	}
	for _, kv := range opencode.OfflineEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	maps.Copy(env, sessionEnv(spec.EnvVars))
	for _, kv := range capabilities.Env(capSpec) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// sessionEnv is the session's variables a sandbox process may get.
func sessionEnv(vars map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range vars {
		if sandbox.SessionEnvAllowed(k) {
			env[k] = v
		}
	}
	return env
}

// stopServices stops the services supervisor of an earlier boot and its
// services (each in its own process group, the supervisor's children):
// they hold that boot's credentials. procs is envd's process list.
func (p *Provider) stopServices(ctx context.Context, e *Envd, procs []ProcessInfo) error {
	if !slices.ContainsFunc(procs, func(pi ProcessInfo) bool { return strings.HasPrefix(pi.Tag, servicesTag) }) {
		return nil
	}
	script := `pid=$(cat "$PIDFILE" 2>/dev/null) || exit 0
case "$pid" in ''|*[!0-9]*) exit 0;; esac
tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'services daemon' || exit 0
kill -STOP "$pid" 2>/dev/null
for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do kill -KILL -- "-$c" 2>/dev/null || kill -KILL "$c" 2>/dev/null; done
kill -KILL "$pid" 2>/dev/null
rm -f "$PIDFILE"
exit 0`
	if err := run(ctx, e, "stop the services of the earlier boot", script, map[string]string{"PIDFILE": servicesPID}); err != nil {
		return err
	}
	for _, pi := range procs {
		if strings.HasPrefix(pi.Tag, servicesTag) {
			_ = e.Signal(ctx, pi.PID, SIGKILL)
		}
	}
	return nil
}

// startServices starts the boot's services supervisor with env (the
// agent's, without its own secrets) in the workspace. A template without
// the CLI (an older one) boots without services, with a warning.
func (p *Provider) startServices(ctx context.Context, e *Envd, boot string, env map[string]string) error {
	exit, _, _, err := e.Run(ctx, ProcessConfig{Cmd: "test", Args: []string{"-x", p.opts.CLIBin}, Cwd: Home})
	if err != nil {
		return fmt.Errorf("e2b: look for the CLI: %w", err)
	}
	if exit != 0 {
		p.log.Warn("the template has no proliferate CLI: no services, git push or pull requests from the sandbox", "cli", p.opts.CLIBin)
		return nil
	}
	senv := maps.Clone(env)
	senv["PROLIFERATE_WORKSPACE"] = Workspace
	senv["CLI"] = p.opts.CLIBin
	senv["PIDFILE"] = servicesPID
	no := false
	s, err := e.Start(ctx, StartRequest{
		Process: ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `echo $$ > "$PIDFILE"; unset PIDFILE; c=$CLI; unset CLI; exec "$c" services daemon </dev/null >/dev/null 2>&1`},
			Envs: senv, Cwd: Workspace},
		Tag: servicesTag + boot, Stdin: &no,
	})
	if err != nil {
		return fmt.Errorf("e2b: start the services supervisor: %w", err)
	}
	s.Close() // the supervisor outlives the stream
	return nil
}

// writeCapabilities renders the capability files locally and uploads them
// into the workspace.
func (p *Provider) writeCapabilities(ctx context.Context, e *Envd, spec capabilities.CapabilitySpec) error {
	tmp, err := os.MkdirTemp("", "e2b-caps-")
	if err != nil {
		return fmt.Errorf("e2b: capability files: %w", err)
	}
	defer os.RemoveAll(tmp)
	files, err := capabilities.Write(tmp, spec)
	if err != nil {
		return fmt.Errorf("e2b: %w", err)
	}
	// Tools outside the session's mode (left by a restored snapshot) go.
	var stale []string
	for _, t := range capabilities.AllTools() {
		if !slices.Contains(files.Tools, t) {
			stale = append(stale, path.Join(Workspace, capabilities.ToolDir, t+".ts"), path.Join(Workspace, capabilities.ToolDir, t+".txt"))
		}
	}
	if len(stale) > 0 {
		exit, _, stderr, err := e.Run(ctx, ProcessConfig{Cmd: "rm", Args: append([]string{"-f", "--"}, stale...), Cwd: Home})
		if err != nil || exit != 0 {
			return fmt.Errorf("e2b: remove stale tools: %v %s", err, stderr)
		}
	}
	return filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tmp, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := e.WriteFile(ctx, path.Join(Workspace, filepath.ToSlash(rel)), data); err != nil {
			return fmt.Errorf("e2b: upload %s: %w", rel, err)
		}
		return nil
	})
}

// clone clones the repositories into the workspace with git in the
// sandbox.
func (p *Provider) clone(ctx context.Context, e *Envd, repos []sandbox.Repo) error {
	seen := map[string]bool{}
	for _, r := range repos {
		rel := r.WorkspacePath
		if rel == "" {
			rel = strings.TrimSuffix(path.Base(strings.TrimRight(r.CloneURL, "/")), ".git")
		}
		rel = path.Clean(rel)
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || rel == "" ||
			strings.HasPrefix(rel, ".opencode") || strings.HasPrefix(rel, ".proliferate") {
			return fmt.Errorf("e2b: workspace path %q is invalid or reserved", r.WorkspacePath)
		}
		if seen[rel] || (rel == "." && len(repos) > 1) {
			return fmt.Errorf("e2b: workspace path %q is shared by two repositories", rel)
		}
		seen[rel] = true
		env := map[string]string{"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false", "GIT_CONFIG_NOSYSTEM": "1"}
		if r.Token != "" {
			env["GIT_CONFIG_COUNT"] = "1"
			env["GIT_CONFIG_KEY_0"] = "http.extraHeader"
			env["GIT_CONFIG_VALUE_0"] = "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+r.Token))
		}
		dest := path.Join(Workspace, rel)
		clone := func(branch string) (int, []byte, error) {
			args := []string{"clone", "--quiet"}
			if branch != "" {
				args = append(args, "--branch", branch)
			}
			args = append(args, "--", r.CloneURL, dest)
			exit, _, stderr, err := e.Run(ctx, ProcessConfig{Cmd: "git", Args: args, Envs: env, Cwd: Home})
			return exit, stderr, err
		}
		exit, stderr, err := clone(r.Branch)
		if err == nil && exit != 0 && r.Branch != "" {
			p.log.Warn("branch clone failed; cloning the default branch", "branch", r.Branch)
			_, _, _, _ = e.Run(ctx, ProcessConfig{Cmd: "rm", Args: []string{"-rf", "--", dest}, Cwd: Home})
			exit, stderr, err = clone("")
		}
		if err != nil || exit != 0 {
			msg := strings.TrimSpace(string(stderr))
			if r.Token != "" {
				msg = strings.ReplaceAll(msg, r.Token, "***")
			}
			return fmt.Errorf("e2b: git clone into %s: exit %d %v: %s", rel, exit, err, msg)
		}
	}
	return nil
}

// waitReady polls the agent's health through its public port until it
// answers, the agent process ends or ReadyTimeout passes.
func (p *Provider) waitReady(ctx context.Context, e *Envd, sb sandbox.Sandbox, boot string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReadyTimeout)
	defer cancel()
	hc := *p.c.HTTPClient()
	hc.Timeout = 2 * time.Second // early requests can hang
	client, err := opencode.NewClient(sb.AgentURL, opencode.ClientOptions{Password: sb.AgentPassword, HTTPClient: &hc})
	if err != nil {
		return err
	}
	delay := 50 * time.Millisecond
	for {
		h, err := client.Health(ctx)
		if err == nil && h.Healthy {
			return nil
		}
		if running, lerr := p.agentRunning(ctx, e, boot); lerr == nil && !running {
			return fmt.Errorf("e2b: the agent exited during start-up (last health error: %v)", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("e2b: the agent is not healthy after %s: %v", p.opts.ReadyTimeout, err)
		case <-t.C:
		}
		delay = min(delay*2, time.Second)
	}
}

// Alive implements sandbox.Provider: the E2B sandbox runs and its agent
// process of this boot too.
func (p *Provider) Alive(ctx context.Context, sandboxID string) (bool, error) {
	e2bID, boot := splitID(sandboxID)
	if boot == "" {
		return false, nil
	}
	d, err := p.c.Get(ctx, e2bID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if d.State != StateRunning {
		p.forgetEnvd(e2bID)
		return false, nil
	}
	e, err := p.envd(ctx, e2bID)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	ok, err := p.agentRunning(ctx, e, boot)
	if errors.Is(err, sandbox.ErrNotFound) {
		return false, nil
	}
	return ok, err
}

// Snapshot implements sandbox.Provider: a persistent E2B snapshot of the
// running sandbox (POST /sandboxes/{id}/snapshots); its id is
// "snapshot:{E2B snapshot id}".
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	e2bID, _ := splitID(sandboxID)
	if alive, err := p.Alive(ctx, sandboxID); err != nil || !alive {
		return sandbox.SnapshotInfo{}, fmt.Errorf("e2b: snapshot %s: %w", sandboxID, errors.Join(sandbox.ErrNotFound, err))
	}
	s, err := p.c.CreateSnapshot(ctx, e2bID)
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("e2b: snapshot %s: %w", sandboxID, err)
	}
	p.log.Info("snapshot saved", "session_id", sessionID, "sandbox_id", sandboxID, "snapshot_id", s.SnapshotID)
	return sandbox.SnapshotInfo{ID: snapshotPrefix + s.SnapshotID}, nil
}

// Pause implements sandbox.Provider: E2B pauses the sandbox (its
// filesystem, and its memory where E2B keeps it); the E2B sandbox id is
// the snapshot id, which EnsureSandbox resumes with connect.
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("e2b: pause %s: %w", sessionID, err)
	}
	defer unlock()
	e2bID, _ := splitID(sandboxID)
	if alive, err := p.Alive(ctx, sandboxID); err != nil || !alive {
		return sandbox.SnapshotInfo{}, fmt.Errorf("e2b: pause %s: %w", sandboxID, errors.Join(sandbox.ErrNotFound, err))
	}
	if err := p.c.Pause(ctx, e2bID); err != nil && !errors.Is(err, ErrConflict) {
		return sandbox.SnapshotInfo{}, fmt.Errorf("e2b: pause %s: %w", sandboxID, err)
	}
	p.forgetEnvd(e2bID)
	p.forget(sessionID, sandboxID)
	p.log.Info("sandbox paused", "session_id", sessionID, "sandbox_id", sandboxID)
	return sandbox.SnapshotInfo{ID: e2bID}, nil
}

// DeleteSnapshot implements sandbox.Provider: a Snapshot's template is
// deleted; a paused sandbox is killed — unless it runs again (it was
// resumed: it is a live sandbox now, which Terminate ends).
func (p *Provider) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if id, ok := strings.CutPrefix(snapshotID, snapshotPrefix); ok {
		if err := p.c.DeleteTemplate(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("e2b: delete snapshot %s: %w", snapshotID, err)
		}
		return nil
	}
	d, err := p.c.Get(ctx, snapshotID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("e2b: delete snapshot %s: %w", snapshotID, err)
	}
	if d.State != StatePaused {
		return nil
	}
	if err := p.c.Kill(ctx, snapshotID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("e2b: delete snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// Terminate implements sandbox.Provider: kills the running E2B sandbox of
// sandboxID (of every running sandbox of the session when empty). A
// paused sandbox is a snapshot and stays; a sandbox resumed since
// sandboxID's boot is a newer sandbox of the session and stays too.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if !idRE.MatchString(sessionID) {
		return fmt.Errorf("e2b: invalid session id %q", sessionID)
	}
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("e2b: terminate %s: %w", sessionID, err)
	}
	defer unlock()
	var ids []string
	if sandboxID != "" {
		e2bID, boot := splitID(sandboxID)
		d, err := p.c.Get(ctx, e2bID)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			p.forget(sessionID, sandboxID)
			return nil
		case err != nil:
			return fmt.Errorf("e2b: terminate %s: %w", sandboxID, err)
		case d.State != StateRunning:
			// A paused sandbox is the session's snapshot: kept
			// (DeleteSnapshot removes it).
			p.forget(sessionID, sandboxID)
			return nil
		}
		if boot != "" && !p.isBoot(ctx, e2bID, boot) {
			// Resumed since: a newer boot of the session, left alone.
			p.forget(sessionID, sandboxID)
			return nil
		}
		ids = []string{e2bID}
	} else {
		list, err := p.c.List(ctx, map[string]string{metaSession: sessionID}, StateRunning)
		if err != nil {
			return fmt.Errorf("e2b: terminate %s: %w", sessionID, err)
		}
		for _, d := range list {
			ids = append(ids, d.SandboxID)
		}
	}
	for _, id := range ids {
		if err := p.c.Kill(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("e2b: terminate %s: %w", id, err)
		}
		p.forgetEnvd(id)
	}
	p.forget(sessionID, sandboxID)
	p.log.Info("sandbox terminated", "session_id", sessionID, "sandbox_id", sandboxID)
	return nil
}

// isBoot reports whether the running sandbox e2bID is at boot (its boot
// marker says so; an unreadable marker counts as yes, so a broken sandbox
// can still be terminated).
func (p *Provider) isBoot(ctx context.Context, e2bID, boot string) bool {
	e, err := p.envd(ctx, e2bID)
	if err != nil {
		return true
	}
	data, err := e.ReadFile(ctx, bootFile)
	if err != nil {
		return true
	}
	var b bootInfo
	if json.Unmarshal(data, &b) != nil || b.Boot == "" {
		return true
	}
	return b.Boot == boot
}

// liveEnvd returns the envd of a live boot (ErrNotFound otherwise).
func (p *Provider) liveEnvd(ctx context.Context, sandboxID string) (*Envd, error) {
	alive, err := p.Alive(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	if !alive {
		return nil, fmt.Errorf("e2b: sandbox %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	e2bID, _ := splitID(sandboxID)
	return p.envd(ctx, e2bID)
}

// Close releases nothing: E2B's sandboxes live on their own (their
// timeout ends them) and a restarted gateway recovers them.
func (p *Provider) Close() {}
