package hub_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Git freshness on resume with the real agent in its bubblewrap sandbox:
// the session's repository is served over git's smart HTTP protocol (git
// http-backend) on an "internet" address the sandbox reaches through its
// egress proxy. Each resume from the pause snapshot fetches inside the
// sandbox: a clean tree is fast-forwarded to what the remote gained while
// the session was paused; a dirty tree, then a diverged branch, is left as
// it was, and the agent reads why in front of its next prompt.
func TestGitFreshnessOnResumeWithTheRealAgent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})

	// The remote: acme/app.git with one commit on main.
	remote := newGitRemote(t)

	// The real agent (OpenCode against the scripted LLM, whose requests
	// are kept to read what the agent was told) in a bubblewrap sandbox
	// that may reach only the git host.
	sim := llmsim.New(llmsim.Options{APIKey: "sim-key"})
	var (
		mu      sync.Mutex
		prompts []string
	)
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if req, err := llmsim.ParseRequest(body); err == nil {
			mu.Lock()
			prompts = append(prompts, req.LatestPrompt())
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.Handler().ServeHTTP(w, r)
	})
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("prompts the model received:\n%s", strings.Join(prompts, "\n---\n"))
			mu.Unlock()
		}
	})
	d, prov, _ := realAgentOnRemote(t, e, remote, "", llm)
	d.GitFreshness = hub.GitFreshness{PullOnRestore: true}
	logs := &testenv.LogBuffer{}
	d.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "hub: git freshness") {
				t.Logf("measured: %s", l)
			}
		}
	})
	m := e.manager(t, d)
	id := e.session(t, sessionstest.Options{ModelID: "claude-sim", Title: "fresh code"})

	inSandbox := func(script string) string {
		t.Helper()
		s := e.get(t, id)
		res, err := prov.Exec(ctx, *s.SandboxID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}, Dir: "app", Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("in the sandbox %q: %v %s", script, err, res.Stderr)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	// resume: pause the session, let the remote move on, attach again
	// (a resume from the pause snapshot) and return the workspace's HEAD.
	resume := func() (remoteHead, head string, h *hub.Hub) {
		t.Helper()
		h0, _ := m.Get(id)
		if err := h0.Pause(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		if s := e.get(t, id); s.Status != sessions.StatusPaused || s.SnapshotID == nil {
			t.Fatalf("after pause: %+v", s)
		}
		remoteHead = remote.advance(t, "while paused")
		start := time.Now()
		h, _ = attach(t, m, id, e.principal())
		if err := h.EnsureRuntimeReady(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("measured: resume (restore, freshness pass, agent ready) in %s", time.Since(start))
		return remoteHead, inSandbox("git rev-parse HEAD"), h
	}
	// told sends a prompt and waits for the model to receive it with want
	// in front of it.
	told := func(h *hub.Hub, c int, want string) {
		t.Helper()
		if err := h.Prompt(ctx, e.principal(), "[[script:hello]] Say hello"); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 90*time.Second, "the model received the prompt after "+want, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range prompts[min(c, len(prompts)):] {
				if i := strings.Index(p, want); i >= 0 && strings.LastIndex(p, "Say hello") > i {
					return true
				}
			}
			return false
		})
		// The turn ends before the next pause.
		testenv.Eventually(t, 90*time.Second, "the agent's turn ending", func() bool { return h.Status().Agent == protocol.AgentIdle })
	}
	seen := func() int { mu.Lock(); defer mu.Unlock(); return len(prompts) }

	h, _ := attach(t, m, id, e.principal())
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}

	// 1. Clean: fast-forwarded to the remote's new head before any prompt.
	want, head, h := resume()
	if head != want {
		t.Fatalf("clean tree after resume at %s, want the remote's %s", head, want)
	}
	told(h, seen(), "`app`: fast-forwarded main")

	// 2. Dirty: left alone, and the agent is told.
	inSandbox("echo edited > tracked.txt && git add tracked.txt")
	before := inSandbox("git rev-parse HEAD")
	want, head, h = resume()
	if head != before || head == want {
		t.Fatalf("dirty tree moved: HEAD %s, was %s (remote %s)", head, before, want)
	}
	told(h, seen(), "`app`: has uncommitted changes, so it was NOT updated")

	// 3. Diverged: a local commit while the remote moved on; left alone.
	inSandbox("git -c user.name=A -c user.email=a@x.test commit -q -m local")
	mine := inSandbox("git rev-parse HEAD")
	_, head, h = resume()
	if head != mine {
		t.Fatalf("diverged branch moved: HEAD %s, was %s", head, mine)
	}
	told(h, seen(), "`app`: main has diverged from origin/main (1 local, 2 new upstream commits)")
}

// SANDBOX_GIT_PULL_CADENCE_SECONDS: a restore within the cadence of the
// last successful pass does not fetch; once it has passed, the next
// restore does. (Simulated agent; real git in a plain workspace.)
func TestGitFreshnessCadence(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})
	repo := newGitRemote(t)
	base := repo.root
	ws := filepath.Join(base, "ws")
	hostGit(t, base, "clone", "-q", repo.bare, filepath.Join(ws, "app"))

	var (
		clockMu sync.Mutex
		now     = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	d := e.deps(unique("gw-"))
	d.Provider = &execProvider{Provider: e.prov, DirExec: &gitopstest.DirExec{Root: ws}}
	d.Now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	d.Repos = hub.RepoResolverFunc(func(context.Context, sessions.Session) ([]sandbox.Repo, error) {
		return []sandbox.Repo{{CloneURL: "file://" + repo.bare, WorkspacePath: "app"}}, nil
	})
	d.GitFreshness = hub.GitFreshness{PullOnRestore: true, Cadence: time.Hour}
	m := e.manager(t, d)
	id := e.session(t, sessionstest.Options{})
	cycle := func() (remote, head string) {
		t.Helper()
		if h, ok := m.Get(id); ok {
			if err := h.Pause(ctx, "test"); err != nil {
				t.Fatal(err)
			}
		}
		remote = repo.advance(t, "upstream")
		h, _ := attach(t, m, id, e.principal())
		if err := h.EnsureRuntimeReady(ctx); err != nil {
			t.Fatal(err)
		}
		return remote, hostGit(t, filepath.Join(ws, "app"), "rev-parse", "HEAD")
	}
	h, _ := attach(t, m, id, e.principal())
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	if remote, head := cycle(); head != remote {
		t.Fatalf("first restore: HEAD %s, want %s", head, remote)
	}
	clockMu.Lock()
	now = now.Add(30 * time.Minute)
	clockMu.Unlock()
	remote, head := cycle()
	if head == remote {
		t.Fatal("a restore within the cadence fetched")
	}
	clockMu.Lock()
	now = now.Add(31 * time.Minute)
	clockMu.Unlock()
	if remote, head := cycle(); head != remote {
		t.Fatalf("a restore after the cadence: HEAD %s, want %s", head, remote)
	}
}
