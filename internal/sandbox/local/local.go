// Package local is the sandbox provider that runs each session's agent as a
// local `opencode serve` process (development, tests, single-host
// installs).
//
// Layout under Options.DataDir:
//
//	sandboxes/<session>/workspace            the agent's working directory (repos, capability files)
//	sandboxes/<session>/state/home           OpenCode's isolated HOME and config (holds the LLM key)
//	sandboxes/<session>/state/agent          the agent's database: its conversation
//	snapshots/<snapshot id>.tar.gz           snapshots
//	run/<random>/                            a running isolated sandbox's runtime dir (channels.go)
//
// # Isolation
//
// With Options.Isolation IsolationBwrap (the default) the agent, every
// terminal and every Exec run in bubblewrap sandboxes (jail.go): their own
// namespaces, no capabilities, uid 1000, a read-only view of /usr and /etc
// with only the workspace (at /workspace), the isolated home (at
// /home/agent) and, for the agent, its database writable, and no network
// but the Unix-socket channels of channels.go (the agent's port in, this
// session's gateway routes, the LLM API and the egress proxy of egress.go
// out). The provider keeps
// working with host paths (Sandbox.Workspace, snapshots, Exec's
// confinement); only processes inside see the fixed paths.
// IsolationNone runs them as plain processes of this host, as before.
//
// EnsureSandbox is serialised per session: a live sandbox of the session is
// returned as is; otherwise the workspace is restored from Spec.SnapshotID,
// or reused when a previous sandbox of this session left one (the agent
// died with the previous gateway process: OpenCode runs with a parent-death
// signal, or its lifetime ended), or cloned with real git (into a temporary
// directory renamed into place, so a failed clone never leaves a half
// workspace). Then the capability files are (re)written and OpenCode is
// launched.
//
// # Agent state
//
// OpenCode keeps sessions, messages and parts in SQLite at OPENCODE_DB. The
// provider points it at state/agent/opencode.db, outside the workspace. As
// measured with OpenCode 1.18.33: a file path is honoured; the database runs
// in WAL mode and writes opencode.db, opencode.db-wal and opencode.db-shm;
// after a prompt the committed history sits in the -wal file (~0.5 MB
// against a 0.25 MB main file) and stays there when the agent is stopped
// (no checkpoint on SIGTERM); an agent restarted on the same files lists
// the earlier messages. So the conversation is opencode.db plus
// opencode.db-wal; -shm is an index SQLite rebuilds from the -wal file and
// is not kept.
//
// # Snapshots
//
// A snapshot (format version 2) is one gzip'd tar: first a manifest
// .proliferate-snapshot.json {"version":2,"session_id":…,"created_at":…},
// then workspace/… (without the seeded plugin dependencies, which are host
// paths), then agent/opencode.db[-wal]. The isolated HOME is never included:
// it holds the LLM key. A snapshot is written to a temporary file and
// renamed. It is compressed at gzip level 1 (BestSpeed): on the benchmark
// workspace (a 41 MB git repository of 3,000 files) that writes 3.4-4.7x faster
// than `tar czf` (level 6) for a 6% larger file. Pause stops the agent first and snapshots the quiet files
// (fully consistent); if that snapshot fails the workspace and state stay on
// disk for the next EnsureSandbox. Snapshot (the sandbox keeps running)
// first copies the database files until a copy is provably the files'
// content at one instant (stableCopy), which SQLite recovers like a crash;
// the gateway only snapshots an idle agent, so this costs one extra read.
//
// Restores extract into a temporary directory (through an os.Root per
// target, so no entry, path or symlink, can write outside it) that is
// renamed into place, so a failure leaves no half-restored workspace. The
// workspace always comes back; the conversation only when the manifest's
// session is the restoring session: a setup or configuration snapshot that
// seeds another session never carries its conversation. Snapshots without
// a manifest (version 1, the workspace alone) restore the workspace. Every
// restore failure wraps sandbox.ErrRestoreFailed (and sandbox.ErrNotFound
// for a missing snapshot), so the gateway clears the dead snapshot
// reference.
//
// # Lifetime and terminals
//
// A sandbox lives Options.Timeout (default one hour) from its creation
// (Sandbox.ExpiresAt); then, like a cloud provider, the provider stops its
// agent and terminals and it is no longer alive, its files stay. The
// provider opens terminals (sandbox.Terminals): an interactive shell on a
// pseudo-terminal in the workspace, with the sandbox's isolated HOME and no
// platform secret, killed with its whole session on Close.
//
// Repository tokens go to git through GIT_CONFIG_* environment entries
// (an http.extraHeader), so they appear neither in process arguments nor in
// the repository's .git/config, and are redacted from error messages. The
// sandbox token reaches the platform tools through the agent's environment,
// never the workspace, so snapshots carry no platform secret.
package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// ProviderName is the name stored in sessions.sandbox_provider.
const ProviderName = "local"

