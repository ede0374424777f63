package e2bfake

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
)

// TestAPIKey is the API key of StartForTest's fake.
const TestAPIKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// TestTemplate is the template id of StartForTest's fake: the pinned
// OpenCode at /opt/proliferate/bin/opencode, its plugin SDK at
// /opt/proliferate/opencode-plugin and the proliferate CLI (built from
// ./cmd/proliferate) at /opt/proliferate/bin/proliferate (the E2B
// provider's template contract).
const TestTemplate = "proliferate"

// StartForTest starts a fake for a test (closed with it) whose sandboxes
// reach the host addresses of forward, plus the read-only binds of extra
// (inside path → host path, e.g. the tests' git remotes).
func StartForTest(t testing.TB, forward []string, extra map[string]string) *Server {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "scripts", "opencode.sh")
	dir := t.TempDir()
	tools, err := opencode.ResolveTools(context.Background(), script)
	if err != nil {
		t.Fatalf("e2bfake: install opencode: %v", err)
	}
	boxes, err := local.NewBoxes(filepath.Join(dir, "boxes"), tools.Binary, tools.PluginDir)
	if err != nil {
		t.Fatalf("e2bfake: %v", err)
	}
	cli := sandboxtest.CLI(t)
	ro := map[string]string{"/opt/proliferate/bin/opencode": tools.Binary, "/opt/proliferate/opencode-plugin": tools.PluginDir,
		"/opt/proliferate/bin/proliferate": cli}
	for k, v := range extra {
		ro[k] = v
	}
	s, err := New(Options{APIKey: TestAPIKey, Dir: filepath.Join(dir, "e2b"), Boxes: boxes,
		Templates: map[string]Template{TestTemplate: {ReadOnly: ro}}, Forward: forward})
	if err != nil {
		t.Fatalf("e2bfake: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
