package hub_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Prebuilt configurations with the real agent in its bubblewrap sandbox and
// the repository served over git's smart HTTP protocol: a setup session's
// snapshot becomes its configuration's; the next session of the
// configuration boots from it without cloning (no pack fetched, the file
// the setup session left is there); after the remote moved on, the
// snapshot is stale and a new session clones fresh.
func TestSessionBootsFromConfigurationSnapshot(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})

	remote := newGitRemote(t)
	d, prov, fetches := realAgentOnRemote(t, e, remote, "main", nil)
	logs := &testenv.LogBuffer{}
	d.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pb := &prebuilds.Resolver{Pool: e.pool, Toolchain: "local/test", Repos: d.Repos.ResolveRepos, Log: d.Log}
	d.Prebuilt = pb
	m := e.manager(t, d)

	cfg := sessionstest.Configuration(t, e.pool, e.org, "prebuilt")
	inSandbox := func(id, script string) (string, int) {
		t.Helper()
		s := e.get(t, id)
		res, err := prov.Exec(ctx, *s.SandboxID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}, Dir: "app", Timeout: time.Minute})
		if err != nil {
			t.Fatalf("in the sandbox %q: %v", script, err)
		}
		return strings.TrimSpace(string(res.Stdout)), res.ExitCode
	}
	boot := func(typ string) (string, time.Duration) {
		t.Helper()
		id := e.session(t, sessionstest.Options{ModelID: "claude-sim", ConfigurationID: cfg, SessionType: typ})
		start := time.Now()
		attach(t, m, id, e.principal())
		return id, time.Since(start)
	}

	// The setup session clones, "installs dependencies" and saves its
	// snapshot as the configuration's (what save_snapshot and
	// finalization record).
	setup, cold := boot(sessions.TypeSetup)
	if fetches.n.Load() != 1 {
		t.Fatalf("setup session: %d pack fetches, want 1 (its clone)", fetches.n.Load())
	}
	if _, code := inSandbox(setup, "echo built > .deps-installed"); code != 0 {
		t.Fatal("write marker")
	}
	h, _ := m.Get(setup)
	snap, err := h.SaveSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := pb.Record(ctx, e.get(t, setup), snap); err != nil || !ok {
		t.Fatalf("record configuration snapshot: %v %v", ok, err)
	}
	var key *string
	if err := e.pool.QueryRow(ctx, `SELECT snapshot_version_key FROM configurations WHERE id = $1`, cfg).Scan(&key); err != nil || key == nil {
		t.Fatalf("version key not recorded: %v", err)
	}
	if err := h.Terminate(ctx, "test", "", ""); err != nil {
		t.Fatal(err)
	}

	// A coding session of the configuration boots from the snapshot: no
	// clone, the setup session's file is there.
	before := fetches.n.Load()
	coding, warm := boot(sessions.TypeCoding)
	if n := fetches.n.Load() - before; n != 0 {
		t.Fatalf("session booted from the configuration snapshot fetched %d packs, want 0", n)
	}
	if out, code := inSandbox(coding, "cat .deps-installed"); code != 0 || out != "built" {
		t.Fatalf("marker from the setup session: %q (exit %d), want restored", out, code)
	}
	if !strings.Contains(logs.String(), "booting from the configuration snapshot") {
		t.Fatal("no log of the configuration snapshot boot")
	}
	if s := e.get(t, coding); s.SnapshotID != nil {
		t.Fatalf("the configuration's snapshot became the session's own (%s)", *s.SnapshotID)
	}
	t.Logf("measured: cold boot (clone) %s, boot from the configuration snapshot %s", cold, warm)

	// The remote moves on: the snapshot is stale, the next session clones.
	head := remote.advance(t, "upstream moved")
	before = fetches.n.Load()
	fresh, _ := boot(sessions.TypeCoding)
	if n := fetches.n.Load() - before; n != 1 {
		t.Fatalf("session with a stale configuration snapshot fetched %d packs, want 1 (a fresh clone)", n)
	}
	if _, code := inSandbox(fresh, "test -e .deps-installed"); code == 0 {
		t.Fatal("stale configuration snapshot restored")
	}
	if got, _ := inSandbox(fresh, "git rev-parse HEAD"); got != head {
		t.Fatalf("fresh clone at %s, want %s", got, head)
	}
	if !strings.Contains(logs.String(), "configuration snapshot is stale") {
		t.Fatal("no log of the stale configuration snapshot")
	}
}