// DefaultTimeout is a sandbox's lifetime when Options.Timeout is 0.
const DefaultTimeout = time.Hour

// Options configures the provider.
type Options struct {
	// DataDir holds sandboxes/<session> and snapshots/<id>.tar.gz.
	DataDir string
	// OpenCodeBin and PluginDir locate OpenCode; empty resolves them with
	// scripts/opencode.sh (opencode.ResolveTools).
	OpenCodeBin string
	PluginDir   string
	// ReadyTimeout bounds OpenCode's start-up; 0 means 60 s.
	ReadyTimeout time.Duration
	// Timeout is a sandbox's lifetime from its creation (Sandbox.ExpiresAt);
	// when it ends the agent and the sandbox's terminals are stopped, like a
	// cloud provider ends its sandboxes. The workspace and agent state stay
	// on disk: a later EnsureSandbox resumes on them. 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Egress is isolated sandboxes' internet egress policy (egress.go):
	// egress.ModeNone, ModeAllowlist (empty means it) or ModeOpen.
	// EgressAllow are the allowlist's entries (nil: egress.DefaultAllow);
	// EgressPlatformHosts the platform's own hosts, always refused unless
	// an entry names the exact host:port. Without isolation nothing is
	// enforced: the agent has the host's network.
	Egress              string
	EgressAllow         []string
	EgressPlatformHosts []string
	// Registerer receives the provider's metrics (the egress refusals);
	// nil: not registered.
	Registerer prometheus.Registerer
	// CLIPath is the proliferate binary linked as `proliferate` into a bin
	// directory prepended to the agent's PATH (cli.go). Empty means this
	// process's executable when it is named proliferate, else no CLI.
	CLIPath string
	// Isolation is how sandboxes are contained: IsolationBwrap (empty
	// means it) runs the agent, terminals and Exec in bubblewrap sandboxes
	// (jail.go, channels.go); IsolationNone runs them as plain processes
	// of this host (development only: the agent can read everything this
	// process's user can, and reach every port of the machine).
	Isolation string
	// Limits are each isolated sandbox's resources, enforced with a
	// cgroup per sandbox (limits.go). Where cgroups cannot be used the
	// provider starts without limits and logs it loudly, unless
	// RequireLimits (production), then New fails.
	Limits        Limits
	RequireLimits bool
	Logger        *slog.Logger
}

// Provider is the local sandbox provider. It is safe for concurrent use.
type Provider struct {
	opts Options
	log  *slog.Logger
	// egress is the egress policy of isolated sandboxes (nil without isolation).
	egress *egressConf
	// jail is nil with IsolationNone. runRoot holds the sandboxes' runtime
	// dirs (Unix sockets, so a short path); tmpRunRoot when it is in the
	// temporary dir (the data dir's path was too long).
	jail       *jail
	runRoot    string
	tmpRunRoot bool
	// cgroups is nil without resource limits (limitsOff says why).
	cgroups   *cgroupRoot
	limitsOff string

	watchMu  sync.Mutex
	watchID  int
	watchers map[int]func(sandbox.LimitEvent)

	mu    sync.Mutex
	locks map[string]*sessionLock // session id → lock (refcounted)
	live  map[string]*instance    // session id → running sandbox
}

