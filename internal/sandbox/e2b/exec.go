package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// DefaultExecTimeout bounds an Exec command without its own Timeout.
const DefaultExecTimeout = 2 * time.Minute

const maxExecOutput = 8 << 20

// Exec implements sandbox.Executor through envd: cmd.Dir is resolved in
// the sandbox (realpath) and must lie in the workspace (absolute paths,
// ".." and symlinks leading out are refused); the command runs with the
// sandbox user's environment plus cmd.Env; on timeout it is killed.
func (p *Provider) Exec(ctx context.Context, sandboxID string, cmd sandbox.ExecCommand) (sandbox.ExecResult, error) {
	if len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return sandbox.ExecResult{}, errors.New("e2b: exec: empty command")
	}
	dir := cmd.Dir
	if dir == "" {
		dir = "."
	}
	clean := path.Clean(dir)
	if path.IsAbs(dir) || clean == ".." || strings.HasPrefix(clean, "../") {
		return sandbox.ExecResult{}, fmt.Errorf("e2b: exec dir %q must stay inside the workspace", cmd.Dir)
	}
	e, err := p.liveEnvd(ctx, sandboxID)
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("e2b: exec in %s: %w", sandboxID, err)
	}
	timeout := cmd.Timeout
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Resolve the directory inside: symlinks are the sandbox's.
	exit, out, _, err := e.Run(ctx, ProcessConfig{Cmd: "realpath", Args: []string{"-e", "--", path.Join(Workspace, clean)}, Cwd: Home})
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("e2b: exec dir %q: %w", cmd.Dir, err)
	}
	real := strings.TrimSpace(string(out))
	if exit != 0 || (real != Workspace && !strings.HasPrefix(real, Workspace+"/")) {
		return sandbox.ExecResult{}, fmt.Errorf("e2b: exec dir %q is missing or leaves the workspace", cmd.Dir)
	}
	// The session's variables first: the sandbox's (HOME, PATH with the
	// CLI for `proliferate services …`) and the command's win.
	p.mu.Lock()
	env := maps.Clone(p.envs[sandboxID])
	p.mu.Unlock()
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, map[string]string{"HOME": Home, "LANG": "C.UTF-8", "PATH": sandboxPath, "GIT_CEILING_DIRECTORIES": Home})
	for _, k := range slices.Sorted(maps.Keys(cmd.Env)) {
		if envKeyRE.MatchString(k) && k != "GIT_CEILING_DIRECTORIES" {
			env[k] = cmd.Env[k]
		}
	}
	// The directory must be one: cwd of a file fails the start.
	yes := true
	s, err := e.Start(ctx, StartRequest{Process: ProcessConfig{Cmd: cmd.Args[0], Args: cmd.Args[1:], Envs: env, Cwd: real}, Stdin: &yes})
	if err != nil {
		if ctx.Err() != nil {
			return sandbox.ExecResult{}, fmt.Errorf("e2b: exec %s: %w", cmd.Args[0], ctx.Err())
		}
		return sandbox.ExecResult{}, fmt.Errorf("e2b: exec %s: %w", cmd.Args[0], err)
	}
	defer s.Close()
	if len(cmd.Stdin) > 0 {
		if err := e.SendStdin(ctx, s.PID, cmd.Stdin); err != nil {
			_ = e.Signal(context.WithoutCancel(ctx), s.PID, SIGKILL)
			return sandbox.ExecResult{}, fmt.Errorf("e2b: exec %s: stdin: %w", cmd.Args[0], err)
		}
	}
	if err := e.CloseStdin(ctx, s.PID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		_ = e.Signal(context.WithoutCancel(ctx), s.PID, SIGKILL)
		return sandbox.ExecResult{}, fmt.Errorf("e2b: exec %s: close stdin: %w", cmd.Args[0], err)
	}
	code, stdout, stderr, err := s.Collect(ctx, e, maxExecOutput)
	res := sandbox.ExecResult{ExitCode: code, Stdout: bytes.Clone(stdout), Stderr: bytes.Clone(stderr)}
	if err != nil {
		return res, fmt.Errorf("e2b: exec %s: %w", cmd.Args[0], err)
	}
	return res, nil
}
