package app_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/testenv"
)

type buildView struct {
	ID         string  `json:"id"`
	Status     string  `json:"status"`
	Error      *string `json:"error"`
	SnapshotID *string `json:"snapshot_id"`
	SessionID  *string `json:"session_id"`
}

// A configuration rebuilt on demand, end to end with
// the real agent in its bubblewrap sandbox and the repository on the
// GitHub fake: POST /configurations/:id/rebuild runs a headless setup
// session in the gateway (fresh clone, the configuration's service
// command, snapshot) and ends ready; the configuration's next session
// boots from the build's snapshot (the file the build's service command
// wrote is in its workspace, not rewritten); a duplicate request to run
// the build claims nothing. A rebuild whose service command exits non-zero
// ends failed with the exit code and the (redacted) output, the
// configuration's status is failed, and the next session still boots from
// the previous snapshot.
func TestConfigurationRebuild(t *testing.T) {
	w := newGitWorld(t)
	ctx := context.Background()
	workspace := func(id string) string {
		return filepath.Join(w.cfg.SandboxDataDir, "sandboxes", id, "workspace", "app")
	}
	setCommand := func(cmd string) {
		t.Helper()
		if code := apiCall(t, w.base, "PUT", "/configurations/"+w.cfgID+"/service-commands", w.token,
			map[string]any{"service_commands": []map[string]any{{"name": "deps", "command": cmd}}}, nil); code != 200 {
			t.Fatalf("service commands %d", code)
		}
	}
	rebuild := func() buildView {
		t.Helper()
		var b buildView
		if code := apiCall(t, w.base, "POST", "/configurations/"+w.cfgID+"/rebuild", w.token, nil, &b); code != 202 || b.Status != "building" {
			t.Fatalf("rebuild %d %+v", code, b)
		}
		return b
	}
	finished := func(id string) buildView {
		t.Helper()
		var got buildView
		testenv.Eventually(t, 180*time.Second, "the build to finish", func() bool {
			var page struct {
				Items []buildView `json:"items"`
			}
			if apiCall(t, w.base, "GET", "/configurations/"+w.cfgID+"/builds", w.token, nil, &page) != 200 {
				return false
			}
			for _, b := range page.Items {
				if b.ID == id && b.Status != "building" {
					got = b
					return true
				}
			}
			return false
		})
		return got
	}
	configuration := func() (status string, snapshotID *string) {
		t.Helper()
		var cfg struct {
			SnapshotStatus string  `json:"snapshot_status"`
			SnapshotID     *string `json:"snapshot_id"`
		}
		if code := apiCall(t, w.base, "GET", "/configurations/"+w.cfgID, w.token, nil, &cfg); code != 200 {
			t.Fatalf("configuration %d", code)
		}
		return cfg.SnapshotStatus, cfg.SnapshotID
	}
	start := func() string {
		t.Helper()
		var sess struct {
			ID string `json:"id"`
		}
		if code := apiCall(t, w.base, "POST", "/sessions", w.token, map[string]any{"title": "Work", "configuration_id": w.cfgID}, &sess); code != 201 {
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
		testenv.Eventually(t, 120*time.Second, "the session running", func() bool {
			var s struct {
				Status string `json:"status"`
			}
			return got.count(protocol.MsgInit) > 0 &&
				apiCall(t, w.base, "GET", "/sessions/"+sess.ID, w.token, nil, &s) == 200 && s.Status == "running"
		})
		return sess.ID
	}

	// The build's service command leaves a file unique to its run.
	setCommand(`test -e .built || od -An -N8 -tx8 /dev/urandom > .built`)
	requested := time.Now()
	b := rebuild()
	// The API already had a gateway claim it: asking again builds nothing.
	svc, err := identity.IssueServiceToken(w.cfg.ServiceToken, "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if claimed, err := client.New(w.gwBase, svc).RunConfigurationBuild(ctx, b.ID); err != nil || claimed {
		t.Fatalf("a duplicate run request claimed the build: %v %v", claimed, err)
	}
	done := finished(b.ID)
	t.Logf("rebuild: ready %v after the request (fresh clone in bubblewrap, agent up, service command, snapshot, session stopped)",
		time.Since(requested).Round(time.Millisecond))
	if done.Status != "ready" || done.SnapshotID == nil || done.SessionID == nil {
		t.Fatalf("build %+v", done)
	}
	if st, snap := configuration(); st != "ready" || snap == nil || *snap != *done.SnapshotID {
		t.Fatalf("configuration after the build: %s %v", st, snap)
	}
	marker := snapshotFile(t, filepath.Join(w.cfg.SandboxDataDir, "snapshots", *done.SnapshotID+".tar.gz"), "app/.built")
	if strings.TrimSpace(marker) == "" {
		t.Fatal("the build's service command left no file in the snapshot")
	}
	if !strings.Contains(w.logs.String(), "configuration build: cloning fresh") {
		t.Fatal("the build's setup session did not clone fresh")
	}
	var buildSess struct {
		Status      string `json:"status"`
		SessionType string `json:"session_type"`
	}
	if code := apiCall(t, w.base, "GET", "/sessions/"+*done.SessionID, w.token, nil, &buildSess); code != 200 ||
		buildSess.Status != "stopped" || buildSess.SessionType != "setup" {
		t.Fatalf("the build's session: %d %+v", code, buildSess)
	}

	coding := start()
	if b, err := os.ReadFile(filepath.Join(workspace(coding), ".built")); err != nil || string(b) != marker {
		t.Fatalf("the session did not start from the build's snapshot: %q (want %q) %v", b, marker, err)
	}
	if logs := w.logs.String(); !strings.Contains(logs, "booting from the configuration snapshot") ||
		!strings.Contains(logs, "snapshot_id="+*done.SnapshotID) {
		t.Fatal("no log of the boot from the build's snapshot")
	}

	// A failing setup: the build fails, the previous snapshot stays.
	setCommand(`echo "installing deps: boom"; exit 3`)
	failed := finished(rebuild().ID)
	if failed.Status != "failed" || failed.Error == nil || !strings.Contains(*failed.Error, "exited with code 3") ||
		!strings.Contains(*failed.Error, "installing deps: boom") || failed.SnapshotID != nil {
		t.Fatalf("failed build %+v (error %v)", failed, deref(failed.Error))
	}
	if st, snap := configuration(); st != "failed" || snap == nil || *snap != *done.SnapshotID {
		t.Fatalf("configuration after the failed build: %s %v", st, snap)
	}
	before := strings.Count(w.logs.String(), "booting from the configuration snapshot")
	later := start()
	if b, err := os.ReadFile(filepath.Join(workspace(later), ".built")); err != nil || string(b) != marker {
		t.Fatalf("after a failed build the session did not start from the previous snapshot: %q %v", b, err)
	}
	if strings.Count(w.logs.String(), "booting from the configuration snapshot") != before+1 {
		t.Fatal("no log of the boot from the previous snapshot")
	}
}

// snapshotFile reads the file whose path ends with name from a local
// provider snapshot (a tar.gz of the workspace).
func snapshotFile(t *testing.T, path, name string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s not in snapshot %s", name, path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(h.Name, name) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
}
