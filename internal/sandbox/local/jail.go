package local

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Isolation modes (Options.Isolation, SANDBOX_ISOLATION).
const (
	// IsolationBwrap runs the agent, every terminal and every Exec inside
	// a bubblewrap sandbox (see jail).
	IsolationBwrap = "bwrap"
	// IsolationNone runs them as plain processes of this host, with this
	// process's user and network: the agent can read what that user can.
	// For development on machines without user namespaces only.
	IsolationNone = "none"
)

// Paths inside a sandbox. The provider keeps host paths (Sandbox.Workspace,
// snapshots, Exec's confinement); only processes inside see these.
const (
	// JailWorkspace is the workspace inside the sandbox.
	JailWorkspace = "/workspace"
	// JailHome is the isolated home inside the sandbox.
	JailHome = "/home/agent"
	// jailAgentState holds the agent's database inside the sandbox.
	jailAgentState = "/var/lib/agent"
	// jailRun is the sandbox's runtime dir: the Unix sockets of its two
	// channels to the platform (gateway.sock, llm.sock) and agent/, where
	// the agent's socket is created.
	jailRun = "/run/proliferate"
	// jailCLIDir holds the proliferate CLI inside the sandbox.
	jailCLIDir = "/opt/proliferate/bin"
	// jailUID and jailGID are the agent's ids inside (never root).
	jailUID = 1000
	jailGID = 1000
)

// Fixed ports on a sandbox's own loopback (its network namespace is
// private, so nothing else can hold them).
const (
	jailAgentPort   = 4096 // opencode serve
	jailGatewayPort = 4100 // → gateway.sock → the gateway, this session's routes only
	jailLLMPort     = 4101 // → llm.sock → the LLM endpoint, its API paths only
)

// jail builds bubblewrap command lines. Every sandbox process (the agent,
// a terminal's shell, an Exec command) runs in new user, mount, pid, ipc,
// uts, network and cgroup namespaces (--unshare-all; a terminal's shell
// shares the agent sandbox's network namespace instead), dies with its
// launcher (--die-with-parent), without capabilities (--cap-drop ALL), as
// uid/gid 1000. Its filesystem is a read-only root holding:
//
//   - /usr (and the /bin, /lib… links or binds of the host) and /etc,
//     read-only; /etc/passwd and /etc/group are the sandbox's own, and
//     every /etc entry other users may not read (shadow, private keys,
//     server configs) is masked;
//   - the pinned OpenCode and its plugin dir, read-only at their host
//     paths (the seeded node_modules links point there), and the
//     proliferate CLI at /opt/proliferate/bin;
//   - its own workspace (/workspace) and home (/home/agent), read-write,
//     and for the agent its database dir (/var/lib/agent);
//   - a private /tmp, its own /proc and a minimal /dev.
//
// Nothing else of the host is there: no data dir (other sandboxes,
// snapshots), no checkout of the platform, no host /proc. The network
// namespace holds only lo; the agent's only ways out are the Unix sockets
// of its runtime dir (channels.go).
type jail struct {
	bwrap, socat string
	// ro are host paths bound read-only at the same path (system dirs,
	// OpenCode, the plugin dir).
	ro []string
	// links are the root's symlinks (/bin → usr/bin on merged-/usr hosts).
	links map[string]string
	// masked are /etc entries hidden from the sandbox (files get
	// /dev/null, directories an empty dir).
	maskedFiles, maskedDirs []string
	// etc holds the sandbox's passwd and group, and empty/, the mask of
	// hidden directories.
	etc string
	// cli is the proliferate binary ("" for none).
	cli string
	// seccomp is the file of the compiled seccomp filter (launch.go).
	seccomp string
}

