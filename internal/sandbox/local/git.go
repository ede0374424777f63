package local

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// repoPath returns the workspace-relative directory of a repo.
func repoPath(r sandbox.Repo) (string, error) {
	p := r.WorkspacePath
	if p == "" {
		u := strings.TrimRight(r.CloneURL, "/")
		p = strings.TrimSuffix(path.Base(u), ".git")
	}
	clean := filepath.Clean(p)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") || clean == "" {
		return "", fmt.Errorf("local sandbox: workspace path %q escapes the workspace", p)
	}
	if first := strings.Split(clean, "/")[0]; first == ".opencode" || first == ".proliferate" {
		return "", fmt.Errorf("local sandbox: workspace path %q is reserved", p)
	}
	return clean, nil
}

// cloneRepos clones the repos into a temporary directory of dir and renames
// it to workspace, so a failure leaves no half workspace. No repos gives an
// empty workspace.
func cloneRepos(ctx context.Context, dir, workspace string, repos []sandbox.Repo, log *slog.Logger) error {
	tmp, err := os.MkdirTemp(dir, "clone-")
	if err != nil {
		return fmt.Errorf("local sandbox: clone: %w", err)
	}
	defer os.RemoveAll(tmp)
	target := filepath.Join(tmp, "workspace")
	seen := map[string]bool{}
	for _, r := range repos {
		rel, err := repoPath(r)
		if err != nil {
			return err
		}
		if rel == "." && len(repos) > 1 {
			return fmt.Errorf("local sandbox: workspace path \".\" needs a single repository, got %d", len(repos))
		}
		if seen[rel] {
			return fmt.Errorf("local sandbox: two repositories share the workspace path %q", rel)
		}
		seen[rel] = true
		dest := filepath.Join(target, rel)
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return fmt.Errorf("local sandbox: clone: %w", err)
		}
		if err := gitClone(ctx, tmp, r, dest); err != nil {
			return err
		}
		log.Info("repository cloned", "repo", redactURL(r.CloneURL), "path", rel, "branch", r.Branch)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("local sandbox: clone: %w", err)
	}
	if err := os.Rename(target, workspace); err != nil {
		return fmt.Errorf("local sandbox: move workspace into place: %w", err)
	}
	return nil
}

// gitClone runs `git clone` with an isolated git configuration; the token,
// if any, is an http.extraHeader passed through GIT_CONFIG_* variables.
func gitClone(ctx context.Context, scratch string, r sandbox.Repo, dest string) error {
	args := []string{"clone", "--quiet"}
	if r.Branch != "" {
		args = append(args, "--branch", r.Branch)
	}
	args = append(args, "--", r.CloneURL, dest)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + scratch,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
	}
	if r.Token != "" {
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + r.Token))
		cmd.Env = append(cmd.Env,
			"GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=http.extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+basic,
		)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if r.Token != "" {
			msg = strings.ReplaceAll(msg, r.Token, "***")
		}
		return fmt.Errorf("local sandbox: git clone %s: %w: %s", redactURL(r.CloneURL), err, msg)
	}
	return nil
}

// redactURL drops credentials from a URL for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// excludePlatformFiles keeps the capability files out of `git status` when
// a repository is checked out at the workspace root.
func excludePlatformFiles(workspace string) error {
	gitDir := filepath.Join(workspace, ".git")
	if st, err := os.Stat(gitDir); err != nil || !st.IsDir() {
		return nil
	}
	path := filepath.Join(gitDir, "info", "exclude")
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("local sandbox: read git exclude: %w", err)
	}
	var add []string
	for _, p := range []string{"/.opencode/", "/.proliferate/"} {
		if !strings.Contains(string(data), p+"\n") {
			add = append(add, p)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("local sandbox: git exclude: %w", err)
	}
	if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	data = append(data, []byte("# Proliferate platform files\n"+strings.Join(add, "\n")+"\n")...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("local sandbox: write git exclude: %w", err)
	}
	return nil
}
