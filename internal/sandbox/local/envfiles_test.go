package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
)

// exec1 runs a shell script in the sandbox (Exec) and returns its stdout.
func exec1(t *testing.T, p *local.Provider, sb sandbox.Sandbox, script string) string {
	t.Helper()
	res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q: %v exit %d: %s", script, err, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// openTerminal opens a terminal with or without the caller's variables
// (the terminal-credential change adds them to OpenTerminal).
func openTerminal(t *testing.T, p *local.Provider, sessionID, sandboxID string) (sandbox.Terminal, error) {
	switch o := any(p).(type) {
	case interface {
		OpenTerminal(context.Context, string, string, uint16, uint16, map[string]string) (sandbox.Terminal, error)
	}:
		return o.OpenTerminal(t.Context(), sessionID, sandboxID, 120, 40, nil)
	case interface {
		OpenTerminal(context.Context, string, string, uint16, uint16) (sandbox.Terminal, error)
	}:
		return o.OpenTerminal(t.Context(), sessionID, sandboxID, 120, 40)
	}
	t.Fatal("no OpenTerminal")
	return nil, nil
}

// snapshotEntries lists a snapshot's entry names.
func snapshotEntries(t *testing.T, path string) []string {
	t.Helper()
	var names []string
	for _, e := range readSnapshot(t, path) {
		names = append(names, e.hdr.Name)
	}
	return names
}

// The session's variables reach the agent's bash, terminals and Exec of
// the isolated sandbox; env files land in the workspace (0600, git-ignored,
// not in snapshots); values submitted later (WriteEnv) reach the agent's
// next shell commands and terminals; a resume from the snapshot with
// rotated values sees the new ones and no longer the files of bundles
// that are gone; no value is logged.
func TestSessionEnvironment(t *testing.T) {
	e := setup(t)
	p, _, logs := newProvider(t, e)
	repo := sourceRepo(t, "# app\n")
	const v1, v2, submitted = "s3cr3t-v1-6d1f", "s3cr3t-v2-90ab", "subm1tted-77e2"
	spec := sandbox.Spec{
		SessionID: "sess-env-" + strings.ToLower(t.Name()[:4]), OrgID: "org-1", SessionType: "coding", ClientType: "web",
		Repos: []sandbox.Repo{{CloneURL: repo, WorkspacePath: "."}}, LLM: e.llm,
		EnvVars: map[string]string{"DB_PASSWORD": v1, "PATH": "/nowhere", "PROLIFERATE_SESSION_ID": "forged"},
		EnvFiles: []sandbox.EnvFile{
			{Path: ".env.local", Vars: []sandbox.EnvVar{{Key: "DB_PASSWORD", Value: v1}, {Key: "GREETING", Value: "hello world"}}},
			{Path: "config/app.env", Vars: []sandbox.EnvVar{{Key: "API_TOKEN", Value: "tok-1"}}},
		},
	}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}

	out := exec1(t, p, sb, `printf 'exec=%s path=%s\n' "$DB_PASSWORD" "$PATH"; cat .env.local config/app.env; stat -c %a .env.local; git status --porcelain`)
	if !strings.Contains(out, "exec="+v1+" ") || strings.Contains(out, "path=/nowhere") ||
		!strings.Contains(out, "DB_PASSWORD="+v1+"\n") || !strings.Contains(out, `GREETING="hello world"`) ||
		!strings.Contains(out, "API_TOKEN=tok-1\n") || !strings.Contains(out, "600\n") {
		t.Fatalf("exec output %q", out)
	}
	if strings.Contains(out, "??") || strings.Contains(out, " M ") {
		t.Fatalf("env files show in git status: %q", out)
	}

	got := sandboxtest.AgentBash(t, sb, `printf 'agent=%s id=%s\n' "$DB_PASSWORD" "$PROLIFERATE_SESSION_ID"`)
	if !strings.Contains(got, "agent="+v1) || strings.Contains(got, "forged") {
		t.Fatalf("agent bash %q", got)
	}

	term, err := openTerminal(t, p, spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	tr := sandboxtest.ReadTerminal(term)
	typeLine(t, term, `printf 'term=%s\n' "$DB_PASSWORD"`)
	tr.WaitFor(t, "term="+v1)
	_ = term.Close()

	// A value submitted during the session: the agent's next shell command
	// and a new terminal have it, as shell exports and JSON in the home.
	if err := p.WriteEnv(t.Context(), spec.SessionID, sb.ID, map[string]string{"STRIPE_KEY": submitted},
		&sandbox.EnvFile{Path: "web/.env", Vars: []sandbox.EnvVar{{Key: "STRIPE_KEY", Value: submitted}}}); err != nil {
		t.Fatal(err)
	}
	if got := sandboxtest.AgentBash(t, sb, `printf 'later=%s\n' "$STRIPE_KEY"`); !strings.Contains(got, "later="+submitted) {
		t.Fatalf("agent bash after WriteEnv %q", got)
	}
	term, err = openTerminal(t, p, spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	tr = sandboxtest.ReadTerminal(term)
	typeLine(t, term, `printf 'term2=%s\n' "$STRIPE_KEY"`)
	tr.WaitFor(t, "term2="+submitted)
	_ = term.Close()
	if out := exec1(t, p, sb, `cat web/.env; git status --porcelain`); out != "STRIPE_KEY="+submitted+"\n" {
		t.Fatalf("submitted env file %q (must be git-ignored)", out)
	}
	if err := p.WriteEnv(t.Context(), spec.SessionID, sb.ID, nil, &sandbox.EnvFile{Path: "../escape.env"}); !errors.Is(err, sandbox.ErrEnvFilePath) {
		t.Fatalf("escaping env file: %v", err)
	}

	// Snapshots leave the env files out; a resume with rotated values sees
	// them, and a bundle gone since leaves no file.
	info, err := p.Pause(t.Context(), spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range snapshotEntries(t, p.SnapshotPath(info.ID)) {
		if strings.HasSuffix(n, ".env.local") || strings.HasSuffix(n, "app.env") || strings.HasSuffix(n, "web/.env") {
			t.Fatalf("snapshot holds env file %s", n)
		}
	}
	spec.SnapshotID = info.ID
	spec.EnvVars = map[string]string{"DB_PASSWORD": v2}
	spec.EnvFiles = spec.EnvFiles[:1]
	spec.EnvFiles[0].Vars = []sandbox.EnvVar{{Key: "DB_PASSWORD", Value: v2}}
	sb, err = p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	out = exec1(t, p, sb, `printf 'exec=%s\n' "$DB_PASSWORD"; cat .env.local; ls config web 2>&1; git status --porcelain`)
	if !strings.Contains(out, "exec="+v2+"\n") || !strings.Contains(out, "DB_PASSWORD="+v2+"\n") ||
		strings.Contains(out, v1) || strings.Contains(out, "app.env") || strings.Contains(out, "STRIPE") || strings.Contains(out, "??") {
		t.Fatalf("after resume %q", out)
	}

	if err := p.Terminate(t.Context(), spec.SessionID, ""); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{v1, v2, submitted, "tok-1"} {
		if strings.Contains(logs.String(), v) {
			t.Fatalf("a value is in the provider's logs")
		}
	}
}

// An env file path that leaves the workspace (a symlink of the repository,
// or ..) is refused and nothing is written outside.
func TestEnvFileEscapesAreRefused(t *testing.T) {
	e := setup(t)
	p, _, _ := newProvider(t, e)
	outside := t.TempDir()
	src := strings.TrimPrefix(sourceRepo(t, "# app\n"), "file://")
	if err := os.Symlink(outside, filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	git(t, src, "add", "link")
	git(t, src, "commit", "--quiet", "-m", "link")
	for i, path := range []string{"link/x.env", "../x.env", "/etc/x.env", ".git/config"} {
		spec := sandbox.Spec{SessionID: "sess-esc-" + string(rune('a'+i)), OrgID: "org-1", SessionType: "coding", ClientType: "web",
			Repos: []sandbox.Repo{{CloneURL: "file://" + src, WorkspacePath: "."}}, LLM: e.llm,
			EnvFiles: []sandbox.EnvFile{{Path: path, Vars: []sandbox.EnvVar{{Key: "K", Value: "v"}}}}}
		if _, err := p.EnsureSandbox(t.Context(), spec); err == nil {
			t.Fatalf("env file %q accepted", path)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("written outside the workspace: %v", entries)
	}
}
