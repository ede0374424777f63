// Package opencode drives the OpenCode coding agent: it launches
// `opencode serve` offline in a workspace with an isolated home, talks to
// its HTTP API (sessions, prompt_async, abort, history, status, health) and
// reads its SSE event stream with a heartbeat timeout.
//
// Launch gives every process a private HOME and XDG directories under a
// per-session state dir, every offline flag OpenCode knows, its whole
// configuration through OPENCODE_CONFIG_CONTENT (one provider pointing at
// the scripted LLM or the platform's LLM proxy, permissive tool
// permissions), a random OPENCODE_SERVER_PASSWORD (the Client sends it with
// Basic auth) and pre-seeded plugin dependencies, so the first prompt is
// not blocked by OpenCode's background `npm install`. The agent's database
// (sessions, messages, parts) lives in memory unless LaunchOptions.DBPath
// names a file (OPENCODE_DB): OpenCode 1.18.33 then keeps it in SQLite WAL
// mode as <DBPath>, <DBPath>-wal and <DBPath>-shm, and leaves the -wal file
// un-checkpointed when it is stopped, so a copy of the conversation is the
// database file together with its -wal file. The listening port is
// read from the process output (`--port 0` still tries 4096 first; a
// jailed agent, LaunchOptions.Jail, listens on a fixed port of its own
// loopback and is reached through the jail's forwarder), and
// readiness is polled with a short per-request timeout because early
// requests can hang. The process runs in its own process group so Stop
// also reaps what the agent spawned (bash tool children).
package opencode

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Provider is the model provider OpenCode uses.
type Provider struct {
	// ID is the provider id in OpenCode's config ("sim", "anthropic"…).
	ID string
	// Name is a display name; defaults to ID.
	Name string
	// NPM is the AI SDK package; defaults to "@ai-sdk/anthropic" (built in).
	NPM string
	// BaseURL is the API base, e.g. "http://127.0.0.1:8787/v1" for llmsim
	// or the LLM proxy; OpenCode calls {BaseURL}/messages.
	BaseURL string
	// APIKey is sent as x-api-key. Never logged.
	APIKey string
	// Models lists the model ids the provider offers; Model must be one.
	Models []string
}

// LaunchOptions configures Launch.
type LaunchOptions struct {
	// Binary is the opencode executable; empty resolves it with
	// scripts/opencode.sh (see ResolveTools).
	Binary string
	// PluginDir holds node_modules/@opencode-ai/plugin, package.json and
	// package-lock.json (scripts/opencode.sh plugin-dir); empty resolves it
	// like Binary.
	PluginDir string
	// Workspace is the agent's working directory (created if missing).
	Workspace string
	// StateDir is the per-session directory for the isolated HOME, XDG
	// dirs and the log file (created if missing).
	StateDir string
	// DBPath is the agent's database file (OPENCODE_DB; its directory is
	// created if missing). Empty keeps the database in memory: the
	// conversation dies with the process.
	DBPath string
	// Provider and Model ("<model id>" of Provider) select the LLM.
	Provider Provider
	Model    string
	// SmallModel is used for titles and summaries; defaults to Model.
	SmallModel string
	// ExtraConfig is merged (top-level keys) over the generated config,
	// e.g. "instructions", "mcp", "agent".
	ExtraConfig map[string]any
	// Env adds KEY=VALUE entries to the process environment. The parent's
	// environment is NOT inherited beyond PATH, locale and TMPDIR, so host
	// secrets never reach the agent.
	Env []string
	// ReadyTimeout bounds start-up until /global/health answers; 0 means 60 s.
	ReadyTimeout time.Duration
	// Logger receives lifecycle lines; nil discards.
	Logger *slog.Logger
	// Jail, when set, runs the agent inside an isolation layer with its own
	// view of the filesystem and its own network namespace (the local
	// sandbox provider's bubblewrap sandbox). Nil runs it as a plain
	// process of this host.
	Jail *Jail
}

