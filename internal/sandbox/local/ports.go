package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Previews (sandbox.Ports). A sandbox's network namespace holds only lo,
// so its services are reached from inside that namespace: for each
// connection the host starts `nsenter --user --net` into the sandbox's
// user and network namespaces (and nothing else: the host's filesystem,
// processes and cgroup stay the host's), which runs the host's socat with
// no_new_privs and no capability left after its exec (it is the sandbox's
// unprivileged uid in there), connected to 127.0.0.1:port of the sandbox
// on one end and to a socket pair of the gateway on the other.
//
// The namespaces are named by file descriptors the provider opened once,
// through a directory handle on /proc/<pid> of the sandbox's pid-namespace
// reaper (bwrap's child, checked to be bwrap's child through that handle):
// a handle on a process that has exited answers ESRCH instead of naming a
// process that reused its pid, so a preview never reaches another
// process's namespaces. Listening ports are read from
// /proc/<pid>/net/tcp{,6} through the same handle: kernel text the
// sandbox cannot redirect (the host follows no path the sandbox controls).
//
// The sandbox's own ports are refused: the agent's and the in-sandbox
// ends of its channels (4096, 4100–4102). Without isolation there is no
// sandbox network to contain a connection, so previews are refused
// (sandbox.ErrPortsUnsupported).

// reservedPorts are the ports of the sandbox's own plumbing.
var reservedPorts = []int{jailAgentPort, jailGatewayPort, jailLLMPort, jailEgressPort}

// maxProcNetBytes bounds what is read of /proc/<pid>/net/tcp{,6} (a
// sandbox can open many sockets).
const maxProcNetBytes = 4 << 20

// portAccess are one sandbox's handles for previews (portsFor).
type portAccess struct {
	proc          *os.File // /proc/<reaper pid>
	userNS, netNS *os.File
	nsenter       string
	transport     *http.Transport

	// mu is held for reading while a handle's descriptor is in use (a
	// read through proc, a command started with the namespaces), so close
	// never releases a descriptor under a user: a closed number may be
	// reused at once by an unrelated file.
	mu     sync.RWMutex
	closed bool
}

// errPortsClosed: the sandbox stopped while its handles were wanted.
var errPortsClosed = fmt.Errorf("sandbox stopped: %w", sandbox.ErrNotFound)

// use runs f with the handles held open.
func (a *portAccess) use(f func() error) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return errPortsClosed
	}
	return f()
}

// enter is the command-line prefix that runs its arguments in the
// sandbox's user and network namespaces (and no other: the host's
// filesystem, processes and cgroup stay the caller's), with userNS and
// netNS as fds 3 and 4 of the command, which are closed before its
// arguments run. Entering the user namespace as its unprivileged uid
// leaves no capability after the exec. A terminal's bwrap runs behind
// it (terminal.go).
func (a *portAccess) enter() []string {
	return []string{a.nsenter, "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "--preserve-credentials", "--",
		"/bin/sh", "-c", `exec "$@" 3<&- 4<&-`, "sandbox-enter"}
}

func (a *portAccess) close() {
	a.transport.CloseIdleConnections()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	for _, f := range []*os.File{a.proc, a.userNS, a.netNS} {
		_ = f.Close()
	}
}

var _ sandbox.Ports = (*Provider)(nil)

// PortTarget implements sandbox.Ports.
func (p *Provider) PortTarget(ctx context.Context, sessionID, sandboxID string, port int) (*url.URL, http.RoundTripper, error) {
	if port < 1 || port > 65535 {
		return nil, nil, fmt.Errorf("local sandbox: port %d out of range", port)
	}
	if slices.Contains(reservedPorts, port) {
		return nil, nil, sandbox.ErrPortReserved
	}
	a, err := p.portsFor(sessionID, sandboxID)
	if err != nil {
		return nil, nil, err
	}
	return &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}, a.transport, nil
}

