package local_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Workspace files are read confined to the workspace, the same through the
// provider's direct reader (os.Root on the host directory) and through a
// read run inside the bubblewrap sandbox (the Exec fallback other
// providers use): regular files inside (also through a link that stays
// inside) are read; a link to the sandbox's home (where the session's
// submitted values live) or to /etc, "..", absolute paths, directories, a
// named pipe (without hanging), missing files and files over the limit
// are refused with their error.
func TestReadWorkspaceFileIsConfined(t *testing.T) {
	e := setup(t)
	p, _, _ := newProvider(t, e)
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-files", OrgID: "org-1", SessionType: "coding",
		ClientType: "web", LLM: e.llm})
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, p, sb, `set -e
mkdir -p out/shots "$HOME/.proliferate"
printf 'ok\n' > out/report.txt
printf 'secret\n' > "$HOME/.proliferate/env.json"
head -c 2048 /dev/zero > out/big.bin
ln -s report.txt out/alias.txt
ln -s "$HOME/.proliferate/env.json" out/home-link
ln -s /etc/hostname out/etc-link
ln -s ../../.. out/up
ln -s missing.txt out/dangling
mkfifo out/pipe`)

	readers := map[string]func(rel string, limit int64) ([]byte, error){
		"direct": func(rel string, limit int64) ([]byte, error) {
			return sandbox.ReadWorkspaceFile(t.Context(), p, sb.ID, rel, limit)
		},
		"exec": func(rel string, limit int64) ([]byte, error) {
			return sandbox.ReadFileViaExec(t.Context(), p, sb.ID, rel, limit)
		},
	}
	for name, read := range readers {
		for _, rel := range []string{"out/report.txt", "out/alias.txt", "out/./report.txt"} {
			if name == "direct" && strings.Contains(rel, "./") {
				continue // ReadWorkspaceFile takes clean paths only (below)
			}
			if got, err := read(rel, 1024); err != nil || string(got) != "ok\n" {
				t.Errorf("%s %s: %q %v", name, rel, got, err)
			}
		}
		for rel, want := range map[string]error{
			"out/home-link":     sandbox.ErrOutsideWorkspace,
			"out/etc-link":      sandbox.ErrOutsideWorkspace,
			"out/up/etc/passwd": sandbox.ErrOutsideWorkspace,
			"out":               sandbox.ErrNotRegularFile,
			"out/pipe":          sandbox.ErrNotRegularFile,
			"out/none.txt":      sandbox.ErrFileNotFound,
			"out/dangling":      sandbox.ErrFileNotFound,
			"out/big.bin":       sandbox.ErrFileTooLarge,
		} {
			if got, err := read(rel, 1024); !errors.Is(err, want) {
				t.Errorf("%s %s: %q %v, want %v", name, rel, got, err, want)
			}
		}
		if got, err := read("out/big.bin", 2048); err != nil || len(got) != 2048 {
			t.Errorf("%s: a file of exactly the limit: %d bytes, %v", name, len(got), err)
		}
	}
	for _, rel := range []string{"../x", "/etc/passwd", "out/../../x", "", "out/./report.txt"} {
		if _, err := sandbox.ReadWorkspaceFile(t.Context(), p, sb.ID, rel, 1024); !errors.Is(err, sandbox.ErrOutsideWorkspace) {
			t.Errorf("%q: %v", rel, err)
		}
	}
	if _, err := sandbox.ReadWorkspaceFile(t.Context(), p, "no-such-sandbox", "out/report.txt", 1024); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
}
