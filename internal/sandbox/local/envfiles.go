package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Session variables and env files.
//
// Spec.EnvVars are the environment of the agent, of every terminal and of
// every Exec command of the sandbox (instance.env), in this sandbox only.
// Spec.EnvFiles are written into the workspace before the agent starts,
// through an os.Root of the workspace (a path or symlink leading out is
// refused), mode 0600, each added to the local git exclude of the
// repository holding it; the list of files written is kept in
// state/envfiles.json (outside the workspace) so the next boot removes the
// files of bundles that no longer apply before writing the current ones,
// and snapshots leave them out (a restored workspace never carries an old
// value: the boot writes the current one).
//
// Values a person submits during the session (WriteEnv) go to the isolated
// home: ~/.proliferate/env.json (for jq) and ~/.proliferate/env.sh
// (exports), which the agent's non-interactive bash sources through
// BASH_ENV and terminals through ~/.bashrc. The home is never in a
// snapshot.

// envFilesState is the list of env files the last boot wrote, in the
// sandbox's state dir.
const envFilesState = "envfiles.json"

// runtimeEnvJSON is the JSON form of sandbox.RuntimeEnvFile, relative to
// the home.
const runtimeEnvJSON = ".proliferate/env.json"

// bashrcLine makes interactive shells (terminals) source the runtime env.
const bashrcLine = `[ -f "$HOME/` + sandbox.RuntimeEnvFile + `" ] && . "$HOME/` + sandbox.RuntimeEnvFile + `" # proliferate`

// sessionEnv is spec.EnvVars as KEY=VALUE entries (sorted, refused keys
// dropped).
func sessionEnv(vars map[string]string) []string {
	var env []string
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if sandbox.SessionEnvAllowed(k) {
			env = append(env, k+"="+vars[k])
		}
	}
	return env
}

// writeEnvFiles removes the env files the previous boot of this sandbox
// wrote, writes files and records them in stateDir.
func writeEnvFiles(workspace, stateDir string, files []sandbox.EnvFile) ([]string, error) {
	for _, f := range files {
		if err := sandbox.CheckEnvFilePath(f.Path); err != nil {
			return nil, fmt.Errorf("local sandbox: %w", err)
		}
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: open workspace: %w", err)
	}
	defer root.Close()
	statePath := filepath.Join(stateDir, envFilesState)
	var previous []string
	if data, err := os.ReadFile(statePath); err == nil {
		_ = json.Unmarshal(data, &previous)
	}
	for _, p := range previous {
		if sandbox.CheckEnvFilePath(p) != nil {
			continue
		}
		if st, err := root.Lstat(p); err == nil && st.Mode().IsRegular() {
			_ = root.Remove(p)
		}
	}
	written := []string{}
	for _, f := range files {
		if err := writeWorkspaceFile(root, f); err != nil {
			return nil, err
		}
		written = append(written, f.Path)
	}
	data, _ := json.Marshal(written)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox: state dir: %w", err)
	}
	if err := os.WriteFile(statePath, data, 0o600); err != nil {
		return nil, fmt.Errorf("local sandbox: record env files: %w", err)
	}
	return written, nil
}

// writeWorkspaceFile writes one env file through root (mode 0600) and
// excludes it from git.
func writeWorkspaceFile(root *os.Root, f sandbox.EnvFile) error {
	if err := sandbox.CheckEnvFilePath(f.Path); err != nil {
		return fmt.Errorf("local sandbox: %w", err)
	}
	if dir := path.Dir(f.Path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("local sandbox: env file %s: %w", f.Path, err)
		}
	}
	if st, err := root.Lstat(f.Path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("local sandbox: env file %s: %w (not a regular file)", f.Path, sandbox.ErrEnvFilePath)
	}
	if err := root.WriteFile(f.Path, f.Render(), 0o600); err != nil {
		return fmt.Errorf("local sandbox: env file %s: %w", f.Path, err)
	}
	if err := root.Chmod(f.Path, 0o600); err != nil {
		return fmt.Errorf("local sandbox: env file %s: %w", f.Path, err)
	}
	return gitExcludeIn(root, f.Path)
}

