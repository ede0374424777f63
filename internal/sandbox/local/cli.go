package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The platform's CLI (`proliferate actions …`) is put on the agent's PATH:
// the binary is linked as "proliferate" into a bin directory under the
// sandbox's state (outside the workspace, so never in a snapshot or a
// commit), and that directory is prepended to the agent's PATH. The CLI
// reads the gateway URL, session id and sandbox token the agent's
// environment already carries (capabilities.Env).

// cliName is the command name the agent runs.
const cliName = "proliferate"

// resolveCLI returns the absolute path of the CLI binary to link, or ""
// for none: opts.CLIPath when set (it must exist), else this process's own
// executable when it is the proliferate binary (in tests it is not).
func resolveCLI(path string) (string, error) {
	if path == "" {
		self, err := os.Executable()
		if err != nil || filepath.Base(self) != cliName {
			return "", nil
		}
		path = self
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("local sandbox: CLI path: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("local sandbox: CLI path: %w", err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("local sandbox: CLI path %s is not an executable file", abs)
	}
	return abs, nil
}

// linkCLI links the CLI into stateDir/bin and returns that directory, or
// "" when there is no CLI. The link is replaced at every start, so a new
// binary is picked up by the next sandbox.
func (p *Provider) linkCLI(stateDir string) (string, error) {
	if p.opts.CLIPath == "" {
		return "", nil
	}
	bin := filepath.Join(stateDir, "bin")
	if err := os.MkdirAll(bin, 0o700); err != nil {
		return "", fmt.Errorf("local sandbox: create %s: %w", bin, err)
	}
	link := filepath.Join(bin, cliName)
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("local sandbox: replace %s: %w", link, err)
	}
	if err := os.Symlink(p.opts.CLIPath, link); err != nil {
		return "", fmt.Errorf("local sandbox: link the CLI: %w", err)
	}
	return bin, nil
}

// withPath prepends dir to the PATH the agent inherits (the last PATH
// entry of an environment wins, so it is appended after agentEnv's).
func withPath(env []string, dir string) []string {
	if dir == "" {
		return env
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	parts := []string{dir}
	for _, p := range strings.Split(path, string(os.PathListSeparator)) {
		if p != "" && p != dir {
			parts = append(parts, p)
		}
	}
	return append(env, "PATH="+strings.Join(parts, string(os.PathListSeparator)))
}
