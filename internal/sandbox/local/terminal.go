package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/sandbox"
)

var _ sandbox.Terminals = (*Provider)(nil)

// terminalShells are tried in order; the first that exists runs.
var terminalShells = []string{"/bin/bash", "/bin/sh"}

// terminalCloseGrace is how long Close waits for the shell to be reaped
// after SIGKILL before giving up on it (it cannot survive SIGKILL, so
// this only guards against a wedged kernel wait).
const terminalCloseGrace = 5 * time.Second

// OpenTerminal implements sandbox.Terminals: an interactive (non-login)
// shell on a pseudo-terminal, in its own session, with the workspace as
// its working directory and an environment of the sandbox's isolated HOME
// and XDG directories, PATH (with the proliferate CLI first, as the
// agent's), TERM, LANG, the git identity and env (the gateway's terminal
// credential; PROLIFERATE_GATEWAY_URL becomes the gateway's address as the
// sandbox sees it; env never overrides the variables above nor the egress
// proxy). Neither the LLM key nor the sandbox token reaches it. The
// terminal is closed with the sandbox (Terminate, Pause, expiry, Close).
// With isolation the shell runs in a bubblewrap sandbox of its own with the
// same binds as the agent's (the workspace and home at /workspace and
// /home/agent), its own pid, mount, ipc and uts namespaces (it does not
// see the agent's processes) and the agent sandbox's network namespace:
// a service listening on the sandbox's localhost (a dev server the agent
// or `proliferate services` started) is reached on localhost, and the
// ways out are the agent's forwarders, the egress proxy on
// 127.0.0.1:4102 (egress.go) and the gateway channel (this session's
// routes only, channels.go) on 127.0.0.1:4100. The agent's port (4096)
// needs the agent's password and the LLM channel (4101) the LLM key,
// which the terminal does not have. The network namespace is entered
// through the preview handles (ports.go: opened through a /proc handle on
// the sandbox's init checked to be bwrap's child): the launcher joins the
// sandbox's cgroup, nsenter enters its user and network namespaces and
// nothing else, and bwrap builds the terminal's sandbox there
// (--unshare-all --share-net, no capabilities, the seccomp filter).
func (p *Provider) OpenTerminal(ctx context.Context, sessionID, sandboxID string, cols, rows uint16, env map[string]string) (sandbox.Terminal, error) {
	if !idRE.MatchString(sessionID) {
		return nil, fmt.Errorf("local sandbox: invalid session id %q", sessionID)
	}
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: open terminal in %s: %w", sessionID, err)
	}
	defer unlock()
	in := p.instanceFor(sessionID, sandboxID)
	if in == nil || !in.alive() {
		return nil, fmt.Errorf("local sandbox: open terminal in %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	shell := ""
	for _, s := range terminalShells {
		if _, err := os.Stat(s); err == nil {
			shell = s
			break
		}
	}
	if shell == "" {
		return nil, errors.New("local sandbox: open terminal: no shell found")
	}
	cmd := exec.Command(shell, "-i")
	cmd.Dir = in.workspace
	// The session's variables first: the shell's own win.
	cmd.Env = append(slices.Clone(in.env), withTerminalEnv(terminalEnv(in.home, hostCeiling(in.workspace), in.binDir), env, in.gatewayURL)...)
	var ns *portAccess
	if p.jail != nil {
		// A sandbox of its own with the workspace and home (the agent's
		// runtime dir is not there) in the agent sandbox's network
		// namespace. It keeps the pty as its controlling terminal for job
		// control: the pty is the sandbox's alone, so no --new-session.
		cg, ok := p.sandboxCgroup(in)
		if !ok {
			return nil, fmt.Errorf("local sandbox: open terminal in %s: %w", sandboxID, sandbox.ErrNotFound)
		}
		if ns, err = p.portsFor(sessionID, sandboxID); err != nil {
			return nil, fmt.Errorf("local sandbox: open terminal in %s: %w", sandboxID, err)
		}
		binds := jailBinds{workspace: in.workspace, home: in.home, shareNet: true}
		argv := p.jail.launchIn(cg, execOOMScore, ns.enter(), append([]string{p.jail.bwrap}, p.jail.args(binds, false, shell, "-i")...))
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = []*os.File{ns.userNS, ns.netNS} // fds 3 and 4 (portAccess.enter)
		cmd.Dir = in.workspace
		cmd.Env = append(append(slices.Clone(in.env), withTerminalEnv(terminalEnv(JailHome, jailCeiling, in.binDir), env, in.gatewayURL)...), egressEnv()...)
	}

	in.mu.Lock()
	defer in.mu.Unlock()
	// The namespace handles stay open while in.mu is held (closePorts
	// swaps them out under it first).
	if in.stopped || (ns != nil && in.ports != ns) {
		return nil, fmt.Errorf("local sandbox: open terminal in %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	// pty.StartWithSize makes the shell a session leader with the pty as
	// its controlling terminal: its pid is its session and process group.
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		return nil, fmt.Errorf("local sandbox: start terminal shell: %w", err)
	}
	t := &terminal{master: master, cmd: cmd, jailed: p.jail != nil, exited: make(chan struct{})}
	t.onClose = func() {
		in.mu.Lock()
		delete(in.terminals, t)
		in.mu.Unlock()
	}
	go func() {
		_ = cmd.Wait()
		close(t.exited)
	}()
	in.terminals[t] = struct{}{}
	p.log.Info("terminal opened", "session_id", sessionID, "sandbox_id", in.id, "shell", shell, "pid", cmd.Process.Pid)
	return t, nil
}

// terminalEnv is a terminal shell's own environment; git stops at
// ceiling (the workspace's parent); binDir ("" for none) comes first on
// PATH.
func terminalEnv(home, ceiling, binDir string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	if binDir != "" {
		path = binDir + string(os.PathListSeparator) + path
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	return append([]string{
		"PATH=" + path,
		"HOME=" + home,
		"USER=opencode",
		"SHELL=/bin/bash",
		"TERM=xterm-256color",
		"LANG=" + lang,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"GIT_AUTHOR_NAME=Proliferate Agent", "GIT_AUTHOR_EMAIL=agent@proliferate.dev",
		"GIT_COMMITTER_NAME=Proliferate Agent", "GIT_COMMITTER_EMAIL=agent@proliferate.dev",
		"GIT_CEILING_DIRECTORIES=" + ceiling,
	}, capabilities.GitCredentialEnv...) // a person's push asks the gateway with the terminal's token
}

// withTerminalEnv appends the caller's variables (valid names only, in a
// stable order) that base does not set; PROLIFERATE_GATEWAY_URL becomes
// gatewayURL, the gateway as the shell reaches it (dropped when "").
func withTerminalEnv(base []string, extra map[string]string, gatewayURL string) []string {
	own := map[string]bool{}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		own[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		v := extra[k]
		if !envKeyRE.MatchString(k) || own[k] || strings.HasSuffix(strings.ToLower(k), "_proxy") {
			continue
		}
		if k == capabilities.EnvGatewayURL {
			if gatewayURL == "" {
				continue
			}
			v = gatewayURL
		}
		base = append(base, k+"="+v)
	}
	return base
}

// terminal is a shell on a pseudo-terminal.
type terminal struct {
	master    *os.File
	cmd       *exec.Cmd
	jailed    bool // cmd is the bwrap running the shell
	exited    chan struct{}
	onClose   func()
	closeOnce sync.Once
}

// Read returns the terminal's output; io.EOF once the shell is gone.
func (t *terminal) Read(b []byte) (int, error) {
	n, err := t.master.Read(b)
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		return n, io.EOF
	}
	return n, err
}

// Write sends keystrokes.
func (t *terminal) Write(b []byte) (int, error) { return t.master.Write(b) }

// Resize implements sandbox.Terminal.
func (t *terminal) Resize(cols, rows uint16) error {
	if err := pty.Setsize(t.master, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		return fmt.Errorf("local sandbox: resize terminal: %w", err)
	}
	return nil
}

// Close kills the shell and everything in its session (commands, jobs in
// their own process groups), waits for the shell and releases the pty. It
// is idempotent.
func (t *terminal) Close() error {
	t.closeOnce.Do(func() {
		sid := t.cmd.Process.Pid
		if t.jailed && killJail(sid) {
			// The sandbox is gone; bwrap reaps it and exits.
			timer := time.NewTimer(terminalCloseGrace)
			select {
			case <-t.exited:
			case <-timer.C:
			}
			timer.Stop()
		}
		_ = syscall.Kill(-sid, syscall.SIGKILL)
		killSession(sid)
		timer := time.NewTimer(terminalCloseGrace)
		select {
		case <-t.exited:
		case <-timer.C:
		}
		timer.Stop()
		killSession(sid) // whatever forked while the shell was dying
		_ = t.master.Close()
		t.onClose()
	})
	return nil
}
