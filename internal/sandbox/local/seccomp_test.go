package local_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// kernelProbeScript tries what the seccomp filter refuses, with the tools
// of the sandbox (mount, unshare, and perl's syscall() for the rest), and
// what must keep working (node and python threads, git, socat). "probe"
// lines say whether a command succeeded; "sys NAME ERRNO" lines give the
// errno of a raw system call (0: it succeeded).
const kernelProbeScript = `
p() { if eval "$2" >/dev/null 2>&1; then echo "probe $1 ok"; else echo "probe $1 refused"; fi; }
p mount 'mkdir -p /tmp/m && mount -t tmpfs none /tmp/m'
p unshare_user 'unshare -U true'
p unshare_root 'unshare -r true'
p unshare_net 'unshare -n true'
p node 'node -e "new (require(\"worker_threads\").Worker)(\"process.exit(0)\", {eval: true}).on(\"exit\", c => process.exit(c))"'
p python 'python3 -c "import threading; t = threading.Thread(target=print); t.start(); t.join()"'
p git 'git init -q /tmp/g && git -C /tmp/g -c user.name=a -c user.email=a@b commit -q --allow-empty -m x'
p socat 'socat -V'
perl /workspace/sys.pl
echo kernel-probe-end-$((40+2))
`

// sysProbe makes raw system calls (numbers from SYSNR) that would succeed
// or fail differently without the filter: keyctl and add_key work for
// anyone, PTRACE_TRACEME too, process_vm_readv of no bytes of itself
// returns 0, unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER) work in an
// unprivileged user namespace, setns into its own namespace is EINVAL.
const sysProbe = `use POSIX ();
my %n = map { split /=/ } split / /, $ENV{SYSNR};
sub try { my ($name, $nr, @a) = @_; $! = 0; my $r = syscall($nr+0, @a); printf "sys %s %d\n", $name, $r < 0 ? $!+0 : 0; }
sub forkwith { my ($name, $flags) = @_; $! = 0; my $r = syscall($n{clone}+0, $flags, 0, 0, 0, 0);
	POSIX::_exit(0) if $r == 0; waitpid($r, 0) if $r > 0; printf "sys %s %d\n", $name, $r < 0 ? $!+0 : 0; }
try("keyctl", $n{keyctl}, 0, -3, 1);
try("add_key", $n{add_key}, "user", "probe", "secret", 6, -3);
try("ptrace", $n{ptrace}, 0, 0, 0, 0);
try("process_vm_readv", $n{process_vm_readv}, $$, 0, 0, 0, 0, 0);
try("unshare", $n{unshare}, 0x10000000);
open(my $ns, "<", "/proc/self/ns/user") or die;
try("setns", $n{setns}, fileno($ns), 0x10000000);
try("bpf", $n{bpf}, 0, 0, 0);
try("userfaultfd", $n{userfaultfd}, 0);
try("perf_event_open", $n{perf_event_open}, 0, 0, -1, -1, 0);
try("init_module", $n{init_module}, 0, 0, "");
try("clone3", $n{clone3}, 0, 0);
try("io_uring_setup", $n{io_uring_setup}, 1, 0);
forkwith("clone_newuser", 0x10000000 | 17);
forkwith("clone_newns", 0x00020000 | 17);
forkwith("clone_plain", 17);
`

// sysNumbers is SYSNR for this machine's architecture.
func sysNumbers(t *testing.T) string {
	t.Helper()
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, name := range []string{"keyctl", "add_key", "ptrace", "process_vm_readv", "unshare", "setns", "bpf", "userfaultfd",
		"perf_event_open", "init_module", "clone3", "io_uring_setup", "clone"} {
		nr, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("no system call %s on %s", name, info.Name)
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, nr))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// checkKernelProbes asserts that everything the filter refuses failed
// (with the filter's errno) and what a coding agent needs worked.
func checkKernelProbes(t *testing.T, where, out string) {
	t.Helper()
	if !strings.Contains(out, "kernel-probe-end-42") {
		t.Fatalf("%s: the probe did not finish:\n%s", where, out)
	}
	attempts, _ := probes(t, out)
	for _, name := range []string{"mount", "unshare_user", "unshare_root", "unshare_net"} {
		if ok, ran := attempts[name]; !ran || ok {
			t.Errorf("%s: %s: ran=%v succeeded=%v\n%s", where, name, ran, ok, out)
		}
	}
	for _, name := range []string{"node", "python", "git", "socat"} {
		if !attempts[name] {
			t.Errorf("%s: %s does not work under the filter\n%s", where, name, out)
		}
	}
	errnos := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(strings.TrimSpace(line)); len(f) == 3 && f[0] == "sys" {
			errnos[f[1]], _ = strconv.Atoi(f[2])
		}
	}
	const eperm, enosys = 1, 38
	want := map[string]int{
		"keyctl": eperm, "add_key": eperm, "ptrace": eperm, "process_vm_readv": eperm, "unshare": eperm, "setns": eperm,
		"bpf": eperm, "userfaultfd": eperm, "perf_event_open": eperm, "init_module": eperm,
		"clone_newuser": eperm, "clone_newns": eperm, "clone3": enosys, "io_uring_setup": enosys, "clone_plain": 0,
	}
	for name, errno := range want {
		if got, ok := errnos[name]; !ok || got != errno {
			t.Errorf("%s: system call %s: errno %d (reported %v), want %d\n%s", where, name, got, ok, errno, out)
		}
	}
}

// TestSeccompRefusesWhatAnAgentNeverNeeds runs the kernel probes through
// Exec, a terminal and the agent's bash tool of an isolated sandbox.
func TestSeccompRefusesWhatAnAgentNeverNeeds(t *testing.T) {
	e := setup(t)
	p, _ := newProviderWith(t, e, func(o *local.Options) { o.Isolation = local.IsolationBwrap })
	if c := p.Confinement(); !c.Seccomp {
		t.Fatalf("confinement %+v: no seccomp filter", c)
	}
	gw := newGateway(t)
	spec := sandbox.Spec{SessionID: "sess-seccomp", SessionType: "coding", ClientType: "web", LLM: e.llm,
		GatewayURL: gw.URL, SandboxToken: "tok-seccomp"}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	script := "export SYSNR='" + sysNumbers(t) + "'\n" + kernelProbeScript
	for name, body := range map[string]string{"kprobe.sh": script, "sys.pl": sysProbe} {
		if err := os.WriteFile(filepath.Join(sb.Workspace, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("exec", func(t *testing.T) {
		res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"bash", "kprobe.sh"}, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v (exit %d) %s", err, res.ExitCode, res.Stderr)
		}
		checkKernelProbes(t, "exec", string(res.Stdout))
	})

	t.Run("terminal", func(t *testing.T) {
		term, err := p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 200, 50, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		out := readTerminal(term)
		typeLine(t, term, "bash kprobe.sh 2>&1")
		checkKernelProbes(t, "terminal", out.waitFor(t, "kernel-probe-end-42"))
	})

	t.Run("agent", func(t *testing.T) {
		if err := e.sim.Register("kernel-probe", llmsim.Script{Turns: []llmsim.Turn{
			{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"bash kprobe.sh 2>&1","description":"probe the kernel"}`)}}},
			{Text: "{{tool_result}}"},
		}}); err != nil {
			t.Fatal(err)
		}
		parts := toolParts(prompt(t, e, sb, "kernel-probe", "Probe the kernel."))
		if len(parts) != 1 || parts[0].State == nil {
			t.Fatalf("tool parts %+v", parts)
		}
		checkKernelProbes(t, "agent", parts[0].State.Output)
	})
}
