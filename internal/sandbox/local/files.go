package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/proliferate/proliferate/internal/sandbox"
)

var _ sandbox.FileReader = (*Provider)(nil)

// ReadWorkspaceFile implements sandbox.FileReader on the sandbox's host
// workspace directory through os.Root: absolute paths, ".." and symbolic
// links leading out of the workspace are refused by the kernel-checked
// walk, and the file is checked to be regular on the opened descriptor
// (no window between the check and the read; a named pipe is opened
// without blocking and refused).
func (p *Provider) ReadWorkspaceFile(_ context.Context, sandboxID, rel string, limit int64) ([]byte, error) {
	in := p.instanceByID(sandboxID)
	if in == nil {
		return nil, fmt.Errorf("local sandbox: read in %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	root, err := os.OpenRoot(in.workspace)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: open workspace: %w", err)
	}
	defer root.Close()
	// O_NONBLOCK: opening a named pipe must not wait for a writer (it is
	// then refused as not regular).
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, sandbox.ErrFileNotFound
	case err != nil && strings.Contains(err.Error(), "path escapes from parent"): // os.Root's errPathEscapes
		return nil, sandbox.ErrOutsideWorkspace
	case err != nil:
		return nil, fmt.Errorf("local sandbox: open %s: %w", rel, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("local sandbox: stat %s: %w", rel, err)
	}
	if !st.Mode().IsRegular() {
		return nil, sandbox.ErrNotRegularFile
	}
	if st.Size() > limit {
		return nil, sandbox.ErrFileTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("local sandbox: read %s: %w", rel, err)
	}
	if int64(len(data)) > limit {
		return nil, sandbox.ErrFileTooLarge
	}
	return data, nil
}
