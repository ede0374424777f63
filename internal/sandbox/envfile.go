package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/proliferate/proliferate/internal/dotenv"
)

// EnvVar is one variable of an env file. Its value is never logged.
type EnvVar struct {
	Key   string
	Value string
}

// EnvFile is a dotenv file a provider writes into the workspace at boot
// (secret bundles with a target path): Path
// is relative to the workspace root and must stay inside it
// (CheckEnvFilePath); the provider adds it to the local git exclude of the
// repository holding it, so it is never committed, and leaves it out of
// snapshots (every boot writes the current values again, so a rotated or
// deleted secret does not survive in a restored workspace).
type EnvFile struct {
	Path string
	Vars []EnvVar
}

// Render is the file's content in .env syntax (dotenv.Format).
func (f EnvFile) Render() []byte {
	entries := make([]dotenv.Entry, 0, len(f.Vars))
	for _, v := range f.Vars {
		entries = append(entries, dotenv.Entry{Key: v.Key, Value: v.Value})
	}
	return []byte(dotenv.Format(entries))
}

// ErrEnvFilePath is an env file path that is not a relative path inside
// the workspace.
var ErrEnvFilePath = errors.New("sandbox: env file path must be a relative path inside the workspace")

// CheckEnvFilePath checks an env file path: relative, "/"-separated, no
// "." or ".." segment, no control characters, not inside .git. Providers
// check again when writing (symlinks may lead out of the workspace).
func CheckEnvFilePath(p string) error {
	if p == "" || len(p) > 255 || strings.HasPrefix(p, "/") || strings.ContainsRune(p, '\\') || strings.HasSuffix(p, "/") {
		return fmt.Errorf("%w: %q", ErrEnvFilePath, p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: control character", ErrEnvFilePath)
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." || seg == ".git" {
			return fmt.Errorf("%w: %q", ErrEnvFilePath, p)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("%w: %q", ErrEnvFilePath, p)
	}
	return nil
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are variables the sandbox's own plumbing sets; a session
// variable of that name is not passed (it would break the sandbox, or
// route around its egress proxy).
var reservedEnv = []string{"PATH", "HOME", "USER", "SHELL", "TMPDIR", "BASH_ENV", "ENV",
	"GIT_CEILING_DIRECTORIES", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
	"http_proxy", "https_proxy", "no_proxy", "all_proxy", "LD_PRELOAD", "LD_LIBRARY_PATH"}

// SessionEnvAllowed reports whether a session variable (a secret, a value a
// person submitted) may be passed into a sandbox under key: a valid name,
// not one of the platform's (PROLIFERATE_*, OPENCODE_*) nor one the
// sandbox's plumbing sets (PATH, HOME, proxies…).
func SessionEnvAllowed(key string) bool {
	if !envKeyRE.MatchString(key) || slices.Contains(reservedEnv, key) {
		return false
	}
	up := strings.ToUpper(key)
	return !strings.HasPrefix(up, "PROLIFERATE_") && !strings.HasPrefix(up, "OPENCODE_")
}

// ShellExports renders vars as POSIX shell `export KEY='value'` lines (a
// file bash sources), skipping keys SessionEnvAllowed refuses.
func ShellExports(vars map[string]string) []byte {
	var b strings.Builder
	b.WriteString("# Written by Proliferate: values submitted for this session. Do not print this file.\n")
	for _, k := range slices.Sorted(mapKeys(vars)) {
		if !SessionEnvAllowed(k) {
			continue
		}
		b.WriteString("export " + k + "='" + strings.ReplaceAll(vars[k], "'", `'\''`) + "'\n")
	}
	return []byte(b.String())
}

func mapKeys(m map[string]string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// EnvWriter is implemented by providers that can add variables to a
// running sandbox (the answer to the agent's request_env_variables): the
// values are merged into the sandbox's runtime env file, which the
// agent's shell commands and the sandbox's terminals source
// (RuntimeEnvFile), and, when file is set, also written as a dotenv file
// in the workspace (git-excluded like the boot env files). ErrNotFound
// when the sandbox is not live.
type EnvWriter interface {
	WriteEnv(ctx context.Context, sessionID, sandboxID string, vars map[string]string, file *EnvFile) error
}

// RuntimeEnvFile is where, relative to the sandbox user's home, the values
// a person submitted during the session live (shell exports, mode 0600).
// The agent's non-interactive bash sources it (BASH_ENV), terminals
// through ~/.bashrc. It is outside the workspace, so never committed nor in
// a workspace snapshot.
const RuntimeEnvFile = ".proliferate/env.sh"
