package scripts_test

// These tests run the real scripts/sandbox-tools.sh with a PATH of its own:
// the tools it looks for and apt-get (and sudo, for non-root runs) are
// small scripts in a temporary directory, so nothing is installed on the
// machine and apt's answers are under the test's control.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// toolsPath builds a bin dir holding the coreutils the script needs, the
// given tools and an apt-get that logs its arguments and "installs" what
// it is asked for (a stub bwrap or socat).
func toolsPath(t *testing.T, present ...string) (bin, aptLog string) {
	t.Helper()
	bin = t.TempDir()
	aptLog = filepath.Join(t.TempDir(), "apt.log")
	for _, tool := range []string{"bash", "env", "sed", "mktemp", "rm", "tail", "tr", "cat", "chmod"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	stub := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range present {
		stub(tool, "exit 0\n")
	}
	stub("sudo", `exec "$@"`+"\n")
	stub("apt-get", `echo "$*" >>`+aptLog+`
for a in "$@"; do
	case $a in
	bubblewrap) printf '#!/bin/sh\n' >`+bin+`/bwrap && chmod +x `+bin+`/bwrap ;;
	socat) printf '#!/bin/sh\n' >`+bin+`/socat && chmod +x `+bin+`/socat ;;
	chromium) printf '#!/bin/sh\n' >`+bin+`/chromium && chmod +x `+bin+`/chromium ;;
	esac
done
`)
	return bin, aptLog
}

func runTools(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	script, err := filepath.Abs("sandbox-tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "bash"), append([]string{script}, args...)...)
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSandboxToolsInstallsOnlyWhatIsMissing(t *testing.T) {
	// All present: nothing to do, apt is never called.
	bin, aptLog := toolsPath(t, "bwrap", "socat", "chromium")
	if out, err := runTools(t, bin, "install"); err != nil {
		t.Fatalf("install with both present: %v\n%s", err, out)
	}
	if out, err := runTools(t, bin, "check"); err != nil {
		t.Fatalf("check with both present: %v\n%s", err, out)
	}
	if _, err := os.Stat(aptLog); !os.IsNotExist(err) {
		t.Fatalf("apt-get ran with both tools present (%v)", err)
	}

	// socat missing: check fails, install asks apt for socat alone, then
	// check passes.
	bin, aptLog = toolsPath(t, "bwrap", "chromium")
	if _, err := runTools(t, bin, "check"); err == nil {
		t.Fatal("check passed without socat")
	}
	if out, err := runTools(t, bin, "install"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	log, err := os.ReadFile(aptLog)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(log)); !strings.HasSuffix(got, "install socat") || strings.Contains(got, "bubblewrap") {
		t.Fatalf("apt-get calls %q, want one install of socat", got)
	}
	if out, err := runTools(t, bin, "check"); err != nil {
		t.Fatalf("check after install: %v\n%s", err, out)
	}
}

func TestSandboxToolsFailsWhenAptCannotInstall(t *testing.T) {
	bin, _ := toolsPath(t)
	if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte("#!/bin/sh\necho 'E: Unable to locate package' >&2\nexit 100\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runTools(t, bin, "install")
	if err == nil || !strings.Contains(out, "apt-get install bubblewrap socat chromium failed") {
		t.Fatalf("install with a failing apt: %v\n%s", err, out)
	}
}
