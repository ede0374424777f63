package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Session variables and env files in an E2B sandbox (the local provider's
// envfiles.go describes the contract). The agent gets Spec.EnvVars in its
// process environment; terminals (bash -l, whose ~/.bashrc is sourced)
// get them from ~/.proliferate/session.sh, rewritten at every boot; the
// values people submit during the session (WriteEnv) go to
// ~/.proliferate/env.sh and env.json, which the agent's shell commands
// source through BASH_ENV. Env files are written into the workspace,
// added to the local git exclude of their repository, and the files of
// the previous boot (listed in ~/.proliferate/envfiles.json) are removed
// first, so a bundle or secret deleted since is gone. A paused E2B sandbox
// keeps its disk (its snapshot is the machine), so unlike the local
// provider the files are in the snapshot until the next boot rewrites
// them.

const (
	sessionEnvFile  = stateDir + "/session.sh"
	runtimeEnvFile  = Home + "/" + sandbox.RuntimeEnvFile
	runtimeEnvJSON  = stateDir + "/env.json"
	envFilesList    = stateDir + "/envfiles.json"
	bashrcSourcing  = `for f in "$HOME/.proliferate/session.sh" "$HOME/` + sandbox.RuntimeEnvFile + `"; do [ -f "$f" ] && . "$f"; done # proliferate`
	excludeEnvFiles = `set -e
for p in "$@"; do
  full="$WS/$p"; d=$(dirname "$full")
  while [ "$d" != "$WS" ] && [ ! -d "$d/.git" ]; do d=$(dirname "$d"); done
  [ -d "$d/.git" ] || continue
  rel="/${full#"$d"/}"
  mkdir -p "$d/.git/info"; touch "$d/.git/info/exclude"
  grep -qxF "$rel" "$d/.git/info/exclude" || echo "$rel" >> "$d/.git/info/exclude"
done`
)

// writeSessionEnv writes the boot's env files and the terminals' session
// variables.
func (p *Provider) writeSessionEnv(ctx context.Context, e *Envd, spec sandbox.Spec) error {
	for _, f := range spec.EnvFiles {
		if err := sandbox.CheckEnvFilePath(f.Path); err != nil {
			return fmt.Errorf("e2b: %w", err)
		}
	}
	var previous []string
	if data, err := e.ReadFile(ctx, envFilesList); err == nil {
		_ = json.Unmarshal(data, &previous)
	}
	var stale []string
	for _, f := range previous {
		if sandbox.CheckEnvFilePath(f) == nil {
			stale = append(stale, path.Join(Workspace, f))
		}
	}
	if len(stale) > 0 {
		if err := run(ctx, e, "remove the previous env files", `rm -f -- "$@"`+"\n", nil, stale...); err != nil {
			return err
		}
	}
	written := []string{}
	for _, f := range spec.EnvFiles {
		if err := e.WriteFile(ctx, path.Join(Workspace, f.Path), f.Render()); err != nil {
			return fmt.Errorf("e2b: write env file %s: %w", f.Path, err)
		}
		written = append(written, f.Path)
	}
	list, _ := json.Marshal(written)
	if err := e.WriteFile(ctx, envFilesList, list); err != nil {
		return fmt.Errorf("e2b: record env files: %w", err)
	}
	// A login shell's /etc/profile may reset PATH: the template's bin dir
	// (the CLI, git's credential helper) goes first again.
	bin := path.Dir(p.opts.CLIBin)
	session := append(sandbox.ShellExports(spec.EnvVars),
		`case ":$PATH:" in *":`+bin+`:"*) ;; *) export PATH="`+bin+`:$PATH";; esac`+"\n"...)
	if err := e.WriteFile(ctx, sessionEnvFile, session); err != nil {
		return fmt.Errorf("e2b: session variables: %w", err)
	}
	script := `set -e
chmod 600 "$SESSION_ENV"
touch "$HOME/.bashrc"; grep -qxF "$LINE" "$HOME/.bashrc" || echo "$LINE" >> "$HOME/.bashrc"
# A login shell (terminals) reads ~/.bashrc through ~/.profile, as
# /etc/skel's does; a home without a login profile gets one.
[ -e "$HOME/.bash_profile" ] || [ -e "$HOME/.bash_login" ] || [ -e "$HOME/.profile" ] ||
  printf '%s\n' '[ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"' > "$HOME/.profile"
cd "$WS"; for p in "$@"; do chmod 600 "$p"; done
` + excludeEnvFiles
	return run(ctx, e, "prepare the session variables", script,
		map[string]string{"HOME": Home, "WS": Workspace, "SESSION_ENV": sessionEnvFile, "LINE": bashrcSourcing}, written...)
}

var _ sandbox.EnvWriter = (*Provider)(nil)

// WriteEnv implements sandbox.EnvWriter.
func (p *Provider) WriteEnv(ctx context.Context, sessionID, sandboxID string, vars map[string]string, file *sandbox.EnvFile) error {
	e, err := p.liveEnvd(ctx, sandboxID)
	if err != nil {
		return fmt.Errorf("e2b: write env in %s: %w", sandboxID, err)
	}
	all := map[string]string{}
	if data, err := e.ReadFile(ctx, runtimeEnvJSON); err == nil {
		_ = json.Unmarshal(data, &all)
	}
	maps.Copy(all, vars)
	data, _ := json.MarshalIndent(all, "", "  ")
	if err := e.WriteFile(ctx, runtimeEnvJSON, data); err != nil {
		return fmt.Errorf("e2b: write env: %w", err)
	}
	if err := e.WriteFile(ctx, runtimeEnvFile, sandbox.ShellExports(all)); err != nil {
		return fmt.Errorf("e2b: write env: %w", err)
	}
	var files []string
	if file != nil {
		if err := sandbox.CheckEnvFilePath(file.Path); err != nil {
			return fmt.Errorf("e2b: %w", err)
		}
		if err := e.WriteFile(ctx, path.Join(Workspace, file.Path), file.Render()); err != nil {
			return fmt.Errorf("e2b: write env file %s: %w", file.Path, err)
		}
		var listed []string
		if data, err := e.ReadFile(ctx, envFilesList); err == nil {
			_ = json.Unmarshal(data, &listed)
		}
		if !slices.Contains(listed, file.Path) {
			listed = append(listed, file.Path)
		}
		list, _ := json.Marshal(listed)
		if err := e.WriteFile(ctx, envFilesList, list); err != nil {
			return fmt.Errorf("e2b: record env files: %w", err)
		}
		files = append(files, file.Path)
	}
	script := "set -e\nchmod 600 \"$ENV_SH\" \"$ENV_JSON\"\ncd \"$WS\"; for p in \"$@\"; do chmod 600 \"$p\"; done\n" + excludeEnvFiles
	return run(ctx, e, "protect the submitted variables", script,
		map[string]string{"ENV_SH": runtimeEnvFile, "ENV_JSON": runtimeEnvJSON, "WS": Workspace}, files...)
}