// newJail checks bwrap and socat and prepares what every sandbox shares.
// etcDir is a provider-owned directory for the sandbox's passwd/group.
func newJail(opencodeBin, pluginDir, cli, etcDir string) (*jail, error) {
	j := &jail{links: map[string]string{}, cli: cli, etc: etcDir}
	var err error
	if j.bwrap, err = exec.LookPath("bwrap"); err != nil {
		return nil, fmt.Errorf("local sandbox: SANDBOX_ISOLATION=bwrap needs bubblewrap (scripts/sandbox-tools.sh installs it): %w", err)
	}
	if j.socat, err = exec.LookPath("socat"); err != nil {
		return nil, fmt.Errorf("local sandbox: SANDBOX_ISOLATION=bwrap needs socat (scripts/sandbox-tools.sh installs it): %w", err)
	}
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"} {
		st, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("local sandbox: read link %s: %w", d, err)
			}
			j.links[d] = target
			continue
		}
		j.ro = append(j.ro, d)
	}
	// OpenCode: the node_modules dir its binary is installed in (npm), or
	// the binary's package dir; and the plugin dir the seeded links point
	// at.
	if !filepath.IsAbs(opencodeBin) {
		return nil, fmt.Errorf("local sandbox: jail: the opencode binary %q must be an absolute path", opencodeBin)
	}
	real, err := filepath.EvalSymlinks(opencodeBin)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: jail: %w", err)
	}
	agentDir := filepath.Dir(filepath.Dir(real))
	for d := filepath.Dir(real); d != "/" && d != "."; d = filepath.Dir(d) {
		if filepath.Base(d) == "node_modules" {
			agentDir = d
			break
		}
	}
	for _, p := range []string{agentDir, filepath.Dir(opencodeBin), pluginDir} {
		if p == "" || p == "." || p == "/" || underAny(p, j.ro) {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("local sandbox: jail: %w", err)
		}
		for _, q := range []string{real, p} { // both: links may use either
			if !underAny(q, j.ro) {
				j.ro = append(j.ro, q)
			}
		}
	}
	if err := j.scanEtc(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(etcDir, "empty"), 0o755); err != nil {
		return nil, fmt.Errorf("local sandbox: jail: %w", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:%d:%d:Proliferate Agent:%s:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		jailUID, jailGID, JailHome)
	group := fmt.Sprintf("root:x:0:\nagent:x:%d:\nnogroup:x:65534:\n", jailGID)
	for name, data := range map[string]string{"passwd": passwd, "group": group} {
		if err := os.WriteFile(filepath.Join(etcDir, name), []byte(data), 0o644); err != nil {
			return nil, fmt.Errorf("local sandbox: jail: %w", err)
		}
	}
	if err := j.writeSeccomp(); err != nil {
		return nil, err
	}
	// A sandbox that cannot start is better found now than at the first
	// session.
	probe := j.launch(nil, 0, append([]string{j.bwrap}, j.args(jailBinds{workspace: etcDir, home: filepath.Join(etcDir, "empty")}, true, "/bin/true")...))
	out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("local sandbox: bubblewrap cannot start a sandbox here (user namespaces disabled?): %w: %s", err, strings.TrimSpace(string(out)))
	}
	return j, nil
}

// underAny reports whether p is one of dirs or under one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// scanEtc lists the /etc entries other users of the host may not read:
// the sandbox must not either (its uid maps to the platform's user on the
// host, so file permissions alone would let it).
func (j *jail) scanEtc() error {
	return filepath.WalkDir("/etc", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "/etc" {
				return err
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 || p == "/etc" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		perm := info.Mode().Perm()
		switch {
		case d.IsDir() && perm&0o005 != 0o005:
			j.maskedDirs = append(j.maskedDirs, p)
			return fs.SkipDir
		case !d.IsDir() && perm&0o004 == 0:
			j.maskedFiles = append(j.maskedFiles, p)
		}
		return nil
	})
}

// jailBinds are one sandbox's own host paths.
type jailBinds struct {
	workspace string // → /workspace, read-write
	home      string // → /home/agent, read-write
	agentDir  string // → /var/lib/agent, read-write (the agent only)
	runDir    string // → /run/proliferate read-only, its agent/ read-write (the agent only)
	egress    string // the egress socket → /run/proliferate/egress.sock (Exec; the agent has it in runDir)
	shareNet  bool   // keep the caller's network namespace (a terminal, in the agent sandbox's)
	chdir     string // working directory inside; "" = /workspace
}

