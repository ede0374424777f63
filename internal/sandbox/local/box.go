package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A Box is a long-lived sandbox of this host that other code drives from
// outside, like a remote VM: one set of namespaces (the jail's: its own
// user, mount, PID, IPC, UTS and network namespaces, the read-only host
// view of jail.args) kept alive by an idle init process, a read-write home
// and private /tmp, commands started inside it later (Command: they join
// its namespaces with nsenter, then drop every capability), its ports
// reached from outside (DialPort) and chosen loopback addresses of the
// host reachable from inside at the same address (BoxOptions.Forward).
// The E2B fake (internal/sandbox/e2b/e2bfake) runs each "remote" sandbox
// as a Box.
//
// The init and every command run under the jail's seccomp filter; they
// hold no capability, not even in their bounding set, and cannot gain one
// (no_new_privs). Boxes have no cgroup limits of their own.
type Box struct {
	boxes *Boxes
	home  string // host dir, the box's home
	run   string // host runtime dir (forwarding sockets), bound at /run/box
	cmd   *exec.Cmd
	init  int // host pid of the init process inside (nsenter's target)

	lns    []net.Listener
	done   chan struct{}
	once   sync.Once
	waitMu sync.Mutex
}

// Boxes starts boxes; it holds what they share (the jail's host view).
type Boxes struct {
	j        *jail
	nsenter  string
	setpriv  string
	socatBin string
}

// BoxOptions configures one box.
type BoxOptions struct {
	// HomeDir is the host directory of the box's home (created if
	// missing); it outlives the box.
	HomeDir string
	// Home is the home's path inside, e.g. /home/user.
	Home string
	// ReadOnly binds host paths (values) read-only at inside paths (keys).
	ReadOnly map[string]string
	// Forward lists host loopback TCP addresses (127.0.0.1:port) the box
	// reaches at the same address on its own loopback.
	Forward []string
}

// NewBoxes checks bubblewrap, socat and nsenter; dir holds the boxes'
// shared files (their passwd and group). The boxes' host view includes
// opencodeBin and pluginDir at their host paths, as the agent's does.
func NewBoxes(dir, opencodeBin, pluginDir string) (*Boxes, error) {
	j, err := newJail(opencodeBin, pluginDir, "", dir)
	if err != nil {
		return nil, err
	}
	b := &Boxes{j: j, socatBin: j.socat}
	if b.nsenter, err = exec.LookPath("nsenter"); err != nil {
		return nil, fmt.Errorf("local box: nsenter (util-linux) is required: %w", err)
	}
	if b.setpriv, err = exec.LookPath("setpriv"); err != nil {
		return nil, fmt.Errorf("local box: setpriv (util-linux) is required: %w", err)
	}
	return b, nil
}

const boxRun = "/run/box"

// Start starts a box. Its init process dies with this process.
func (bs *Boxes) Start(opts BoxOptions) (*Box, error) {
	if !filepath.IsAbs(opts.Home) {
		return nil, fmt.Errorf("local box: home %q must be absolute", opts.Home)
	}
	if err := os.MkdirAll(opts.HomeDir, 0o755); err != nil {
		return nil, fmt.Errorf("local box: home: %w", err)
	}
	run, err := os.MkdirTemp("", "pbox-") // short: socket paths
	if err != nil {
		return nil, fmt.Errorf("local box: runtime dir: %w", err)
	}
	b := &Box{boxes: bs, home: opts.HomeDir, run: run, done: make(chan struct{})}
	fail := func(err error) (*Box, error) {
		b.Stop()
		return nil, err
	}
	script := []string{}
	for i, addr := range opts.Forward {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
			return fail(fmt.Errorf("local box: forward %q: want a loopback ip:port", addr))
		}
		sock := filepath.Join(run, "fwd"+strconv.Itoa(i)+".sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			return fail(fmt.Errorf("local box: forward %s: %w", addr, err))
		}
		b.lns = append(b.lns, ln)
		go forward(ln, addr)
		script = append(script, fmt.Sprintf("%s -lf /dev/null TCP-LISTEN:%s,bind=%s,fork,reuseaddr UNIX-CONNECT:%s/fwd%d.sock &",
			bs.socatBin, port, host, boxRun, i))
	}
	script = append(script, "echo ready", "exec sleep infinity")
	args := bs.j.args(jailBinds{workspace: opts.HomeDir, home: opts.HomeDir, chdir: opts.Home}, true,
		"/bin/sh", "-c", strings.Join(script, "\n"))
	at := slices.Index(args, "--remount-ro")
	if at < 0 {
		return fail(errors.New("local box: unexpected jail arguments"))
	}
	extra := []string{"--bind", opts.HomeDir, opts.Home, "--ro-bind", run, boxRun}
	for _, inside := range slices.Sorted(mapsKeys(opts.ReadOnly)) {
		extra = append(extra, "--ro-bind", opts.ReadOnly[inside], inside)
	}
	args = slices.Concat(args[:at], extra, args[at:])
	argv := append([]string{bs.j.bwrap}, args...)
	if bs.j.seccomp != "" {
		// The init under the jail's seccomp filter; commands get it from
		// the copy in the runtime dir (Command).
		if err := copyFile(bs.j.seccomp, filepath.Join(run, "seccomp.bpf")); err != nil {
			return fail(fmt.Errorf("local box: seccomp filter: %w", err))
		}
		argv = bs.j.launch(nil, 0, argv)
	}
	b.cmd = exec.Command(argv[0], argv[1:]...)
	b.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + opts.Home, "LANG=C.UTF-8"}
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		return fail(fmt.Errorf("local box: %w", err))
	}
	var stderr strings.Builder
	b.cmd.Stderr = &stderr
	if err := b.cmd.Start(); err != nil {
		return fail(fmt.Errorf("local box: start bwrap: %w", err))
	}
	go func() {
		b.waitMu.Lock()
		_ = b.cmd.Wait()
		b.waitMu.Unlock()
		close(b.done)
	}()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		b.Stop() // waits for bwrap: stderr is complete
		return nil, fmt.Errorf("local box: did not start: %s", strings.TrimSpace(stderr.String()))
	}
	// The init is the grandchild of bwrap: bwrap's child is the pid
	// namespace's reaper, its child runs the script (now sleep).
	reaper := childrenOf(b.cmd.Process.Pid)
	if len(reaper) != 1 {
		return fail(fmt.Errorf("local box: %d sandbox processes under bwrap", len(reaper)))
	}
	inits := childrenOf(reaper[0])
	if len(inits) != 1 {
		return fail(fmt.Errorf("local box: %d init processes", len(inits)))
	}
	b.init = inits[0]
	return b, nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// forward accepts the box's connections to a forwarded address and dials