type sessionLock struct {
	ch   chan struct{}
	refs int
}

// instance is a running sandbox.
type instance struct {
	id        string
	sessionID string
	workspace string
	home      string // the isolated HOME under state/
	proc      *opencode.Process
	ch        *channels // the sandbox's channels (nil without isolation)
	env       []string  // the session's variables (KEY=VALUE) for terminals and Exec; never logged
	expiresAt time.Time
	expiry    *time.Timer

	mu        sync.Mutex
	envFiles  []string               // env files written into the workspace (left out of snapshots)
	stopped   bool                   // no more terminals may open
	terminals map[*terminal]struct{} // open terminals, closed with the sandbox

	limits limitState // its cgroup and limit events (limits.go)

	ports *portAccess // preview handles, opened at the first preview (ports.go)

	// gatewayURL and binDir are the gateway's URL and the CLI's bin dir
	// as the sandbox's processes see them ("" for none): a terminal's
	// shell gets them too.
	gatewayURL, binDir string
}

func (in *instance) alive() bool {
	select {
	case <-in.proc.Exited():
		return false
	default:
		return true
	}
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a local provider.
func New(opts Options) (*Provider, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local sandbox: data dir is required")
	}
	abs, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: data dir: %w", err)
	}
	opts.DataDir = abs
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.CLIPath, err = resolveCLI(opts.CLIPath); err != nil {
		return nil, err
	}
	for _, d := range []string{"sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o700); err != nil {
			return nil, fmt.Errorf("local sandbox: create %s: %w", d, err)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Provider{
		opts:     opts,
		log:      log.With("provider", ProviderName),
		locks:    map[string]*sessionLock{},
		live:     map[string]*instance{},
		watchers: map[int]func(sandbox.LimitEvent){},
	}
	switch opts.Isolation {
	case "", IsolationBwrap:
		p.opts.Isolation = IsolationBwrap
		if err := p.initJail(); err != nil {
			return nil, err
		}
		if err := p.initLimits(); err != nil {
			return nil, err
		}
	case IsolationNone:
		p.limitsOff = "isolation is off"
		p.log.Warn("SANDBOX ISOLATION IS OFF (SANDBOX_ISOLATION=none): agents, terminals and git commands run as plain processes of this host, " +
			"as this user, with its network; a prompt-injected agent can read this process's secrets, every session's workspace and reach every local service. " +
			"Development only.")
	default:
		return nil, fmt.Errorf("local sandbox: unknown isolation %q (want %s or %s)", opts.Isolation, IsolationBwrap, IsolationNone)
	}
	return p, nil
}

// shortRunRoot is the runtime root of a data dir whose path is too long
// for socket paths: a directory of the temporary dir named after the data
// dir, so restarts reuse it. One that is not a directory of this user with
// mode 0700 (another user could create the name first) is not used; a
// fresh temporary directory is.
func shortRunRoot(dataDir string) (string, error) {
	sum := sha256.Sum256([]byte(dataDir))
	root := filepath.Join(os.TempDir(), "proliferate-sbx-"+hex.EncodeToString(sum[:6]))
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("local sandbox: runtime root: %w", err)
	}
	if st, err := os.Lstat(root); err == nil && st.IsDir() && st.Mode().Perm() == 0o700 && ownedByMe(st) {
		return root, nil
	}
	root, err := os.MkdirTemp("", "proliferate-sbx-")
	if err != nil {
		return "", fmt.Errorf("local sandbox: runtime root: %w", err)
	}
	return root, nil
}

