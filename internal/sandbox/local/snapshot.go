package local

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Snapshot format, version 2: one gzip'd tar whose entries are, in order,
//
//	.proliferate-snapshot.json   the manifest (version, session id, creation time)
//	workspace/…                  the workspace
//	agent/opencode.db[-wal]      the agent's database (its conversation)
//
// Version 1 (no manifest) is a tar of the workspace alone, entries relative
// to the workspace root; it is still restored (workspace only).
const (
	manifestName    = ".proliferate-snapshot.json"
	snapshotVersion = 2
	workspacePrefix = "workspace"
	agentPrefix     = "agent"
	maxManifestSize = 64 << 10
)

// agentDBFiles are the agent database files a snapshot carries, relative to
// sandboxes/<session>/state/agent. The -shm file is left out: it is
// SQLite's shared-memory index of the -wal file, rebuilt from it when the
// database is opened; a copy of it would describe another moment.
var agentDBFiles = []string{agentDBName, agentDBName + "-wal"}

// agentDBName is the agent's database file name in state/agent.
const agentDBName = "opencode.db"

// manifest is the first entry of a version-2 snapshot.
type manifest struct {
	Version   int       `json:"version"`
	SessionID string    `json:"session_id"`
	CreatedAt time.Time `json:"created_at"`
}

// skipInSnapshot are workspace paths left out of snapshots: the seeded
// plugin dependencies are a symlink to a host directory and are seeded
// again at every start.
var skipInSnapshot = map[string]bool{".opencode/node_modules": true}

// countingWriter counts the compressed bytes written.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// snapshotSource is what a snapshot captures.
type snapshotSource struct {
	sessionID string
	workspace string
	// agentDir holds the agent's database files (may not exist: an agent
	// that never ran, or a v1-restored session before its first start).
	agentDir string
	// live means the agent may still be running: its database files are
	// copied to a stable set first (stableCopy) instead of being read in
	// place.
	live bool
	// skip are more workspace paths (slash-separated) left out: the
	// session's env files, which every boot writes again with the
	// current values.
	skip map[string]bool
}

