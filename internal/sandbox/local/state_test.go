package local_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// newProviderWith is newProvider with options adjusted by set.
func newProviderWith(t *testing.T, e env, set func(*local.Options)) (*local.Provider, string) {
	t.Helper()
	dir := t.TempDir()
	opts := local.Options{DataDir: dir, OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		Logger: slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))}
	if set != nil {
		set(&opts)
	}
	p, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, dir
}

// tarEntry is one entry of a snapshot file.
type tarEntry struct {
	hdr  tar.Header
	body []byte
}

func readSnapshot(t *testing.T, path string) []tarEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out []tarEntry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{*hdr, body})
	}
}

// TestSnapshotHoldsTheConversationNotTheHome: what a local snapshot
// holds (sandboxtest proves the conversation comes back): a manifest, the
// workspace and the agent's database, nothing of the isolated home; a
// session seeded from it gets the files but not the conversation.
func TestSnapshotHoldsTheConversationNotTheHome(t *testing.T) {
	e := setup(t)
	p, dataDir := newProviderWith(t, e, nil)
	spec := sandbox.Spec{SessionID: "sess-history", SessionType: "coding", ClientType: "web", LLM: e.llm,
		Repos: []sandbox.Repo{{CloneURL: sourceRepo(t, "# history\n"), WorkspacePath: "history"}}, SandboxToken: "tok-history"}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	msgs := prompt(t, e, sb, "hello", "Say hello, please.")
	agentSession := msgs[0].Info.SessionID
	if len(msgs) != 2 || !strings.HasPrefix(msgs[1].Text(), "Hello!") {
		t.Fatalf("conversation before pause: %+v", msgs)
	}

	paused, err := p.Pause(t.Context(), spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.Bytes <= 0 {
		t.Fatalf("pause snapshot size %d", paused.Bytes)
	}

	// The snapshot: the manifest first, then the workspace, then only the
	// agent database; nothing of the isolated HOME (it holds the LLM key).
	entries := readSnapshot(t, filepath.Join(dataDir, "snapshots", paused.ID+".tar.gz"))
	if entries[0].hdr.Name != ".proliferate-snapshot.json" {
		t.Fatalf("first entry %q, want the manifest", entries[0].hdr.Name)
	}
	var m struct {
		Version   int       `json:"version"`
		SessionID string    `json:"session_id"`
		CreatedAt time.Time `json:"created_at"`
	}
	if err := json.Unmarshal(entries[0].body, &m); err != nil || m.Version != 2 || m.SessionID != spec.SessionID ||
		time.Since(m.CreatedAt) > time.Minute {
		t.Fatalf("manifest %s (%v)", entries[0].body, err)
	}
	var agentFiles []string
	sawAgent := false
	for _, en := range entries[1:] {
		name := strings.TrimSuffix(en.hdr.Name, "/")
		switch {
		case strings.HasPrefix(name, "workspace"):
			if sawAgent {
				t.Fatalf("workspace entry %q after the agent entries", name)
			}
		case strings.HasPrefix(name, "agent"):
			sawAgent = true
			if name != "agent" {
				agentFiles = append(agentFiles, name)
			}
		default:
			t.Fatalf("unexpected entry %q", name)
		}
		for _, secret := range []string{e.llm.APIKey, "tok-history"} {
			if strings.Contains(string(en.body), secret) {
				t.Fatalf("snapshot entry %s holds a secret", name)
			}
		}
	}
	if strings.Join(agentFiles, ",") != "agent/opencode.db,agent/opencode.db-wal" {
		t.Fatalf("agent entries %v, want the database and its WAL", agentFiles)
	}

	// A session seeded from it gets the files, not the conversation.
	other := sandbox.Spec{SessionID: "sess-seeded", SessionType: "coding", ClientType: "web", LLM: e.llm, SnapshotID: paused.ID}
	sb4, err := p.EnsureSandbox(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sb4.Workspace, "history", "README.md")); err != nil {
		t.Fatalf("seeded workspace: %v", err)
	}
	if got, err := sandboxtest.AgentClient(t, sb4).Messages(t.Context(), agentSession); err == nil && len(got) > 0 {
		t.Fatalf("a seeded session sees the snapshot's conversation: %+v", got)
	}
}