// initJail prepares the bubblewrap sandboxes: the runtime root and what
// every sandbox shares (jail.go).
func (p *Provider) initJail() error {
	if p.opts.OpenCodeBin == "" || p.opts.PluginDir == "" {
		tools, err := opencode.ResolveTools(context.Background(), "")
		if err != nil {
			return fmt.Errorf("local sandbox: %w", err)
		}
		if p.opts.OpenCodeBin == "" {
			p.opts.OpenCodeBin = tools.Binary
		}
		if p.opts.PluginDir == "" {
			p.opts.PluginDir = tools.PluginDir
		}
	}
	bin, err := exec.LookPath(p.opts.OpenCodeBin)
	if err != nil {
		return fmt.Errorf("local sandbox: opencode binary: %w", err)
	}
	if p.opts.OpenCodeBin, err = filepath.Abs(bin); err != nil {
		return fmt.Errorf("local sandbox: opencode binary: %w", err)
	}
	if p.opts.CLIPath == "" {
		// Without isolation the agent finds a proliferate on this process's
		// PATH; a sandbox sees only /usr of it, so that binary is bound in.
		if found, err := exec.LookPath(cliName); err == nil {
			if p.opts.CLIPath, err = resolveCLI(found); err != nil {
				return err
			}
		}
	}
	p.runRoot = filepath.Join(p.opts.DataDir, "run")
	// Socket paths are limited to 107 bytes: <root>/<10 digits>/gateway.sock.
	if len(p.runRoot)+len("/0123456789/gateway.sock") > 100 {
		root, err := shortRunRoot(p.opts.DataDir)
		if err != nil {
			return err
		}
		p.runRoot, p.tmpRunRoot = root, true
	}
	if err := os.MkdirAll(p.runRoot, 0o700); err != nil {
		return fmt.Errorf("local sandbox: runtime root: %w", err)
	}
	j, err := newJail(p.opts.OpenCodeBin, p.opts.PluginDir, p.opts.CLIPath, filepath.Join(p.opts.DataDir, "jail"))
	if err != nil {
		return err
	}
	p.jail = j
	return p.initEgress()
}

