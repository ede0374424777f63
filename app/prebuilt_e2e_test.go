package app_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Prebuilt configurations end to end, with the real
// agent in its bubblewrap sandbox and the repository on the GitHub fake
// (git smart HTTP, App installation tokens): a setup session of the
// configuration is finalized through the API; the configuration's next
// session boots from that snapshot (the file the setup session left is in
// its workspace, no clone logged); once the repository gained a commit the
// snapshot is stale and the next session clones fresh.
func TestFinalizedSetupSessionIsTheNextSessionsStart(t *testing.T) {
	w := newGitWorld(t)
	ctx := context.Background()
	workspace := func(id string) string {
		return filepath.Join(w.cfg.SandboxDataDir, "sandboxes", id, "workspace", "app")
	}
	start := func(body map[string]any) string {
		t.Helper()
		var sess struct {
			ID string `json:"id"`
		}
		body["configuration_id"] = w.cfgID
		if code := apiCall(t, w.base, "POST", "/sessions", w.token, body, &sess); code != 201 {
			t.Fatalf("create session %d", code)
		}
		var got frames
		wsCtx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		conn, err := client.New(w.gwBase, w.token).Connect(wsCtx, sess.ID, client.Handler{OnMessage: got.add})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		testenv.Eventually(t, 120*time.Second, "the session's sandbox", func() bool { return got.count(protocol.MsgInit) > 0 })
		testenv.Eventually(t, 120*time.Second, "the session running", func() bool {
			var s struct {
				Status string `json:"status"`
			}
			return apiCall(t, w.base, "GET", "/sessions/"+sess.ID, w.token, nil, &s) == 200 && s.Status == "running"
		})
		return sess.ID
	}

	setup := start(map[string]any{"title": "Set up", "session_type": "setup"})
	if err := os.WriteFile(filepath.Join(workspace(setup), ".deps-installed"), []byte("built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var fin struct {
		SnapshotID      string `json:"snapshot_id"`
		ConfigurationID string `json:"configuration_id"`
		SnapshotStatus  string `json:"snapshot_status"`
	}
	if code := apiCall(t, w.base, "POST", "/sessions/"+setup+"/finalize", w.token, nil, &fin); code != 200 ||
		fin.SnapshotStatus != "ready" || fin.ConfigurationID != w.cfgID || fin.SnapshotID == "" {
		t.Fatalf("finalize %d %+v", code, fin)
	}
	var cfg struct {
		SnapshotStatus string `json:"snapshot_status"`
	}
	if code := apiCall(t, w.base, "GET", "/configurations/"+w.cfgID, w.token, nil, &cfg); code != 200 || cfg.SnapshotStatus != "ready" {
		t.Fatalf("configuration after finalize: %d %+v", code, cfg)
	}

	coding := start(map[string]any{"title": "Work"})
	if b, err := os.ReadFile(filepath.Join(workspace(coding), ".deps-installed")); err != nil || string(b) != "built\n" {
		t.Fatalf("the session did not start from the finalized snapshot: %q %v", b, err)
	}
	logs := w.logs.String()
	if !strings.Contains(logs, "booting from the configuration snapshot") || !strings.Contains(logs, "snapshot_id="+fin.SnapshotID) {
		t.Fatal("no log of the boot from the configuration snapshot")
	}

	// The repository gains a commit: the snapshot is stale.
	up := t.TempDir()
	for _, args := range [][]string{{"clone", "-q", w.appRepo.Dir, up}, {"-C", up, "-c", "user.name=T", "-c", "user.email=t@x.test",
		"commit", "-q", "--allow-empty", "-m", "moved on"}, {"-C", up, "push", "-q", "origin", "HEAD"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	fresh := start(map[string]any{"title": "Later"})
	if _, err := os.Stat(filepath.Join(workspace(fresh), ".deps-installed")); err == nil {
		t.Fatal("a stale configuration snapshot was restored")
	}
	if got, want := gitOut(t, workspace(fresh), "rev-parse", "HEAD"), gitOut(t, w.appRepo.Dir, "rev-parse", "HEAD"); got != want {
		t.Fatalf("fresh clone at %s, want %s", got, want)
	}
	if !strings.Contains(w.logs.String(), "configuration snapshot is stale") {
		t.Fatal("no log of the stale configuration snapshot")
	}
}