// gitExcludeIn adds rel (a file path inside root) to the local exclude of
// the innermost repository holding it (a directory with a .git directory,
// up to the workspace root); a file in no repository needs none.
func gitExcludeIn(root *os.Root, rel string) error {
	for dir := path.Dir(rel); ; dir = path.Dir(dir) {
		gitDir := path.Join(dir, ".git")
		if st, err := root.Lstat(gitDir); err == nil && st.IsDir() {
			inRepo := strings.TrimPrefix(rel, dir+"/")
			if dir == "." {
				inRepo = rel
			}
			return appendExclude(root, path.Join(gitDir, "info", "exclude"), "/"+inRepo)
		}
		if dir == "." {
			return nil
		}
	}
}

// appendExclude adds line to the exclude file at name (inside root) unless
// it is there.
func appendExclude(root *os.Root, name, line string) error {
	data, err := root.ReadFile(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local sandbox: read git exclude: %w", err)
	}
	if slices.Contains(strings.Split(string(data), "\n"), line) {
		return nil
	}
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return fmt.Errorf("local sandbox: git exclude: %w", err)
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	data = append(data, []byte(line+"\n")...)
	if err := root.WriteFile(name, data, 0o644); err != nil {
		return fmt.Errorf("local sandbox: write git exclude: %w", err)
	}
	return nil
}

// ensureBashrc makes the home's ~/.bashrc source the runtime env file.
func ensureBashrc(home string) error {
	p := filepath.Join(home, ".bashrc")
	data, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local sandbox: read .bashrc: %w", err)
	}
	if bytes.Contains(data, []byte(bashrcLine)) {
		return nil
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("local sandbox: home: %w", err)
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	return os.WriteFile(p, append(data, []byte(bashrcLine+"\n")...), 0o644)
}

// writeRuntimeEnv merges vars into the home's runtime env files.
func writeRuntimeEnv(home string, vars map[string]string) error {
	dir := filepath.Join(home, filepath.Dir(sandbox.RuntimeEnvFile))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local sandbox: runtime env: %w", err)
	}
	all := map[string]string{}
	if data, err := os.ReadFile(filepath.Join(home, runtimeEnvJSON)); err == nil {
		_ = json.Unmarshal(data, &all)
	}
	maps.Copy(all, vars)
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(home, runtimeEnvJSON), data); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(home, sandbox.RuntimeEnvFile), sandbox.ShellExports(all))
}

// writeFileAtomic writes data (mode 0600) through a temporary file renamed
// into place, so a shell sourcing it never reads half a file.
func writeFileAtomic(p string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".env-*")
	if err != nil {
		return fmt.Errorf("local sandbox: runtime env: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("local sandbox: runtime env: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("local sandbox: runtime env: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("local sandbox: runtime env: %w", err)
	}
	return nil
}

var _ sandbox.EnvWriter = (*Provider)(nil)

// WriteEnv implements sandbox.EnvWriter: vars are merged into the runtime
// env files of the sandbox's home; file, when set, is written into the
// workspace like a boot env file (and removed by the next boot, like
// them: persisted values come back through the session's secrets).
func (p *Provider) WriteEnv(ctx context.Context, sessionID, sandboxID string, vars map[string]string, file *sandbox.EnvFile) error {
	unlock, err := p.lock(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("local sandbox: write env in %s: %w", sessionID, err)
	}
	defer unlock()
	in := p.instanceFor(sessionID, sandboxID)
	if in == nil || !in.alive() {
		return fmt.Errorf("local sandbox: write env in %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	if file != nil {
		root, err := os.OpenRoot(in.workspace)
		if err != nil {
			return fmt.Errorf("local sandbox: open workspace: %w", err)
		}
		err = writeWorkspaceFile(root, *file)
		root.Close()
		if err != nil {
			return err
		}
		in.mu.Lock()
		if !slices.Contains(in.envFiles, file.Path) {
			in.envFiles = append(in.envFiles, file.Path)
		}
		list := slices.Clone(in.envFiles)
		in.mu.Unlock()
		data, _ := json.Marshal(list)
		if err := os.WriteFile(filepath.Join(p.sandboxDir(sessionID), "state", envFilesState), data, 0o600); err != nil {
			return fmt.Errorf("local sandbox: record env files: %w", err)
		}
	}
	if err := writeRuntimeEnv(in.home, vars); err != nil {
		return err
	}
	p.log.Info("session variables written", "session_id", sessionID, "sandbox_id", in.id,
		"keys", slices.Sorted(maps.Keys(vars)), "file", file != nil)
	return nil
}

// envFileSet is the set of the sandbox's env files (left out of snapshots).
func (in *instance) envFileSet() map[string]bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	set := make(map[string]bool, len(in.envFiles))
	for _, f := range in.envFiles {
		set[f] = true
	}
	return set
}