// args returns bwrap's arguments to run argv in a sandbox with binds.
// newSession detaches the command from the caller's terminal (setsid): the
// agent and Exec; a terminal's shell keeps its own pty as controlling
// terminal for job control (the pty is the sandbox's alone).
func (j *jail) args(b jailBinds, newSession bool, argv ...string) []string {
	a := []string{"--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
		"--uid", strconv.Itoa(jailUID), "--gid", strconv.Itoa(jailGID), "--hostname", "sandbox"}
	if newSession {
		a = append(a, "--new-session")
	}
	if b.shareNet {
		a = append(a, "--share-net")
	}
	for _, d := range j.ro {
		a = append(a, "--ro-bind", d, d)
	}
	for link, target := range j.links {
		a = append(a, "--symlink", target, link)
	}
	for _, f := range j.maskedFiles {
		a = append(a, "--ro-bind", "/dev/null", f)
	}
	for _, d := range j.maskedDirs {
		a = append(a, "--ro-bind", filepath.Join(j.etc, "empty"), d)
	}
	a = append(a,
		"--ro-bind", filepath.Join(j.etc, "passwd"), "/etc/passwd",
		"--ro-bind", filepath.Join(j.etc, "group"), "/etc/group",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", b.workspace, JailWorkspace,
		"--bind", b.home, JailHome)
	if j.cli != "" {
		a = append(a, "--ro-bind", j.cli, filepath.Join(jailCLIDir, cliName))
	}
	if b.agentDir != "" {
		a = append(a, "--bind", b.agentDir, jailAgentState)
	}
	if b.runDir != "" {
		a = append(a, "--ro-bind", b.runDir, jailRun,
			"--bind", filepath.Join(b.runDir, "agent"), jailRun+"/agent")
	} else if b.egress != "" {
		a = append(a, "--ro-bind", b.egress, jailRun+"/"+egressSockName)
	}
	chdir := b.chdir
	if chdir == "" {
		chdir = JailWorkspace
	}
	a = append(a, "--remount-ro", "/", "--chdir", chdir, "--")
	return append(a, argv...)
}

// agentArgv returns the command line of the agent's sandbox: the
// forwarders of its channels start, then argv (opencode serve on
// jailAgentPort) replaces the shell.
func (j *jail) agentArgv(b jailBinds, argv []string) []string {
	sock := func(name string) string { return jailRun + "/" + name }
	script := strings.Join([]string{
		fmt.Sprintf("%s -lf /dev/null UNIX-LISTEN:%s,fork,unlink-early TCP:127.0.0.1:%d &", j.socat, sock("agent/agent.sock"), jailAgentPort),
		fmt.Sprintf("%s -lf /dev/null TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:%s &", j.socat, jailGatewayPort, sock("gateway.sock")),
		fmt.Sprintf("%s -lf /dev/null TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:%s &", j.socat, jailLLMPort, sock("llm.sock")),
		j.egressForwarder(""), // egress.go
		j.servicesSupervisor(),
		`exec "$@"`,
	}, "\n")
	return append([]string{j.bwrap}, j.args(b, true, append([]string{"/bin/sh", "-c", script, "sandbox-init"}, argv...)...)...)
}

// servicesSupervisor is the init line starting `proliferate services
// daemon` next to the agent (in its namespaces and cgroup, so services
// share its localhost and outlive its shells), or a no-op without the CLI.
func (j *jail) servicesSupervisor() string {
	if j.cli == "" {
		return ":"
	}
	return fmt.Sprintf("PROLIFERATE_WORKSPACE=%s %s/%s services daemon </dev/null >/dev/null 2>&1 &", JailWorkspace, jailCLIDir, cliName)
}

// mapper maps host paths of one sandbox to its inside paths.
type mapper struct{ workspace, home, agentDir string }

func (m mapper) path(host string) string {
	for _, r := range []struct{ host, inside string }{{m.workspace, JailWorkspace}, {m.home, JailHome}, {m.agentDir, jailAgentState}} {
		if r.host == "" {
			continue
		}
		if host == r.host {
			return r.inside
		}
		if rel, ok := strings.CutPrefix(host, r.host+string(filepath.Separator)); ok {
			return r.inside + "/" + filepath.ToSlash(rel)
		}
	}
	return host
}
