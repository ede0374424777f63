package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/testenv"
)

// The supervisor on a host directory (the sandboxed run is in
// internal/sandbox/local and gateway/hub): a saved name with spaces works,
// an exited service is reported with its code and not restarted, names
// that would escape the log directory and unknown subcommands are refused.
func TestServicesSupervisor(t *testing.T) {
	home := t.TempDir()
	getenv := func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}
	dir := servicesDir(getenv)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &supervisor{dir: dir, workspace: t.TempDir(), svcs: map[string]*service{}}
	go s.run(ln) //nolint:errcheck // ends with the listener
	cli := func(stdin string, args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := servicesRun(args, strings.NewReader(stdin), &out, &errb, getenv)
		return out.String(), errb.String(), code
	}
	if out, errs, code := cli("", "start", "Dev server", "--command", "echo hello-svc; exit 4"); code != 0 {
		t.Fatalf("start: %d %s %s", code, out, errs)
	}
	testenv.Eventually(t, 10*time.Second, "Dev server reported failed with exit 4", func() bool {
		out, _, _ := cli("", "list", "--json")
		var r servicesResponse
		_ = json.Unmarshal([]byte(out), &r)
		return len(r.Services) == 1 && r.Services[0].Status == "failed" && r.Services[0].ExitCode != nil && *r.Services[0].ExitCode == 4
	})
	if out, _, code := cli("", "logs", "Dev server"); code != 0 || out != "hello-svc\n" {
		t.Fatalf("logs: %d %q", code, out)
	}
	if out, errs, code := cli(`[{"name":"loop","command":"while :; do sleep 1; done"}]`, "load"); code != 0 || !strings.Contains(out, `"status":"running"`) {
		t.Fatalf("load: %d %s %s", code, out, errs)
	}
	if _, errs, code := cli("", "stop", "loop"); code != 0 {
		t.Fatalf("stop: %s", errs)
	}
	if out, _, _ := cli("", "list"); !strings.Contains(out, "loop") || !strings.Contains(out, "stopped") {
		t.Fatalf("list after stop:\n%s", out)
	}
	for _, args := range [][]string{{"start", "../x", "--command", "true"}, {"logs", "a/b"}, {"expose", "--help"}, {"start"}, {}} {
		if _, _, code := cli("", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if _, errs, code := cli("", "restart", "nosuch"); code != 1 || !strings.Contains(errs, "--command") {
		t.Errorf("restart of an unknown service: %d %s", code, errs)
	}
}
