// Package gitopstest helps tests of git operations: a plain-directory
// sandbox.Executor (every sandbox's workspace is one directory on this
// machine) and the host's git for setting up remotes and clones.
package gitopstest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// DirExec runs sandbox commands in Root (the workspace of every sandbox) and
// records the environment of each command.
type DirExec struct {
	Root string

	mu   sync.Mutex
	envs []map[string]string
}

// Exec implements sandbox.Executor.
func (d *DirExec) Exec(ctx context.Context, _ string, c sandbox.ExecCommand) (sandbox.ExecResult, error) {
	d.mu.Lock()
	d.envs = append(d.envs, c.Env)
	d.mu.Unlock()
	cmd := exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
	cmd.Dir = filepath.Join(d.Root, c.Dir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + d.Root}
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := sandbox.ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	return res, err
}

// Envs returns the environments of the commands run so far.
func (d *DirExec) Envs() []map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]map[string]string(nil), d.envs...)
}

// Git runs the host's git in dir with a fixed identity and no system or
// user configuration, failing the test on error; it returns the trimmed
// output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=T",
		"GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