// Process is a running `opencode serve`.
type Process struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:4096.
	URL string
	// Password is the Basic-auth password of this process.
	Password string
	// LogPath is where stdout and stderr go.
	LogPath string
	// StartupDuration is the time from exec to the first healthy answer.
	StartupDuration time.Duration

	cmd      *exec.Cmd
	tag      string // env entry marking the agent and everything it spawns
	log      *slog.Logger
	logFile  *os.File
	exited   chan struct{}
	waitErr  error
	stopOnce sync.Once
	client   *Client
}

// Client returns a client for the process, scoped to its workspace.
func (p *Process) Client() *Client { return p.client }

// Pid is the process id (also its process-group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

var listenRE = regexp.MustCompile(`listening on (https?://[^\s]+)`)

// offlineEnv are the flags that keep OpenCode from reaching the network on
// its own.
var offlineEnv = []string{
	"OPENCODE_DISABLE_AUTOUPDATE=1",
	"OPENCODE_DISABLE_MODELS_FETCH=1",
	"OPENCODE_DISABLE_SHARE=1",
	"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
	"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
	"OPENCODE_DISABLE_CLAUDE_CODE=1",
	"OPENCODE_DISABLE_EXTERNAL_SKILLS=1",
}

// BuildConfig returns the OPENCODE_CONFIG_CONTENT for the options.
func BuildConfig(opts LaunchOptions) (string, error) {
	p := opts.Provider
	if p.ID == "" || p.BaseURL == "" {
		return "", errors.New("opencode: provider id and base URL are required")
	}
	if opts.Model == "" {
		return "", errors.New("opencode: model is required")
	}
	models := map[string]any{}
	for _, m := range append([]string{opts.Model, opts.SmallModel}, p.Models...) {
		if m != "" {
			models[m] = map[string]any{"name": m, "tool_call": true}
		}
	}
	npm := p.NPM
	if npm == "" {
		npm = "@ai-sdk/anthropic"
	}
	name := p.Name
	if name == "" {
		name = p.ID
	}
	small := opts.SmallModel
	if small == "" {
		small = opts.Model
	}
	cfg := map[string]any{
		"$schema":           "https://opencode.ai/config.json",
		"model":             p.ID + "/" + opts.Model,
		"small_model":       p.ID + "/" + small,
		"enabled_providers": []string{p.ID},
		"autoupdate":        false,
		"share":             "disabled",
		"provider": map[string]any{p.ID: map[string]any{
			"npm":     npm,
			"name":    name,
			"options": map[string]any{"baseURL": p.BaseURL, "apiKey": p.APIKey},
			"models":  models,
		}},
		// Tools run without prompting; the question tool would block on a
		// browser dialog nobody answers.
		"permission": map[string]any{
			"edit":               "allow",
			"bash":               "allow",
			"webfetch":           "allow",
			"doom_loop":          "allow",
			"external_directory": "allow",
			"question":           "deny",
		},
	}
	maps.Copy(cfg, opts.ExtraConfig)
	data, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("opencode: encode config: %w", err)
	}
	return string(data), nil
}

