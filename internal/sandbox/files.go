package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Errors of ReadWorkspaceFile.
var (
	// ErrFileNotFound: no such file in the workspace (or a dangling link).
	ErrFileNotFound = errors.New("sandbox: no such file in the workspace")
	// ErrOutsideWorkspace: the path, or a symbolic link on it, leads out
	// of the workspace.
	ErrOutsideWorkspace = errors.New("sandbox: the path leads out of the workspace")
	// ErrNotRegularFile: a directory, device, socket or pipe.
	ErrNotRegularFile = errors.New("sandbox: not a regular file")
	// ErrFileTooLarge: the file is larger than the limit.
	ErrFileTooLarge = errors.New("sandbox: the file is too large")
	// ErrFilesUnsupported: the provider can neither read files nor run
	// commands.
	ErrFilesUnsupported = errors.New("sandbox: the provider cannot read workspace files")
)

// FileReader is implemented by providers that read a sandbox's workspace
// files directly (the local provider, through os.Root on its host
// directory). Optional: ReadWorkspaceFile falls back to Executor.
type FileReader interface {
	// ReadWorkspaceFile returns the contents of rel, a clean relative
	// path of the workspace of the live sandbox sandboxID, when it is a
	// regular file of at most limit bytes. Symbolic links are followed
	// only while they stay inside the workspace. Errors: ErrNotFound (no
	// such sandbox), ErrFileNotFound, ErrOutsideWorkspace,
	// ErrNotRegularFile, ErrFileTooLarge.
	ReadWorkspaceFile(ctx context.Context, sandboxID, rel string, limit int64) ([]byte, error)
}

// ReadWorkspaceFile reads a workspace file of a live sandbox through p:
// its FileReader when it has one, else a confined read run inside the
// sandbox through its Executor (the path is resolved with realpath inside
// the sandbox and must stay under the workspace's real path; only regular
// files of at most limit bytes are read). rel must be a clean relative
// path (no "..", not absolute); anything else is ErrOutsideWorkspace.
func ReadWorkspaceFile(ctx context.Context, p Provider, sandboxID, rel string, limit int64) ([]byte, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, ErrOutsideWorkspace
	}
	if fr, ok := p.(FileReader); ok {
		return fr.ReadWorkspaceFile(ctx, sandboxID, rel, limit)
	}
	if ex, ok := p.(Executor); ok {
		return ReadFileViaExec(ctx, ex, sandboxID, rel, limit)
	}
	return nil, ErrFilesUnsupported
}

// readScript reads $1 (relative to the workspace, the working directory)
// when it resolves inside the workspace to a regular file of at most $2
// bytes; exit statuses name the refusals.
const readScript = `ws=$(pwd -P) || exit 70
[ -e "$1" ] || exit 3
f=$(realpath -e -- "$1") || exit 3
case "$f" in "$ws"/*) ;; *) exit 4 ;; esac
[ -f "$f" ] || exit 5
n=$(wc -c < "$f") || exit 70
[ "$n" -le "$2" ] || exit 6
exec head -c "$(($2 + 1))" -- "$f"`

// ReadFileViaExec is ReadWorkspaceFile over an Executor (providers whose
// files the gateway cannot reach directly, such as E2B).
func ReadFileViaExec(ctx context.Context, ex Executor, sandboxID, rel string, limit int64) ([]byte, error) {
	res, err := ex.Exec(ctx, sandboxID, ExecCommand{Args: []string{"sh", "-c", readScript, "sh", rel, strconv.FormatInt(limit, 10)},
		Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	switch res.ExitCode {
	case 0:
		if int64(len(res.Stdout)) > limit {
			return nil, ErrFileTooLarge // it grew meanwhile
		}
		return res.Stdout, nil
	case 3:
		return nil, ErrFileNotFound
	case 4:
		return nil, ErrOutsideWorkspace
	case 5:
		return nil, ErrNotRegularFile
	case 6:
		return nil, ErrFileTooLarge
	}
	return nil, fmt.Errorf("sandbox: read %s: exit status %d: %s", rel, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
}