// Isolation reports the provider's isolation mode.
func (p *Provider) Isolation() string { return p.opts.Isolation }

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return ProviderName }

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// lock serialises the operations of one session; it honours ctx while
// waiting.
func (p *Provider) lock(ctx context.Context, sessionID string) (unlock func(), err error) {
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
		l.refs--
		if l.refs == 0 {
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

func (p *Provider) sandboxDir(sessionID string) string {
	return filepath.Join(p.opts.DataDir, "sandboxes", sessionID)
}

func (p *Provider) snapshotPath(id string) string {
	return filepath.Join(p.opts.DataDir, "snapshots", id+".tar.gz")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return hex.EncodeToString(b)
}

// EnsureSandbox implements sandbox.Provider.
func (p *Provider) EnsureSandbox(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if !idRE.MatchString(spec.SessionID) {
		return sandbox.Sandbox{}, fmt.Errorf("local sandbox: invalid session id %q", spec.SessionID)
	}
	unlock, err := p.lock(ctx, spec.SessionID)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("local sandbox: ensure %s: %w", spec.SessionID, err)
	}
	defer unlock()
	log := p.log.With("session_id", spec.SessionID)

	p.mu.Lock()
	in := p.live[spec.SessionID]
	p.mu.Unlock()
	if in != nil {
		if in.alive() {
			log.Info("sandbox recovered", "sandbox_id", in.id)
			return in.sandbox(), nil
		}
		log.Warn("sandbox agent exited; starting a new one", "sandbox_id", in.id, "log", in.proc.LogPath)
		p.stop(in)
	}

	dir := p.sandboxDir(spec.SessionID)
	workspace := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("local sandbox: create %s: %w", dir, err)
	}
	started := time.Now()
	switch {
	case spec.SnapshotID != "":
		res, err := p.restore(spec.SnapshotID, spec.SessionID)
		if err != nil {
			return sandbox.Sandbox{}, err
		}
		log.Info("snapshot restored", "snapshot_id", spec.SnapshotID, "format", res.version,
			"conversation", res.agentState, "ms", time.Since(started).Milliseconds())
	case exists(workspace):
		log.Info("reusing the workspace of a previous sandbox")
	default:
		if err := cloneRepos(ctx, dir, workspace, spec.Repos, log); err != nil {
			return sandbox.Sandbox{}, err
		}
		log.Info("repositories cloned", "repos", len(spec.Repos), "ms", time.Since(started).Milliseconds())
	}

	// With isolation the agent reaches the gateway and the LLM only
	// through its channels, at fixed URLs of its own loopback.
	gatewayURL, llmURL := spec.GatewayURL, spec.LLM.BaseURL
	var ch *channels
	if p.jail != nil {
		var urls insideURLs
		if ch, urls, err = openChannels(p.runRoot, spec.SessionID, spec.GatewayURL, spec.LLM.BaseURL, p.egress, log); err != nil {
			return sandbox.Sandbox{}, err
		}
		gatewayURL, llmURL = urls.gateway, urls.llm
	}
	launched := false
	defer func() {
		if ch != nil && !launched {
			ch.close()
		}
	}()
	capSpec := capabilities.CapabilitySpec{
		SessionType:  spec.SessionType,
		ClientType:   spec.ClientType,
		GatewayURL:   gatewayURL,
		SessionID:    spec.SessionID,
		SandboxToken: spec.SandboxToken,
		SystemPrompt: spec.SystemPrompt,
	}
	files, err := capabilities.Write(workspace, capSpec)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("local sandbox: %w", err)
	}
	if err := excludePlatformFiles(workspace); err != nil {
		return sandbox.Sandbox{}, err
	}

	stateDir := filepath.Join(dir, "state")
	home := filepath.Join(stateDir, "home")
	envFiles, err := writeEnvFiles(workspace, stateDir, spec.EnvFiles)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := ensureBashrc(home); err != nil {
		return sandbox.Sandbox{}, err
	}
	agentDir := filepath.Join(stateDir, agentPrefix)
	paths := mapper{} // host paths as the agent sees them: unchanged without isolation
	var binDir string
	if p.jail != nil {
		paths = mapper{workspace: workspace, home: home, agentDir: agentDir}
		if p.opts.CLIPath != "" {
			binDir = jailCLIDir // the CLI is bound there
		}
	} else if binDir, err = p.linkCLI(stateDir); err != nil {
		return sandbox.Sandbox{}, err
	}
	model := spec.ModelID
	if model == "" {
		model = spec.LLM.Model
	}
	env := withPath(agentEnv(spec, capSpec), binDir)
	// The agent's shell commands source the values submitted during the
	// session (WriteEnv).
	env = append(env, "BASH_ENV="+paths.path(filepath.Join(home, sandbox.RuntimeEnvFile)))
	if p.jail != nil {
		env = append(env, "TMPDIR=/tmp", "GIT_CEILING_DIRECTORIES="+jailCeiling)
		env = append(env, egressEnv()...) // last: a session variable cannot route around the egress proxy
	} else {
		// git never walks up from the workspace into a repository around it.
		env = append(env, "GIT_CEILING_DIRECTORIES="+hostCeiling(workspace))
	}
	launch := opencode.LaunchOptions{
		Binary:    p.opts.OpenCodeBin,
		PluginDir: p.opts.PluginDir,
		Workspace: workspace,
		StateDir:  stateDir,
		DBPath:    filepath.Join(agentDir, agentDBName),
		Provider: opencode.Provider{
			ID: spec.LLM.ProviderID, NPM: spec.LLM.NPM, BaseURL: llmURL,
			APIKey: spec.LLM.APIKey, Models: []string{model},
		},
		Model:        model,
		ExtraConfig:  map[string]any{"instructions": []string{paths.path(files.Instructions)}},
		Env:          env,
		ReadyTimeout: p.opts.ReadyTimeout,
		Logger:       log,
	}
	id := "lsb_" + randomHex(6) + "_" + spec.SessionID
	var cg *sandboxCgroup
	if p.cgroups != nil {
		if cg, err = p.cgroups.create(id); err != nil {
			return sandbox.Sandbox{}, err
		}
		defer func() {
			if !launched {
				cg.remove()
			}
		}()
	}
	if p.jail != nil {
		binds := jailBinds{workspace: workspace, home: home, agentDir: agentDir, runDir: ch.dir}
		launch.Jail = &opencode.Jail{
			Wrap: func(argv []string) []string { return p.jail.launch(cg, 0, p.jail.agentArgv(binds, argv)) },
			Path: paths.path, Port: jailAgentPort, URL: ch.agentURL(),
		}
	}
	if err := relinkPluginDeps(filepath.Join(workspace, ".opencode"), p.opts.PluginDir); err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := writeGlobalConfig(launch); err != nil {
		return sandbox.Sandbox{}, err
	}
	proc, err := opencode.Launch(ctx, launch)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("local sandbox: start agent for %s: %w", spec.SessionID, err)
	}
	launched = true
	in = &instance{
		id:        id,
		sessionID: spec.SessionID,
		workspace: workspace,
		home:      home,
		proc:      proc,
		ch:        ch,
		env:       sessionEnv(spec.EnvVars),
		envFiles:  envFiles,
		expiresAt: started.Add(p.opts.Timeout),
		terminals: map[*terminal]struct{}{},
		limits:    limitState{cg: cg, done: make(chan struct{})},
	}
	in.gatewayURL, in.binDir = gatewayURL, binDir
	in.expiry = time.AfterFunc(time.Until(in.expiresAt), func() { p.expire(in) })
	if cg != nil {
		go p.watchLimits(in)
	}
	p.mu.Lock()
	p.live[spec.SessionID] = in
	p.mu.Unlock()
	log.Info("sandbox started", "sandbox_id", in.id, "tools", files.Tools, "env_vars", len(in.env), "env_files", envFiles, "expires_at", in.expiresAt, "isolation", p.opts.Isolation,
		"ms", time.Since(started).Milliseconds(), "agent_startup_ms", proc.StartupDuration.Milliseconds())
	return in.sandbox(), nil
}

