package local

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/proliferate/proliferate/internal/sandbox"
)

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

// writeSnapshot writes a gzip'd tar of workspace to dest atomically and
// returns its size.
func writeSnapshot(ctx context.Context, workspace, dest string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".snapshot-*")
	if err != nil {
		return 0, fmt.Errorf("create snapshot file: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	cw := &countingWriter{w: tmp}
	gz := gzip.NewWriter(cw)
	tw := tar.NewWriter(gz)
	walkErr := filepath.WalkDir(workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(workspace, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skipInSnapshot[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return addEntry(tw, p, rel, d)
	})
	err = errors.Join(walkErr, tw.Close(), gz.Close(), tmp.Sync(), tmp.Close())
	if err != nil {
		return 0, fmt.Errorf("write snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return 0, fmt.Errorf("store snapshot: %w", err)
	}
	return cw.n, nil
}

func addEntry(tw *tar.Writer, p, rel string, d fs.DirEntry) error {
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
	hdr.Name = rel
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

// restore replaces workspace with the content of a snapshot.
func (p *Provider) restore(snapshotID, workspace string) error {
	if !idRE.MatchString(snapshotID) {
		return fmt.Errorf("local sandbox: restore %q: %w", snapshotID, sandbox.ErrNotFound)
	}
	f, err := os.Open(p.snapshotPath(snapshotID))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local sandbox: restore %s: %w", snapshotID, sandbox.ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("local sandbox: restore %s: %w", snapshotID, err)
	}
	defer f.Close()
	tmp, err := os.MkdirTemp(filepath.Dir(workspace), "restore-")
	if err != nil {
		return fmt.Errorf("local sandbox: restore %s: %w", snapshotID, err)
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	if err := extract(f, tmp); err != nil {
		return fmt.Errorf("local sandbox: restore %s: %w", snapshotID, err)
	}
	if err := os.RemoveAll(workspace); err != nil {
		return fmt.Errorf("local sandbox: restore %s: clear workspace: %w", snapshotID, err)
	}
	if err := os.Rename(tmp, workspace); err != nil {
		return fmt.Errorf("local sandbox: restore %s: %w", snapshotID, err)
	}
	return os.Chmod(workspace, 0o755)
}

// extract unpacks a gzip'd tar into dir. Every write goes through an
// os.Root, so neither "../" names nor symlinks can reach outside dir.
func extract(r io.Reader, dir string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	defer gz.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("snapshot entry %q escapes the workspace", hdr.Name)
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o600)
			if err != nil {
				return err
			}
			_, cerr := io.Copy(out, tr)
			if err := errors.Join(cerr, out.Close()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		}
	}
}