// it on the host.
func forward(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer up.Close()
			pipe(c, up)
		}()
	}
}

// pipe copies both ways until both directions end.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
}

// childrenOf lists the host pids whose parent is pid.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := strconv.Itoa(pid)
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == parent {
			out = append(out, p)
		}
	}
	return out
}

// HomeDir is the host directory of the box's home.
func (b *Box) HomeDir() string { return b.home }

// Done is closed when the box has stopped.
func (b *Box) Done() <-chan struct{} { return b.done }

// Command returns a command that runs argv inside the box, in dir (an
// inside path), with exactly env as its environment. The caller sets its
// standard streams (or a pseudo-terminal) and SysProcAttr, and starts it;
// killing its process group ends it (the box's stop ends everything in
// the box). The command joins the box's namespaces, then a nested
// bubblewrap (its own user namespace, sharing the box's filesystem,
// processes and network) drops every capability, the bounding set
// included (joining a user namespace grants a full set, which nothing
// else here can drop before exec), and applies the seccomp filter.
func (b *Box) Command(ctx context.Context, argv []string, dir string, env []string) *exec.Cmd {
	inner := []string{b.boxes.setpriv, "--no-new-privs", "--"}
	var seccomp []string
	if b.boxes.j.seccomp != "" {
		// bwrap reads the jail's filter on fd 9 and applies it last.
		inner = append(inner, "/bin/sh", "-c", `exec "$@" 9<`+boxRun+`/seccomp.bpf`, "box-exec")
		seccomp = []string{"--seccomp", "9"}
	}
	inner = append(inner, b.boxes.j.bwrap)
	inner = append(inner, seccomp...)
	inner = append(inner, "--unshare-user", "--uid", strconv.Itoa(jailUID), "--gid", strconv.Itoa(jailGID), "--cap-drop", "ALL",
		"--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--chdir", dir, "--")
	c := exec.CommandContext(ctx, b.boxes.nsenter, b.nsenterArgs(append(inner, argv...))...)
	c.Env = env
	return c
}

// nsenterArgs is nsenter's command line to run argv in the box's
// namespaces (in its root, as its uid).
func (b *Box) nsenterArgs(argv []string) []string {
	return append([]string{"--target", strconv.Itoa(b.init), "--user", "--mount", "--net", "--pid", "--ipc", "--uts",
		"--root", "--wd", "--preserve-credentials", "--"}, argv...)
}

// DialPort connects to a TCP port on the box's loopback (a socat inside,
// for this connection).
func (b *Box) DialPort(ctx context.Context, port int) (net.Conn, error) {
	select {
	case <-b.done:
		return nil, errors.New("local box: stopped")
	default:
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("local box: dial: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "box-conn"), os.NewFile(uintptr(fds[1]), "box-conn")
	defer theirs.Close()
	defer ours.Close()
	cmd := exec.Command(b.boxes.nsenter, b.nsenterArgs([]string{b.boxes.setpriv, "--no-new-privs", "--",
		b.boxes.socatBin, "-lf", "/dev/null", "STDIO", "TCP:127.0.0.1:" + strconv.Itoa(port)})...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdin, cmd.Stdout = theirs, theirs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("local box: dial %d: %w", port, err)
	}
	go func() { _ = cmd.Wait() }()
	conn, err := net.FileConn(ours)
	if err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("local box: dial %d: %w", port, err)
	}
	return conn, nil
}

// Stop ends every process of the box and waits for it; the home stays.
func (b *Box) Stop() {
	b.once.Do(func() {
		if b.cmd != nil && b.cmd.Process != nil {
			if !killJail(b.cmd.Process.Pid) {
				_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			}
			<-b.done
		}
		for _, ln := range b.lns {
			_ = ln.Close()
		}
		_ = os.RemoveAll(b.run)
	})
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o444)
}