func (in *instance) sandbox() sandbox.Sandbox {
	return sandbox.Sandbox{ID: in.id, AgentURL: in.proc.URL, AgentPassword: in.proc.Password,
		Workspace: in.workspace, ExpiresAt: in.expiresAt}
}

// expire ends a sandbox whose lifetime is over: the agent and terminals
// stop, the workspace and agent state stay for a later EnsureSandbox.
func (p *Provider) expire(in *instance) {
	unlock, err := p.lock(context.Background(), in.sessionID)
	if err != nil {
		return
	}
	defer unlock()
	if p.instanceFor(in.sessionID, in.id) != in {
		return // already stopped, paused or replaced
	}
	p.log.Info("sandbox lifetime over; stopping it", "session_id", in.sessionID, "sandbox_id", in.id,
		"expires_at", in.expiresAt)
	p.stop(in)
}

// stop ends a sandbox: its expiry timer, its terminals and its agent; it
// is no longer live. Its files stay.
func (p *Provider) stop(in *instance) {
	in.expiry.Stop()
	in.mu.Lock()
	in.stopped = true
	terms := slices.Collect(maps.Keys(in.terminals))
	in.mu.Unlock()
	for _, t := range terms {
		_ = t.Close()
	}
	if p.jail != nil && killJail(in.proc.Pid()) {
		// The whole sandbox at once; bwrap reaps it and exits with it.
		t := time.NewTimer(opencode.StopGrace)
		select {
		case <-in.proc.Exited():
		case <-t.C:
		}
		t.Stop()
	}
	in.proc.Stop()
	in.closePorts()
	if in.ch != nil {
		in.ch.close()
	}
	p.stopLimits(in)
	p.forget(in)
}

