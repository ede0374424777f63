package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const fileScheme = "file:"

// FS is the filesystem store.
type FS struct{ dir string }

// Filesystem returns a store of files under dir (created if missing).
func Filesystem(dir string) (*FS, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blobstore: directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("blobstore: create %s: %w", abs, err)
	}
	return &FS{dir: abs}, nil
}

// Dir is the store's absolute directory.
func (f *FS) Dir() string { return f.dir }

// Put writes data to a temporary file next to the target, syncs it and
// renames it over the target, so readers see the old or the new blob, never
// a partial one.
func (f *FS) Put(ctx context.Context, key string, data []byte, _ string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	path := filepath.Join(f.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", fmt.Errorf("blobstore: put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("blobstore: put %s: %w", key, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return "", fmt.Errorf("blobstore: put %s: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("blobstore: put %s: sync: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("blobstore: put %s: %w", key, err)
	}
	if err := os.Chmod(tmp.Name(), 0o640); err != nil {
		return "", fmt.Errorf("blobstore: put %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("blobstore: put %s: rename: %w", key, err)
	}
	return fileScheme + key, nil
}

// Get reads the blob of a "file:<key>" ref.
func (f *FS) Get(ctx context.Context, ref string) ([]byte, error) {
	key, ok := strings.CutPrefix(ref, fileScheme)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a file: ref", ErrInvalidKey, ref)
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("blobstore: get %s: %w", ref, err)
	}
	return data, nil
}