// SeedPluginDeps makes dir (a workspace's .opencode or the isolated
// ~/.config/opencode) look like OpenCode's own `npm install
// @opencode-ai/plugin` already ran there: node_modules links to the shared
// install, package.json and package-lock.json are copied. An existing
// package.json is left alone (the workspace manages its own deps then).
func SeedPluginDeps(dir, pluginDir string) error {
	if pluginDir == "" {
		return errors.New("opencode: no plugin dir to seed from")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("opencode: seed plugin deps: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err == nil {
		return nil
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		data, err := os.ReadFile(filepath.Join(pluginDir, f))
		if err != nil {
			return fmt.Errorf("opencode: seed plugin deps: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return fmt.Errorf("opencode: seed plugin deps: %w", err)
		}
	}
	nm := filepath.Join(dir, "node_modules")
	if _, err := os.Lstat(nm); err == nil {
		return nil
	}
	if err := os.Symlink(filepath.Join(pluginDir, "node_modules"), nm); err != nil {
		return fmt.Errorf("opencode: seed plugin deps: %w", err)
	}
	return nil
}

func randomPassword() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("opencode: generate password: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// baseEnv is the little of the parent environment the agent inherits.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "LANG", "LC_ALL", "TZ", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if _, ok := os.LookupEnv("PATH"); !ok {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	return env
}

// Launch starts `opencode serve` and waits until it is healthy. On error
// nothing is left running.
func Launch(ctx context.Context, opts LaunchOptions) (*Process, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Workspace == "" || opts.StateDir == "" {
		return nil, errors.New("opencode: workspace and state dir are required")
	}
	config, err := BuildConfig(opts)
	if err != nil {
		return nil, err
	}
	if opts.Binary == "" || opts.PluginDir == "" {
		tools, err := ResolveTools(ctx, "")
		if err != nil {
			return nil, err
		}
		if opts.Binary == "" {
			opts.Binary = tools.Binary
		}
		if opts.PluginDir == "" {
			opts.PluginDir = tools.PluginDir
		}
	}
	workspace, err := filepath.Abs(opts.Workspace)
	if err != nil {
		return nil, fmt.Errorf("opencode: workspace: %w", err)
	}
	state, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("opencode: state dir: %w", err)
	}
	home := filepath.Join(state, "home")
	xdg := map[string]string{
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"XDG_DATA_HOME":   filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME":  filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME":  filepath.Join(home, ".cache"),
	}
	for _, d := range append([]string{workspace, home}, slices(xdg)...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("opencode: create %s: %w", d, err)
		}
	}
	if err := SeedPluginDeps(filepath.Join(xdg["XDG_CONFIG_HOME"], "opencode"), opts.PluginDir); err != nil {
		return nil, err
	}
	if err := SeedPluginDeps(filepath.Join(workspace, ".opencode"), opts.PluginDir); err != nil {
		return nil, err
	}
	db := ":memory:"
	if opts.DBPath != "" {
		if db, err = filepath.Abs(opts.DBPath); err != nil {
			return nil, fmt.Errorf("opencode: database path: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			return nil, fmt.Errorf("opencode: create database dir: %w", err)
		}
	}
	password, err := randomPassword()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(state, "opencode.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opencode: open log: %w", err)
	}

	inside := func(p string) string { return p }
	if opts.Jail != nil {
		inside = opts.Jail.Path
	}
	env := baseEnv()
	env = append(env, "HOME="+inside(home), "USER=opencode")
	for k, v := range xdg {
		env = append(env, k+"="+inside(v))
	}
	env = append(env, offlineEnv...)
	if db != ":memory:" {
		env = append(env, "OPENCODE_DB="+inside(db))
	} else {
		env = append(env, "OPENCODE_DB="+db)
	}
	env = append(env, "OPENCODE_CONFIG_CONTENT="+config, "OPENCODE_SERVER_PASSWORD="+password)
	env = append(env, opts.Env...)
	tag := "PROLIFERATE_AGENT_TAG=" + password[:16]
	env = append(env, tag)

	// The process must outlive ctx (ctx only bounds start-up), so it is not
	// started with CommandContext.
	argv := []string{opts.Binary, "serve", "--hostname", "127.0.0.1", "--port", "0"}
	if opts.Jail != nil {
		argv = opts.Jail.Wrap([]string{opts.Binary, "serve", "--hostname", "127.0.0.1", "--port", strconv.Itoa(opts.Jail.Port)})
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = workspace
	cmd.Env = env
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("opencode: stdout pipe: %w", err)
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("opencode: start %s: %w", opts.Binary, err)
	}
	p := &Process{Password: password, LogPath: logPath, cmd: cmd, tag: tag, log: log, logFile: logFile, exited: make(chan struct{})}
	urlCh := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		scanStdout(stdout, logFile, urlCh)
	}()
	go func() {
		<-copied // stdout fully drained before Wait closes the pipe
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	readyCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) (*Process, error) {
		p.Stop()
		return nil, fmt.Errorf("%w (log %s: %s)", err, logPath, tail(logPath, 800))
	}
	select {
	case u := <-urlCh:
		p.URL = u
		if opts.Jail != nil {
			p.URL = opts.Jail.URL // u is the jail's own loopback
		}
	case <-p.exited:
		return fail(fmt.Errorf("opencode: exited before listening: %v", p.waitErr))
	case <-readyCtx.Done():
		return fail(fmt.Errorf("opencode: no listening address within %s: %w", timeout, readyCtx.Err()))
	}
	p.client, err = NewClient(p.URL, ClientOptions{Password: password, Directory: inside(workspace)})
	if err != nil {
		return fail(err)
	}
	if err := waitHealthy(readyCtx, p); err != nil {
		return fail(err)
	}
	p.StartupDuration = time.Since(started)
	log.Info("opencode ready", "url", p.URL, "pid", cmd.Process.Pid, "workspace", workspace,
		"jailed", opts.Jail != nil, "startup_ms", p.StartupDuration.Milliseconds())
	return p, nil
}