func (p *Provider) forget(in *instance) {
	p.mu.Lock()
	if p.live[in.sessionID] == in {
		delete(p.live, in.sessionID)
	}
	p.mu.Unlock()
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// agentEnv is the agent's extra environment: git identity, the session's
// variables, then the platform's (which cannot be overridden).
func agentEnv(spec sandbox.Spec, capSpec capabilities.CapabilitySpec) []string {
	env := []string{
		"GIT_AUTHOR_NAME=Proliferate Agent", "GIT_AUTHOR_EMAIL=agent@proliferate.dev",
		"GIT_COMMITTER_NAME=Proliferate Agent", "GIT_COMMITTER_EMAIL=agent@proliferate.dev",
	}
	env = append(env, sessionEnv(spec.EnvVars)...)
	return append(env, capabilities.Env(capSpec)...)
}

// hostCeiling is the workspace's parent on the host (symlinks resolved, as
// git compares them): the GIT_CEILING_DIRECTORIES of commands run without
// isolation.
func hostCeiling(workspace string) string {
	if real, err := filepath.EvalSymlinks(workspace); err == nil {
		workspace = real
	}
	return filepath.Dir(workspace)
}

// relinkPluginDeps links the seeded plugin dependencies again into a
// workspace restored from a snapshot (which leaves the link out: it points
// at a host path): opencode.SeedPluginDeps leaves a dir with a
// package.json alone, and without node_modules OpenCode would run
// `npm install` before loading the platform tools, which never finishes in
// a sandbox without network. Only our own seed (the plugin dir's
// package.json) is relinked; a workspace's own dependencies stay its own.
func relinkPluginDeps(dir, pluginDir string) error {
	if pluginDir == "" || exists(filepath.Join(dir, "node_modules")) {
		return nil
	}
	have, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return nil // not seeded yet: Launch seeds it
	}
	ours, err := os.ReadFile(filepath.Join(pluginDir, "package.json"))
	if err != nil || !bytes.Equal(have, ours) {
		return nil
	}
	if err := os.Symlink(filepath.Join(pluginDir, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		return fmt.Errorf("local sandbox: link plugin dependencies: %w", err)
	}
	return nil
}

// writeGlobalConfig writes the OpenCode config to the isolated home's
// ~/.config/opencode/opencode.json (the agent also gets it through
// OPENCODE_CONFIG_CONTENT). It stays outside the workspace, so the LLM key
// never lands in a snapshot.
func writeGlobalConfig(opts opencode.LaunchOptions) error {
	cfg, err := opencode.BuildConfig(opts)
	if err != nil {
		return fmt.Errorf("local sandbox: %w", err)
	}
	dir := filepath.Join(opts.StateDir, "home", ".config", "opencode")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local sandbox: config dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("local sandbox: write opencode.json: %w", err)
	}
	return nil
}

// instanceFor returns the live sandbox of a session when its id matches.
func (p *Provider) instanceFor(sessionID, sandboxID string) *instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.live[sessionID]
	if in == nil || (sandboxID != "" && in.id != sandboxID) {
		return nil
	}
	return in
}

// Snapshot implements sandbox.Provider.
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("local sandbox: snapshot %s: %w", sessionID, err)
	}
	defer unlock()
	in := p.instanceFor(sessionID, sandboxID)
	if in == nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("local sandbox: snapshot %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	return p.snapshot(ctx, in, true)
}