// TestPauseFailureKeepsWorkOnDisk: when the pause snapshot cannot be
// written the sandbox is stopped, but its workspace and conversation stay
// and the next EnsureSandbox resumes on them.
func TestPauseFailureKeepsWorkOnDisk(t *testing.T) {
	e := setup(t)
	p, dataDir := newProviderWith(t, e, nil)
	spec := sandbox.Spec{SessionID: "sess-pause-fail", SessionType: "coding", ClientType: "web", LLM: e.llm}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	msgs := prompt(t, e, sb, "hello", "hi")
	marker := filepath.Join(sb.Workspace, "work.txt")
	if err := os.WriteFile(marker, []byte("unsaved"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The snapshots directory becomes a file: the snapshot cannot be
	// created.
	snaps := filepath.Join(dataDir, "snapshots")
	if err := os.RemoveAll(snaps); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snaps, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pause(t.Context(), spec.SessionID, sb.ID); err == nil {
		t.Fatal("pause without a snapshot store succeeded")
	}
	if alive, _ := p.Alive(t.Context(), sb.ID); alive {
		t.Fatal("sandbox alive after a failed pause")
	}
	if data, err := os.ReadFile(marker); err != nil || string(data) != "unsaved" {
		t.Fatalf("workspace lost by a failed pause: %q %v", data, err)
	}

	sb2, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil || sb2.Workspace != sb.Workspace {
		t.Fatalf("not resumed on the kept workspace: %v", err)
	}
	got, err := sandboxtest.AgentClient(t, sb2).Messages(t.Context(), msgs[0].Info.SessionID)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("conversation after a failed pause: %d messages, %v", len(got), err)
	}
}

func TestRestoreFailuresAreRestartable(t *testing.T) {
	e := setup(t)
	p, dataDir := newProviderWith(t, e, nil)
	snapPath := func(id string) string { return filepath.Join(dataDir, "snapshots", id+".tar.gz") }
	manifest := tar.Header{Name: ".proliferate-snapshot.json", Typeflag: tar.TypeReg, Mode: 0o644}
	cases := []struct {
		id      string
		write   func(path string)
		missing bool
	}{
		{id: "snap_missing", missing: true},
		{id: "snap_garbage", write: func(path string) {
			if err := os.WriteFile(path, []byte("not a gzip stream"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{id: "snap_truncated", write: func(path string) {
			writeTarGz(t, path, []tar.Header{
				manifest,
				{Name: "workspace/partial.txt", Typeflag: tar.TypeReg, Mode: 0o644},
			}, map[string]string{".proliferate-snapshot.json": `{"version":2,"session_id":"x"}`,
				"workspace/partial.txt": strings.Repeat("partial ", 1<<14)})
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data[:len(data)-40], 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{id: "snap_future", write: func(path string) {
			writeTarGz(t, path, []tar.Header{manifest, {Name: "workspace/partial.txt", Typeflag: tar.TypeReg, Mode: 0o644}},
				map[string]string{".proliferate-snapshot.json": `{"version":3}`, "workspace/partial.txt": "partial"})
		}},
		{id: "snap_unexpected", write: func(path string) {
			writeTarGz(t, path, []tar.Header{
				manifest,
				{Name: "workspace/partial.txt", Typeflag: tar.TypeReg, Mode: 0o644},
				{Name: "home/.config/opencode/opencode.json", Typeflag: tar.TypeReg, Mode: 0o644},
			}, map[string]string{".proliferate-snapshot.json": `{"version":2,"session_id":"sess-restore"}`,
				"workspace/partial.txt": "partial", "home/.config/opencode/opencode.json": "{}"})
		}},
		{id: "snap_escape", write: func(path string) {
			writeTarGz(t, path, []tar.Header{
				manifest,
				{Name: "workspace/partial.txt", Typeflag: tar.TypeReg, Mode: 0o644},
				{Name: "workspace/../../partial.txt", Typeflag: tar.TypeReg, Mode: 0o644},
			}, map[string]string{".proliferate-snapshot.json": `{"version":2,"session_id":"sess-restore"}`,
				"workspace/partial.txt": "partial", "workspace/../../partial.txt": "partial"})
		}},
	}
	// The session has a workspace from an earlier sandbox: a failed restore
	// must leave it whole, without any of the snapshot's files.
	workspace := filepath.Join(dataDir, "sandboxes", "sess-restore", "workspace")
	if err := os.MkdirAll(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(workspace, "earlier.txt"), []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			if c.write != nil {
				c.write(snapPath(c.id))
			}
			_, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-restore", SnapshotID: c.id, LLM: e.llm})
			if !errors.Is(err, sandbox.ErrRestoreFailed) {
				t.Fatalf("restore error %v, want ErrRestoreFailed", err)
			}
			if c.missing != errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("restore error %v: ErrNotFound = %v, want %v", err, !c.missing, c.missing)
			}
			if data, err := os.ReadFile(filepath.Join(workspace, "earlier.txt")); err != nil || string(data) != "earlier" {
				t.Fatalf("earlier workspace damaged: %q %v", data, err)
			}
			if hits := grepTree(t, dataDir+"/sandboxes", "partial"); len(hits) > 0 {
				t.Fatalf("half-restored files left: %v", hits)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(dataDir, "sandboxes", "sess-restore", "restore-*")); len(leftovers) > 0 {
				t.Fatalf("temporary restore dirs left: %v", leftovers)
			}
		})
	}
}

// TestVersion1SnapshotRestoresTheWorkspace: snapshots written before the
// manifest existed (the workspace alone) still restore.
func TestVersion1SnapshotRestoresTheWorkspace(t *testing.T) {
	e := setup(t)
	p, dataDir := newProviderWith(t, e, nil)
	writeTarGz(t, filepath.Join(dataDir, "snapshots", "snap_v1.tar.gz"), []tar.Header{
		{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "app/main.go", Typeflag: tar.TypeReg, Mode: 0o644},
	}, map[string]string{"app/main.go": "package main\n"})
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-v1", SnapshotID: "snap_v1", LLM: e.llm})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(sb.Workspace, "app", "main.go")); err != nil || string(data) != "package main\n" {
		t.Fatalf("v1 workspace file = %q, %v", data, err)
	}
	if msgs := prompt(t, e, sb, "hello", "hi"); len(msgs) != 2 {
		t.Fatalf("agent on a v1 workspace: %+v", msgs)
	}
}