// writeSnapshot writes a version-2 snapshot of src to dest atomically (a
// temporary file renamed into place) and returns its compressed size.
func writeSnapshot(ctx context.Context, src snapshotSource, dest string) (int64, error) {
	agentDir := src.agentDir
	if src.live {
		tmp, err := os.MkdirTemp(filepath.Dir(dest), ".agent-")
		if err != nil {
			return 0, fmt.Errorf("copy agent state: %w", err)
		}
		defer os.RemoveAll(tmp)
		if err := stableCopy(ctx, src.agentDir, tmp, agentDBFiles); err != nil {
			return 0, fmt.Errorf("copy agent state: %w", err)
		}
		agentDir = tmp
	}

	tmp, err := os.CreateTemp(filepath.Dir(dest), ".snapshot-*")
	if err != nil {
		return 0, fmt.Errorf("create snapshot file: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	cw := &countingWriter{w: tmp}
	gz, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed) // valid level: no error
	tw := tar.NewWriter(gz)
	writeErr := writeEntries(ctx, tw, src, agentDir)
	err = errors.Join(writeErr, tw.Close(), gz.Close(), tmp.Sync(), tmp.Close())
	if err != nil {
		return 0, fmt.Errorf("write snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return 0, fmt.Errorf("store snapshot: %w", err)
	}
	return cw.n, nil
}

func writeEntries(ctx context.Context, tw *tar.Writer, src snapshotSource, agentDir string) error {
	m, err := json.Marshal(manifest{Version: snapshotVersion, SessionID: src.sessionID, CreatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: manifestName, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(m)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(m); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: workspacePrefix + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now}); err != nil {
		return err
	}
	err = filepath.WalkDir(src.workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src.workspace, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skipInSnapshot[rel] || src.skip[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return addEntry(tw, p, workspacePrefix+"/"+rel, d)
	})
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: agentPrefix + "/", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: now}); err != nil {
		return err
	}
	for _, name := range agentDBFiles {
		p := filepath.Join(agentDir, name)
		info, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("agent state: %w", err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if err := addEntry(tw, p, agentPrefix+"/"+name, fs.FileInfoToDirEntry(info)); err != nil {
			return fmt.Errorf("agent state: %w", err)
		}
	}
	return nil
}

// stableCopyAttempts bounds how often stableCopy starts over when the
// database changed under it.
const stableCopyAttempts = 5

// stableCopy copies names (missing ones are skipped) from src to dst so
// that the copies are the files' content at one instant, while a process
// may be writing them. Each file is copied while hashed, then every source
// is hashed again; when every file kept its hash, file i was unchanged from
// the start of its copy to the end of its re-hash, and all these intervals
// contain the moment the last copy started: the set is what a crash at
// that moment would have left on disk, which SQLite recovers from by
// design (its WAL frames are only valid up to the last commit frame).
// Otherwise it starts over.
//
// The gateway snapshots only an idle agent, so the database is quiet and
// the first attempt succeeds; the check makes the rare concurrent write
// (a title update, a late event) cost a retry instead of a torn copy.
func stableCopy(ctx context.Context, src, dst string, names []string) error {
	for range stableCopyAttempts {
		sums := make([][]byte, len(names))
		for i, name := range names {
			sum, err := copyHashed(filepath.Join(src, name), filepath.Join(dst, name))
			if err != nil {
				return err
			}
			sums[i] = sum
		}
		stable := true
		for i, name := range names {
			sum, err := hashFile(filepath.Join(src, name))
			if err != nil {
				return err
			}
			if !bytes.Equal(sum, sums[i]) {
				stable = false
				break
			}
		}
		if stable {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("the agent database kept changing during %d copies", stableCopyAttempts)
}

// copyHashed copies src to dst and returns the hash of what it copied; a
// missing src removes dst and hashes as nil.
func copyHashed(src, dst string) ([]byte, error) {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	_, cerr := io.Copy(io.MultiWriter(out, h), in)
	if err := errors.Join(cerr, out.Close()); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func hashFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func addEntry(tw *tar.Writer, p, name string, d fs.DirEntry) error {
	info, err := d.Info()
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed while walking
	} else if err != nil {
		return err
	}
	var link string
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case info.IsDir(), info.Mode().IsRegular():
	default:
		return nil // sockets, pipes, devices
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if !info.Mode().IsRegular() {
		return tw.WriteHeader(hdr)
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// The agent may still be writing: copy what the header announced and
	// pad a file that shrank meanwhile.
	n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
	if err != nil {
		return err
	}
	if n < hdr.Size {
		_, err = io.CopyN(tw, zeroReader{}, hdr.Size-n)
	}
	return err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// restoreResult tells what a restore brought back.
type restoreResult struct {
	version int
	// agentState is true when the snapshot's conversation was restored
	// (a v2 snapshot of the same session).
	agentState bool
}

// restore replaces the workspace of sessionID (and its agent state) with
// the content of a snapshot. The snapshot is extracted into a temporary
// directory first, so a failure leaves the previous workspace and state
// as they were. The agent state is restored only from a snapshot of the
// same session; otherwise the session's agent state is cleared, so a
// restored sandbox never runs a snapshot's files with another
// conversation. Every error wraps sandbox.ErrRestoreFailed.
func (p *Provider) restore(snapshotID, sessionID string) (restoreResult, error) {
	res, err := p.restoreInto(snapshotID, sessionID, p.sandboxDir(sessionID))
	if err != nil {
		return restoreResult{}, fmt.Errorf("local sandbox: restore %s: %w: %w", snapshotID, sandbox.ErrRestoreFailed, err)
	}
	return res, nil
}

func (p *Provider) restoreInto(snapshotID, sessionID, dir string) (restoreResult, error) {
	if !idRE.MatchString(snapshotID) {
		return restoreResult{}, sandbox.ErrNotFound
	}
	f, err := os.Open(p.snapshotPath(snapshotID))
	if errors.Is(err, fs.ErrNotExist) {
		return restoreResult{}, sandbox.ErrNotFound
	} else if err != nil {
		return restoreResult{}, err
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return restoreResult{}, err
	}
	tmp, err := os.MkdirTemp(dir, "restore-")
	if err != nil {
		return restoreResult{}, err
	}
	defer os.RemoveAll(tmp) // what was not renamed into place
	tmpWorkspace, tmpAgent := filepath.Join(tmp, workspacePrefix), filepath.Join(tmp, agentPrefix)
	for _, d := range []string{tmpWorkspace, tmpAgent} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return restoreResult{}, err
		}
	}
	res, err := extract(f, tmpWorkspace, tmpAgent, sessionID)
	if err != nil {
		return restoreResult{}, err
	}
	if err := os.Chmod(tmpWorkspace, 0o755); err != nil {
		return restoreResult{}, err
	}
	workspace := filepath.Join(dir, "workspace")
	agentDir := filepath.Join(dir, "state", agentPrefix)
	if err := os.RemoveAll(workspace); err != nil {
		return restoreResult{}, fmt.Errorf("clear workspace: %w", err)
	}
	if err := os.Rename(tmpWorkspace, workspace); err != nil {
		return restoreResult{}, err
	}
	if err := os.RemoveAll(agentDir); err != nil {
		return restoreResult{}, fmt.Errorf("clear agent state: %w", err)
	}
	if res.agentState {
		if err := os.MkdirAll(filepath.Dir(agentDir), 0o700); err != nil {
			return restoreResult{}, err
		}
		if err := os.Rename(tmpAgent, agentDir); err != nil {
			return restoreResult{}, err
		}
	}
	return res, nil
}

// extract unpacks a snapshot: workspace entries into workspaceDir, agent
// database entries into agentDir when the snapshot belongs to sessionID.
// Every write goes through an os.Root per directory, so neither "../" names
// nor symlinks can reach outside it (nor from the workspace into the agent
// state).
func extract(r io.Reader, workspaceDir, agentDir, sessionID string) (restoreResult, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return restoreResult{}, err
	}
	defer gz.Close()
	wsRoot, err := os.OpenRoot(workspaceDir)
	if err != nil {
		return restoreResult{}, err
	}
	defer wsRoot.Close()
	agentRoot, err := os.OpenRoot(agentDir)
	if err != nil {
		return restoreResult{}, err
	}
	defer agentRoot.Close()

	tr := tar.NewReader(gz)
	res := restoreResult{version: 1}
	for first := true; ; first = false {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if first {
				return restoreResult{}, errors.New("empty snapshot")
			}
			return res, nil
		}
		if err != nil {
			return restoreResult{}, err
		}
		if first && hdr.Name == manifestName {
			m, err := readManifest(tr)
			if err != nil {
				return restoreResult{}, err
			}
			res.version = m.Version
			res.agentState = m.SessionID != "" && m.SessionID == sessionID
			continue
		}
		name := path.Clean(hdr.Name)
		if res.version == 1 {
			if err := writeEntry(wsRoot, name, hdr, tr); err != nil {
				return restoreResult{}, err
			}
			continue
		}
		top, rest, _ := strings.Cut(name, "/")
		switch {
		case top == workspacePrefix && rest == "":
		case top == workspacePrefix:
			if err := writeEntry(wsRoot, rest, hdr, tr); err != nil {
				return restoreResult{}, err
			}
		case top == agentPrefix && rest == "":
		case top == agentPrefix:
			if !slices.Contains(agentDBFiles, rest) || hdr.Typeflag != tar.TypeReg {
				return restoreResult{}, fmt.Errorf("unexpected agent state entry %q", hdr.Name)
			}
			if res.agentState {
				if err := writeEntry(agentRoot, rest, hdr, tr); err != nil {
					return restoreResult{}, err
				}
			}
		default:
			return restoreResult{}, fmt.Errorf("unexpected snapshot entry %q", hdr.Name)
		}
	}
}

func readManifest(r io.Reader) (manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestSize+1))
	if err != nil {
		return manifest{}, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > maxManifestSize {
		return manifest{}, errors.New("manifest too large")
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return manifest{}, fmt.Errorf("decode manifest: %w", err)
	}
	if m.Version != snapshotVersion {
		return manifest{}, fmt.Errorf("unsupported snapshot version %d", m.Version)
	}
	return m, nil
}

// writeEntry writes one tar entry at name inside root.
func writeEntry(root *os.Root, name string, hdr *tar.Header, r io.Reader) error {
	if !filepath.IsLocal(name) {
		return fmt.Errorf("snapshot entry %q escapes its directory", hdr.Name)
	}
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	if parent := path.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, mode|0o700)
	case tar.TypeReg:
		out, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o600)
		if err != nil {
			return err
		}
		_, cerr := io.Copy(out, r)
		return errors.Join(cerr, out.Close())
	case tar.TypeSymlink:
		return root.Symlink(hdr.Linkname, name)
	}
	return nil // hard links, devices, fifos: not restored
}