// snapshot writes a snapshot of the sandbox's workspace and agent
// database. live means the agent may be running (see stableCopy).
func (p *Provider) snapshot(ctx context.Context, in *instance, live bool) (sandbox.SnapshotInfo, error) {
	id := "snap_" + randomHex(12)
	started := time.Now()
	src := snapshotSource{
		sessionID: in.sessionID,
		workspace: in.workspace,
		agentDir:  filepath.Join(p.sandboxDir(in.sessionID), "state", agentPrefix),
		live:      live,
		skip:      in.envFileSet(),
	}
	size, err := writeSnapshot(ctx, src, p.snapshotPath(id))
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("local sandbox: snapshot %s: %w", in.id, err)
	}
	p.log.Info("snapshot saved", "session_id", in.sessionID, "sandbox_id", in.id, "snapshot_id", id,
		"bytes", size, "live", live, "ms", time.Since(started).Milliseconds())
	return sandbox.SnapshotInfo{ID: id, Bytes: size}, nil
}

// DeleteSnapshot implements sandbox.Provider.
func (p *Provider) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if !idRE.MatchString(snapshotID) {
		return nil
	}
	if err := os.Remove(p.snapshotPath(snapshotID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local sandbox: delete snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// Pause implements sandbox.Provider: stop the agent (so its database is
// quiet and complete on disk), snapshot the workspace and database, then
// discard them (the snapshot holds them). When the snapshot fails the
// sandbox stays stopped but its workspace and state stay on disk, so a later
// EnsureSandbox of the session resumes on them; the error is returned.
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("local sandbox: pause %s: %w", sessionID, err)
	}
	defer unlock()
	in := p.instanceFor(sessionID, sandboxID)
	if in == nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("local sandbox: pause %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	p.stop(in)
	id, err := p.snapshot(ctx, in, false)
	if err != nil {
		p.log.Warn("pause: snapshot failed; the workspace and agent state stay on disk",
			"session_id", sessionID, "sandbox_id", in.id, "error", err)
		return sandbox.SnapshotInfo{}, err
	}
	if err := os.RemoveAll(p.sandboxDir(sessionID)); err != nil {
		p.log.Warn("could not remove the paused workspace", "session_id", sessionID, "error", err)
	}
	p.log.Info("sandbox paused", "session_id", sessionID, "sandbox_id", in.id, "snapshot_id", id.ID)
	return id, nil
}

// Terminate implements sandbox.Provider: it stops the session's sandbox
// (when sandboxID is its id, or empty) and removes its workspace. A newer
// sandbox of the session than sandboxID is left alone.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if !idRE.MatchString(sessionID) {
		return fmt.Errorf("local sandbox: invalid session id %q", sessionID)
	}
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("local sandbox: terminate %s: %w", sessionID, err)
	}
	defer unlock()
	p.mu.Lock()
	in := p.live[sessionID]
	p.mu.Unlock()
	if in != nil {
		if sandboxID != "" && in.id != sandboxID {
			return nil
		}
		p.stop(in)
	}
	if err := os.RemoveAll(p.sandboxDir(sessionID)); err != nil {
		return fmt.Errorf("local sandbox: remove workspace of %s: %w", sessionID, err)
	}
	p.log.Info("sandbox terminated", "session_id", sessionID, "sandbox_id", sandboxID)
	return nil
}

// Alive implements sandbox.Provider. Sandboxes of another process (or
// another provider instance) are not alive: the agent dies with the process
// that launched it.
func (p *Provider) Alive(ctx context.Context, sandboxID string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.live {
		if in.id == sandboxID {
			return in.alive(), nil
		}
	}
	return false, nil
}

// Close stops every sandbox this provider started (process shutdown): their
// expiry timers, terminals and agents. The workspaces and agent state stay,
// so a later EnsureSandbox of a session resumes its work and conversation.
func (p *Provider) Close() {
	p.mu.Lock()
	all := slices.Collect(maps.Values(p.live))
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range all {
		wg.Go(func() { p.stop(in) })
	}
	wg.Wait()
	if p.tmpRunRoot {
		_ = os.Remove(p.runRoot) // only when empty: no sandbox runs on it
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