func slices(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// scanStdout copies the process output to the log and reports the first
// listening URL.
func scanStdout(r io.Reader, log io.Writer, urlCh chan<- string) {
	br := bufio.NewReaderSize(r, 64<<10)
	sent := false
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			_, _ = io.WriteString(log, line)
			if !sent {
				if m := listenRE.FindStringSubmatch(line); m != nil {
					urlCh <- strings.TrimRight(m[1], "/")
					sent = true
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// waitHealthy polls GET /global/health, each try bounded to a second
// (requests in the first moments can hang), backing off from 25 ms to
// 500 ms.
func waitHealthy(ctx context.Context, p *Process) error {
	probe := &Client{base: p.client.base, password: p.client.password, http: p.client.http, timeout: time.Second}
	delay := 25 * time.Millisecond
	var lastErr error
	for {
		h, err := probe.Health(ctx)
		if err == nil && h.Healthy {
			return nil
		}
		if err == nil {
			err = errors.New("reported unhealthy")
		}
		lastErr = err
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("opencode: not healthy: %w (last: %v)", ctx.Err(), lastErr)
		case <-p.exited:
			t.Stop()
			return fmt.Errorf("opencode: exited during start-up: %v", p.waitErr)
		case <-t.C:
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return strings.TrimSpace(string(buf))
}

// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
const StopGrace = 3 * time.Second

// Stop terminates the process and everything in its process group (SIGTERM,
// then SIGKILL after StopGrace) and waits for it. It is idempotent.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(StopGrace)
		select {
		case <-p.exited:
			t.Stop()
		case <-t.C:
			p.log.Warn("opencode did not exit on SIGTERM; killing", "pid", pgid)
		}
		// Children (bash tool commands) may survive their parent: kill the
		// whole group, then whatever detached from it but still carries
		// this agent's tag.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		// The process counts as exited once its output pipe is drained: a
		// tagged descendant that left the group and still holds the pipe
		// would keep it open, so it is killed too, and the wait is bounded.
		t = time.NewTimer(StopGrace)
		select {
		case <-p.exited:
			t.Stop()
		case <-t.C:
			killTagged(p.tag)
			t = time.NewTimer(StopGrace)
			select {
			case <-p.exited:
				t.Stop()
			case <-t.C:
				p.log.Error("opencode still not reaped after SIGKILL; giving up waiting", "pid", pgid)
			}
		}
		for range 3 {
			if killTagged(p.tag) == 0 {
				break
			}
		}
		p.logFile.Close()
		p.log.Info("opencode stopped", "pid", pgid)
	})
}

// Wait blocks until the process exits and returns its exit error.
func (p *Process) Wait() error {
	<-p.exited
	return p.waitErr
}
