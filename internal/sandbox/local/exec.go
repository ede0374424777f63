package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// DefaultExecTimeout bounds an Exec command without its own Timeout.
const DefaultExecTimeout = 2 * time.Minute

// jailCeiling is GIT_CEILING_DIRECTORIES in the sandbox: the parent of
// JailWorkspace.
const jailCeiling = "/"

// maxExecOutput caps each of a command's stdout and stderr.
const maxExecOutput = 8 << 20

var _ sandbox.Executor = (*Provider)(nil)

// Exec implements sandbox.Executor: it runs cmd in the workspace of the
// live sandbox sandboxID, as its own process group (killed with the group
// on timeout), with a minimal environment (PATH, the sandbox's isolated
// HOME) plus cmd.Env. cmd.Dir is confined to the workspace through os.Root:
// absolute paths, ".." escapes and symlinks resolving outside are refused.
// With isolation the command runs in a bubblewrap sandbox of its own with
// the agent's binds (at /workspace and /home/agent) and no network but
// the egress proxy (egress.go: a git push reaches an allowlisted host).
func (p *Provider) Exec(ctx context.Context, sandboxID string, cmd sandbox.ExecCommand) (sandbox.ExecResult, error) {
	if len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return sandbox.ExecResult{}, errors.New("local sandbox: exec: empty command")
	}
	in := p.instanceByID(sandboxID)
	if in == nil {
		return sandbox.ExecResult{}, fmt.Errorf("local sandbox: exec in %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	dir, rel, wsReal, err := confineDir(in.workspace, cmd.Dir)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	timeout := cmd.Timeout
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	c := exec.CommandContext(ctx, cmd.Args[0], cmd.Args[1:]...)
	c.Dir = dir
	home := in.home
	ceiling := filepath.Dir(wsReal)
	if p.jail != nil {
		// A sandbox of its own with the agent's binds and the egress proxy: git
		// hooks and configuration of the workspace are the agent's.
		inside := path.Join(JailWorkspace, filepath.ToSlash(rel))
		cg, ok := p.sandboxCgroup(in)
		if !ok {
			return sandbox.ExecResult{}, fmt.Errorf("local sandbox: exec in %s: %w", sandboxID, sandbox.ErrNotFound)
		}
		argv := p.jail.launch(cg, execOOMScore, append([]string{p.jail.bwrap}, p.jail.args(jailBinds{workspace: in.workspace, home: in.home, chdir: inside, egress: in.egressSock()}, true, p.jail.withEgress(p.egress.setsid, cmd.Args)...)...))
		c = exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Dir = in.workspace
		home = JailHome
		ceiling = jailCeiling
	}
	// The session's variables first: the command's own and the sandbox's
	// (PATH, HOME, the egress proxy) win.
	pathVar := os.Getenv("PATH")
	if p.jail != nil && p.jail.cli != "" {
		pathVar = jailCLIDir + ":" + pathVar // `proliferate services …` from the gateway
	}
	c.Env = append(slices.Clone(in.env),
		"PATH="+pathVar,
		"HOME="+home,
		"LANG=C.UTF-8",
	)
	for _, k := range slices.Sorted(maps.Keys(cmd.Env)) {
		if envKeyRE.MatchString(k) && k != "GIT_CEILING_DIRECTORIES" {
			c.Env = append(c.Env, k+"="+cmd.Env[k])
		}
	}
	c.Env = append(c.Env, "GIT_CEILING_DIRECTORIES="+ceiling)
	if p.jail != nil {
		c.Env = append(c.Env, egressEnv()...) // git push and package managers go through the egress proxy
	}
	c.Stdin = bytes.NewReader(cmd.Stdin)
	stdout, stderr := &cappedBuffer{max: maxExecOutput}, &cappedBuffer{max: maxExecOutput}
	c.Stdout, c.Stderr = stdout, stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	if p.jail != nil {
		// The sandbox first (bwrap then reaps it and exits); bwrap's group
		// too if the sandbox was not started yet.
		c.Cancel = func() error {
			if killJail(c.Process.Pid) {
				return nil
			}
			return syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
	c.WaitDelay = 5 * time.Second

	err = c.Run()
	p.checkLimits(in) // a limit the command hit is reported before it returns
	res := sandbox.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if ctx.Err() != nil {
		return res, fmt.Errorf("local sandbox: exec %s: %w", cmd.Args[0], ctx.Err())
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	default:
		return res, fmt.Errorf("local sandbox: exec %s: %w", cmd.Args[0], err)
	}
	return res, nil
}

func (p *Provider) instanceByID(sandboxID string) *instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.live {
		if in.id == sandboxID {
			return in
		}
	}
	return nil
}

// confineDir resolves rel inside workspace, refusing absolute paths, ".."
// escapes, symlinks leading out of the workspace and non-directories. It
// returns the resolved host path, that path relative to the workspace and
// the resolved workspace.
func confineDir(workspace, rel string) (string, string, string, error) {
	if rel == "" {
		rel = "."
	}
	if filepath.IsAbs(rel) {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q must be relative to the workspace", rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q escapes the workspace", rel)
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return "", "", "", fmt.Errorf("local sandbox: open workspace: %w", err)
	}
	defer root.Close()
	st, err := root.Stat(clean) // follows symlinks only within the root
	if err != nil {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q: %w", rel, err)
	}
	if !st.IsDir() {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q is not a directory", rel)
	}
	// Belt and braces: the resolved path must lie in the resolved workspace.
	wsReal, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return "", "", "", fmt.Errorf("local sandbox: resolve workspace: %w", err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(wsReal, clean))
	if err != nil {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q: %w", rel, err)
	}
	if real != wsReal && !strings.HasPrefix(real, wsReal+string(filepath.Separator)) {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q escapes the workspace", rel)
	}
	inside, err := filepath.Rel(wsReal, real)
	if err != nil {
		return "", "", "", fmt.Errorf("local sandbox: exec dir %q: %w", rel, err)
	}
	return real, inside, wsReal, nil
}

// cappedBuffer keeps the first max bytes written and discards the rest.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }
