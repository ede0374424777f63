package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Targets are what the escape probes try to reach beyond what
// NewEscapeWorld sets up itself (a host process with a canary in its
// environment, a listener on every host address, this test's working
// directory: the platform's checkout).
type Targets struct {
	// HiddenPaths are host paths the sandbox must not see (the data dir,
	// snapshots…).
	HiddenPaths []string
	// ReadOnlyPaths are paths the sandbox must not write, besides /,
	// /usr, /etc, /var and /run.
	ReadOnlyPaths []string
	// PlatformAddrs are host:port addresses the sandbox must not connect
	// to (Postgres, Redis, Kafka, the API…).
	PlatformAddrs []string
	// HostSecrets are values in the environment of host processes (this
	// test's) that must not be readable through /proc.
	HostSecrets []string
	// OtherFile holds OtherSecret in another sandbox's workspace (as its
	// Sandbox.Workspace names it); it must not be readable.
	OtherFile, OtherSecret string
}

// EscapeWorld is a set of escape probes and the host things they aim at.
type EscapeWorld struct {
	vars  map[string]string
	lines []string
	// refused are the probes that must fail; allowed those that must work.
	refused, allowed []string
	accepted         atomic.Int64
}

// NewEscapeWorld starts the probes' targets (cleaned up with t).
func NewEscapeWorld(t testing.TB, tg Targets) *EscapeWorld {
	t.Helper()
	w := &EscapeWorld{vars: map[string]string{}}
	add := func(name, cmd string, mustFail bool) {
		w.lines = append(w.lines, fmt.Sprintf("p %s '%s'", name, cmd))
		if mustFail {
			w.refused = append(w.refused, name)
		} else {
			w.allowed = append(w.allowed, name)
		}
	}

	// A host process with a canary in its environment, under a name no
	// sandbox process has.
	canary := "canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	comm := "sbtcanary" + strconv.Itoa(os.Getpid()%100000)
	link := filepath.Join(t.TempDir(), comm)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, link); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(link, "3600")
	helper.Env = append(os.Environ(), "PLATFORM_SECRET="+canary)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	w.vars["CANARY"], w.vars["CANARY_COMM"] = canary, comm
	add("host_environ", `grep -qsF "$CANARY" /proc/[0-9]*/environ`, true)
	add("see_host_processes", `grep -qsx "$CANARY_COMM" /proc/[0-9]*/comm`, true)
	for i, s := range tg.HostSecrets {
		v := fmt.Sprintf("HOST_SECRET_%d", i)
		w.vars[v] = s
		add(fmt.Sprintf("host_secret_%d", i), `grep -qsF "$`+v+`" /proc/[0-9]*/environ`, true)
	}

	// A listener on every host address, counting connections.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.accepted.Add(1)
			c.Close()
		}
	}()
	hostIP := "127.0.0.2"
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				hostIP = ipn.IP.String()
				break
			}
		}
	}
	w.vars["LISTEN_PORT"], w.vars["HOST_IP"] = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), hostIP
	add("tcp_listener", `tcp 127.0.0.1 $LISTEN_PORT`, true)
	add("tcp_listener_host_ip", `tcp $HOST_IP $LISTEN_PORT`, true)
	// An internet host not on the egress allowlist, through whatever proxy
	// the sandbox is configured with (HTTP_PROXY…).
	add("http_listener_via_proxy", `curl -sf --max-time 30 -o /dev/null "http://$HOST_IP:$LISTEN_PORT/"`, true)
	for i, a := range tg.PlatformAddrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatalf("platform address %q: %v", a, err)
		}
		w.vars[fmt.Sprintf("PLATFORM_HOST_%d", i)], w.vars[fmt.Sprintf("PLATFORM_PORT_%d", i)] = host, port
		add(fmt.Sprintf("tcp_platform_%d", i), fmt.Sprintf(`tcp $PLATFORM_HOST_%d $PLATFORM_PORT_%d`, i, i), true)
	}

	// Host files.
	checkout, _ := os.Getwd()
	for i, p := range append([]string{checkout}, tg.HiddenPaths...) {
		v := fmt.Sprintf("HIDDEN_%d", i)
		w.vars[v] = p
		add(fmt.Sprintf("see_hidden_%d", i), `ls "$`+v+`"`, true)
	}
	if tg.OtherFile != "" {
		w.vars["OTHER_FILE"], w.vars["OTHER_SECRET"] = tg.OtherFile, tg.OtherSecret
		add("read_other_workspace", `grep -qF "$OTHER_SECRET" "$OTHER_FILE"`, true)
	}
	add("read_shadow", `grep -q : /etc/shadow`, true)

	// Writes: only the workspace (the commands' directory), home and /tmp.
	for i, d := range append([]string{"/", "/usr", "/etc", "/var", "/run"}, tg.ReadOnlyPaths...) {
		v := fmt.Sprintf("RO_%d", i)
		w.vars[v] = d
		name := "write_" + strings.Trim(strings.ReplaceAll(d, "/", "_"), "_")
		if d == "/" {
			name = "write_root"
		} else if i >= 5 {
			name = fmt.Sprintf("write_readonly_%d", i-5)
		}
		add(name, `f="$`+v+`/escape-$$"; touch "$f" && rm -f "$f"`, true)
	}
	add("write_workspace", `touch ./probe-ok && rm -f ./probe-ok`, false)
	add("write_home", `touch "$HOME/probe-ok" && rm -f "$HOME/probe-ok"`, false)
	add("write_tmp", `touch /tmp/probe-ok && rm -f /tmp/probe-ok`, false)
	return w
}

// Script is the probe script (bash) with the world's values set; extra
// lines run before the end marker (they may use p NAME 'COMMAND' and print
// "val NAME=VALUE" lines).
func (w *EscapeWorld) Script(extra string) string {
	var b strings.Builder
	for k, v := range w.vars {
		fmt.Fprintf(&b, "%s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	b.WriteString(`p() { if eval "$2" >/dev/null 2>&1; then echo "probe $1 ok"; else echo "probe $1 refused"; fi; }
tcp() { exec 3<>/dev/tcp/$1/$2 && exec 3<&-; }
`)
	for _, l := range w.lines {
		b.WriteString(l + "\n")
	}
	b.WriteString(`echo "val uid=$(id -u)"
echo "val capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)"
echo "val capbnd=$(awk '/^CapBnd/ {print $2}' /proc/self/status)"
echo "val processes=$(ls -d /proc/[0-9]* | wc -l)"
`)
	b.WriteString(extra)
	b.WriteString("\necho probe-end-$((40+2))\n")
	return b.String()
}

// Probes parses a probe run's output: which attempts succeeded, and the
// reported values.
func Probes(t testing.TB, out string) (attempts map[string]bool, vals map[string]string) {
	t.Helper()
	if !strings.Contains(out, "probe-end-42") {
		t.Fatalf("the probe script did not finish:\n%s", out)
	}
	attempts, vals = map[string]bool{}, map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)(?:^|\r)probe (\w+) (ok|refused)\r?$`).FindAllStringSubmatch(out, -1) {
		attempts[m[1]] = m[2] == "ok"
	}
	for _, m := range regexp.MustCompile(`(?m)(?:^|\r)val (\w+)=(.*?)\r?$`).FindAllStringSubmatch(out, -1) {
		vals[m[1]] = m[2]
	}
	return attempts, vals
}

// Escapes are the probes that must fail in an isolated sandbox.
func (w *EscapeWorld) Escapes() []string { return w.refused }

// Accepted is how many connections the host listener accepted.
func (w *EscapeWorld) Accepted() int64 { return w.accepted.Load() }

// Check asserts that every escape in out (a run of Script) failed, that the
// workspace, home and /tmp are writable, that the process holds no
// capability and that the host listener saw no connection. It returns the
// parsed output for further checks.
func (w *EscapeWorld) Check(t testing.TB, where, out string) (attempts map[string]bool, vals map[string]string) {
	t.Helper()
	attempts, vals = Probes(t, out)
	for _, name := range w.refused {
		ok, ran := attempts[name]
		if !ran || ok {
			t.Errorf("%s: escape %s: ran=%v succeeded=%v\n%s", where, name, ran, ok, out)
		}
	}
	for _, name := range w.allowed {
		if !attempts[name] {
			t.Errorf("%s: %s does not work in the sandbox\n%s", where, name, out)
		}
	}
	for _, k := range []string{"capeff", "capbnd"} {
		if vals[k] != "0000000000000000" {
			t.Errorf("%s: %s = %q, want no capability\n%s", where, k, vals[k], out)
		}
	}
	if got := w.Accepted(); got != 0 {
		t.Errorf("%s: the host listener accepted %d connections from the sandbox", where, got)
	}
	return attempts, vals
}