// ListeningPorts implements sandbox.Ports.
func (p *Provider) ListeningPorts(ctx context.Context, sessionID, sandboxID string) ([]int, error) {
	a, err := p.portsFor(sessionID, sandboxID)
	if err != nil {
		return nil, err
	}
	var all []byte
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		var b []byte
		err := a.use(func() (err error) {
			b, err = readAt(a.proc, name, maxProcNetBytes)
			return err
		})
		if errors.Is(err, syscall.ESRCH) || errors.Is(err, errPortsClosed) {
			return nil, fmt.Errorf("local sandbox: %s: %w", sandboxID, sandbox.ErrNotFound)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) { // no IPv6: no tcp6
			return nil, fmt.Errorf("local sandbox: listening ports of %s: %w", sandboxID, err)
		}
		all = append(all, b...)
	}
	return slices.DeleteFunc(sandbox.ParseProcNetTCP(all), func(port int) bool { return slices.Contains(reservedPorts, port) }), nil
}

// portsFor returns the live sandbox's preview handles, opening them at
// the first use.
func (p *Provider) portsFor(sessionID, sandboxID string) (*portAccess, error) {
	if p.jail == nil {
		return nil, sandbox.ErrPortsUnsupported
	}
	in := p.instanceFor(sessionID, sandboxID)
	if in == nil || !in.alive() {
		return nil, fmt.Errorf("local sandbox: %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopped {
		return nil, fmt.Errorf("local sandbox: %s: %w", sandboxID, sandbox.ErrNotFound)
	}
	if in.ports != nil {
		return in.ports, nil
	}
	a, err := p.openPorts(in.proc.Pid())
	if err != nil {
		return nil, fmt.Errorf("local sandbox: previews of %s: %w", sandboxID, err)
	}
	in.ports = a
	return a, nil
}

// openPorts opens the handles of the sandbox whose bwrap is pid outer.
func (p *Provider) openPorts(outer int) (*portAccess, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("previews need nsenter (util-linux): %w", err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("previews need setpriv (util-linux): %w", err)
	}
	kids := childrenOf(outer)
	if len(kids) != 1 {
		return nil, fmt.Errorf("%d sandbox processes under bwrap", len(kids))
	}
	dir, err := os.Open("/proc/" + strconv.Itoa(kids[0]))
	if err != nil {
		return nil, err
	}
	a := &portAccess{proc: dir, nsenter: nsenter}
	fail := func(err error) (*portAccess, error) {
		for _, f := range []*os.File{a.proc, a.userNS, a.netNS} {
			if f != nil {
				_ = f.Close()
			}
		}
		return nil, err
	}
	// Through the handle: the process it names is still bwrap's child.
	if ppid, err := parentAt(dir); err != nil || ppid != outer {
		return fail(fmt.Errorf("the sandbox's init is gone (%v)", err))
	}
	if a.userNS, err = openAt(dir, "ns/user"); err != nil {
		return fail(err)
	}
	if a.netNS, err = openAt(dir, "ns/net"); err != nil {
		return fail(err)
	}
	socat := p.jail.socat
	a.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return dialInNS(a, nsenter, setpriv, socat, port)
		},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // the client's context bounds a request
	}
	return a, nil
}

// dialInNS connects to 127.0.0.1:port in the sandbox's network namespace
// (see the file comment).
func dialInNS(a *portAccess, nsenter, setpriv, socat, port string) (net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: dial: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "preview-conn"), os.NewFile(uintptr(fds[1]), "preview-conn")
	defer theirs.Close()
	defer ours.Close()
	cmd := exec.Command(nsenter, "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "--preserve-credentials", "--",
		setpriv, "--no-new-privs", "--", socat, "-lf", "/dev/null", "STDIO", "TCP:127.0.0.1:"+port)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdin, cmd.Stdout = theirs, theirs
	cmd.ExtraFiles = []*os.File{a.userNS, a.netNS}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.use(cmd.Start); err != nil {
		return nil, fmt.Errorf("local sandbox: dial %s: %w", port, err)
	}
	go func() { _ = cmd.Wait() }()
	conn, err := net.FileConn(ours)
	if err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("local sandbox: dial %s: %w", port, err)
	}
	return conn, nil
}

// closePorts releases a stopped sandbox's preview handles.
func (in *instance) closePorts() {
	in.mu.Lock()
	a := in.ports
	in.ports = nil
	in.mu.Unlock()
	if a != nil {
		a.close()
	}
}
