package opencode_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/internal/agent/opencode"
)

func fakeBinary(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The binary finds the agent wherever it is started: from a directory with
// no checkout above it, ResolveTools finds the install scripts/opencode.sh
// made in the shared cache (it used to look for scripts/opencode.sh above
// the working directory and fail); OPENCODE_BIN wins; a relative
// PROLIFERATE_TOOLS_DIR is made absolute; without a cached install, opencode
// on PATH serves when the plugin dir is known.
func TestResolveToolsFromAnyWorkingDirectory(t *testing.T) {
	want, err := opencode.ResolveTools(t.Context(), repoScript(t)) // installs like make tools
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	for _, k := range []string{"OPENCODE_BIN", "OPENCODE_PLUGIN_DIR", "PROLIFERATE_OPENCODE_SCRIPT"} {
		t.Setenv(k, "")
	}
	elsewhere := t.TempDir()
	t.Chdir(elsewhere)
	for dir := elsewhere; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "opencode.sh")); err == nil {
			t.Fatalf("%s has scripts/opencode.sh above it", elsewhere)
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}

	got, err := opencode.ResolveTools(t.Context(), "")
	if err != nil {
		t.Fatalf("from %s: %v", elsewhere, err)
	}
	if got != want || !filepath.IsAbs(got.Binary) || !filepath.IsAbs(got.PluginDir) {
		t.Fatalf("from %s: %+v, want %+v", elsewhere, got, want)
	}
	if fi, err := os.Stat(got.Binary); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("binary %s: %v", got.Binary, err)
	}

	t.Run("relative PROLIFERATE_TOOLS_DIR", func(t *testing.T) {
		root := filepath.Dir(filepath.Dir(want.PluginDir)) // <tools>/opencode-<version>/plugin
		t.Chdir(filepath.Dir(root))
		t.Setenv("PROLIFERATE_TOOLS_DIR", filepath.Base(root))
		got, err := opencode.ResolveTools(t.Context(), "")
		if err != nil || got != want {
			t.Fatalf("got %+v, %v; want %+v", got, err, want)
		}
	})

	bin := t.TempDir()
	t.Run("OPENCODE_BIN wins", func(t *testing.T) {
		fake := fakeBinary(t, bin, "my-opencode")
		t.Setenv("OPENCODE_BIN", fake)
		got, err := opencode.ResolveTools(t.Context(), "")
		if err != nil || got.Binary != fake || got.PluginDir != want.PluginDir {
			t.Fatalf("got %+v, %v", got, err)
		}
		t.Setenv("OPENCODE_BIN", "my-opencode") // a name on PATH
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		if got, err := opencode.ResolveTools(t.Context(), ""); err != nil || got.Binary != fake {
			t.Fatalf("a name on PATH: got %+v, %v", got, err)
		}
	})

	t.Run("PATH without a cached install", func(t *testing.T) {
		empty := t.TempDir()
		t.Setenv("PROLIFERATE_TOOLS_DIR", empty)
		t.Setenv("OPENCODE_PLUGIN_DIR", want.PluginDir)
		fake := fakeBinary(t, bin, "opencode")
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		got, err := opencode.ResolveTools(t.Context(), "")
		if err != nil || got.Binary != fake || got.PluginDir != want.PluginDir {
			t.Fatalf("got %+v, %v", got, err)
		}
		if entries, _ := os.ReadDir(empty); len(entries) > 0 {
			t.Fatalf("installed into %s although opencode was on PATH", empty)
		}
	})
}
