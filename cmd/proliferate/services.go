package main

// `proliferate services` manages the long-running processes of a sandbox
// (dev servers, databases): the configuration's service commands, which the
// gateway starts after boot and resume, and any the agent starts itself.
//
// A small supervisor (`proliferate services daemon`) runs inside the
// sandbox, next to the agent, in its namespaces and cgroup (the local
// provider's sandbox init starts it), so services outlive the shell that
// started them and share the agent's localhost. The CLI talks to it over a
// unix socket in the sandbox home ($HOME/.proliferate/services/sock); the
// gateway reaches the same socket through the provider's Exec, which binds
// the same home. Each service runs as `bash -c COMMAND` in its own process
// group with the sandbox's environment; its output goes to
// $HOME/.proliferate/services/logs/NAME.log (outside the workspace, never
// committed). A service that exits is reported (status exited or failed and
// its exit code), never restarted on its own.

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

const servicesUsage = `Usage: proliferate services list|start|stop|restart|logs [NAME] [flags]

Manages the sandbox's long-running services (dev servers, databases). The
configuration's service commands start on their own when the sandbox boots
or resumes; these commands inspect and control them. A service runs in the
background with the sandbox's environment and survives your shell; its
output goes to ~/.proliferate/services/logs/NAME.log. A service that exits
is not restarted on its own: its status says exited (code 0) or failed.

  list [--json]                          the services, their status, pid and exit code
  start NAME [--command CMD] [--cwd DIR] start a service (a new one needs --command;
                                         --cwd is relative to the workspace)
  stop NAME                              stop it (SIGTERM to its process group, then SIGKILL)
  restart NAME                           stop and start it again with the same command
  logs NAME [--tail BYTES]               print its log (the last BYTES with --tail)

Exit status: 0 done, 1 failed, 2 bad usage.
`

// validServiceName: the names a configuration may save
// (repos.CheckServiceCommandName): 1–100 characters, no control characters,
// no "/" or "\", not "." or ".." (it names the log file).
func validServiceName(s string) bool {
	if s == "" || s == "." || s == ".." || utf8.RuneCountInString(s) > 100 || strings.ContainsAny(s, `/\`) {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// serviceSpec is a service to start.
type serviceSpec struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	Cwd     string `json:"cwd,omitempty"`
}

// serviceState is a service as `list --json` reports it.
type serviceState struct {
	serviceSpec
	Status    string    `json:"status"` // running | exited | failed | stopped
	PID       int       `json:"pid,omitempty"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Log       string    `json:"log"`
	// Tail is the end of the log when asked for (load, list --tail).
	Tail string `json:"tail,omitempty"`
}

// servicesRequest is one request to the supervisor.
type servicesRequest struct {
	Op       string        `json:"op"` // list | start | stop | restart | load
	Name     string        `json:"name,omitempty"`
	Command  string        `json:"command,omitempty"`
	Cwd      string        `json:"cwd,omitempty"`
	Services []serviceSpec `json:"services,omitempty"`
	Tail     int           `json:"tail,omitempty"`
}

type servicesResponse struct {
	Services []serviceState `json:"services"`
	Error    string         `json:"error,omitempty"`
}

func servicesDir(getenv func(string) string) string {
	home := getenv("HOME")
	if home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, ".proliferate", "services")
}

func servicesMain(args []string) int {
	return servicesRun(args, os.Stdin, os.Stdout, os.Stderr, os.Getenv)
}

func servicesRun(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	bad := func(msg string) int {
		fmt.Fprintf(stderr, "proliferate services: %s\n\n%s", msg, servicesUsage)
		return 2
	}
	if len(args) == 0 {
		return bad("a subcommand is required")
	}
	// An unknown subcommand is refused even with --help: the agent is never
	// told a command exists that does not.
	if !isHelpFlag(args[0]) && !slices.Contains([]string{"list", "start", "stop", "restart", "logs", "load", "daemon"}, args[0]) {
		return bad(fmt.Sprintf("unknown subcommand %q", args[0]))
	}
	if isHelpFlag(args[0]) || asksForHelp(args[1:]) {
		fmt.Fprint(stdout, servicesUsage)
		return 0
	}
	dir := servicesDir(getenv)
	op, rest := args[0], args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	fs := flag.NewFlagSet("services "+op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	command := fs.String("command", "", "")
	cwd := fs.String("cwd", "", "")
	tail := fs.Int("tail", 0, "")
	if err := fs.Parse(rest); err != nil {
		return bad(err.Error())
	}
	if fs.NArg() > 0 {
		return bad(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	needName := func() bool { return validServiceName(name) }
	req := servicesRequest{Op: op, Name: name, Command: *command, Cwd: *cwd, Tail: *tail}
	switch op {
	case "daemon":
		err := servicesDaemon(dir, getenv) // runs as long as the sandbox
		fmt.Fprintln(stderr, "proliferate services daemon:", err)
		return 1
	case "logs":
		if !needName() {
			return bad("logs needs a service NAME")
		}
		return servicesLogs(dir, name, *tail, stdout, stderr)
	case "list":
	case "start", "stop", "restart":
		if !needName() {
			return bad(op + " needs a service NAME")
		}
	case "load": // the gateway: a JSON array of {name, command, cwd} on stdin
		if err := json.NewDecoder(stdin).Decode(&req.Services); err != nil {
			return bad("load reads a JSON array of {name, command, cwd} on stdin: " + err.Error())
		}
		*asJSON = true
	default:
		return bad(fmt.Sprintf("unknown subcommand %q", op))
	}
	resp, err := servicesCall(dir, req)
	if err != nil {
		fmt.Fprintln(stderr, "proliferate services:", err)
		return 1
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(resp)
	} else if op == "list" || resp.Error == "" {
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTATUS\tPID\tEXIT\tCOMMAND")
		for _, s := range resp.Services {
			code := "-"
			if s.ExitCode != nil {
				code = fmt.Sprint(*s.ExitCode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, s.Status, s.PID, code, s.Command)
		}
		tw.Flush()
	}
	if resp.Error != "" {
		fmt.Fprintln(stderr, "proliferate services:", resp.Error)
		return 1
	}
	return 0
}

func servicesLogs(dir, name string, tail int, stdout, stderr io.Writer) int {
	f, err := os.Open(filepath.Join(dir, "logs", name+".log"))
	if err != nil {
		fmt.Fprintf(stderr, "proliferate services: no log for %q (never started?)\n", name)
		return 1
	}
	defer f.Close()
	if tail > 0 {
		if st, err := f.Stat(); err == nil && st.Size() > int64(tail) {
			_, _ = f.Seek(st.Size()-int64(tail), io.SeekStart)
		}
	}
	_, _ = io.Copy(stdout, f)
	return 0
}

// servicesCall sends req to the supervisor, waiting a few seconds for its
// socket when the sandbox has just started.
func servicesCall(dir string, req servicesRequest) (servicesResponse, error) {
	var resp servicesResponse
	sock := filepath.Join(dir, "sock")
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if conn, err = net.Dial("unix", sock); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the supervisor starts with the sandbox
	}
	if err != nil {
		return resp, fmt.Errorf("the services supervisor is not running in this sandbox (%s): %w", sock, err)
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return resp, err
	}
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&resp); err != nil {
		return resp, fmt.Errorf("the services supervisor did not answer: %w", err)
	}
	return resp, nil
}

// supervisor runs the sandbox's services.
type supervisor struct {
	dir, workspace string
	mu             sync.Mutex
	svcs           map[string]*service
}

type service struct {
	state   serviceState
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool
}

func servicesDaemon(dir string, getenv func(string) string) error {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return err
	}
	sock := filepath.Join(dir, "sock")
	_ = os.Remove(sock) // a previous sandbox's (a snapshot of the home)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	ws, _ := os.Getwd()
	if w := getenv("PROLIFERATE_WORKSPACE"); w != "" {
		ws = w
	}
	return (&supervisor{dir: dir, workspace: ws, svcs: map[string]*service{}}).run(ln)
}

// run serves the supervisor's socket until ln is closed.
func (s *supervisor) run(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		go s.serve(conn)
	}
}

func (s *supervisor) serve(conn net.Conn) {
	defer conn.Close()
	var req servicesRequest
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		return
	}
	var resp servicesResponse
	var err error
	switch req.Op {
	case "list":
	case "start":
		err = s.start(serviceSpec{Name: req.Name, Command: req.Command, Cwd: req.Cwd})
	case "restart":
		err = s.start(serviceSpec{Name: req.Name})
	case "stop":
		err = s.stop(req.Name)
	case "load":
		if req.Tail == 0 {
			req.Tail = 4096
		}
		var errs []error
		for _, sp := range req.Services {
			if sp.Command == "" {
				errs = append(errs, fmt.Errorf("%s: empty command", sp.Name))
				continue
			}
			errs = append(errs, s.start(sp))
		}
		err = errors.Join(errs...)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		resp.Error = err.Error()
	}
	resp.Services = s.list(req.Tail)
	_ = json.NewEncoder(conn).Encode(resp)
}

func (s *supervisor) list(tail int) []serviceState {
	s.mu.Lock()
	out := make([]serviceState, 0, len(s.svcs))
	for _, sv := range s.svcs {
		out = append(out, sv.state)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b serviceState) int { return strings.Compare(a.Name, b.Name) })
	if tail > 0 {
		for i := range out {
			out[i].Tail = readTail(out[i].Log, tail)
		}
	}
	return out
}

func readTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(n) {
		_, _ = f.Seek(st.Size()-int64(n), io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, int64(n)))
	return string(b)
}

// start (re)starts a service: a known one keeps its command unless sp
// gives a new one.
func (s *supervisor) start(sp serviceSpec) error {
	if !validServiceName(sp.Name) {
		return fmt.Errorf("bad service name %q", sp.Name)
	}
	s.mu.Lock()
	old := s.svcs[sp.Name]
	s.mu.Unlock()
	if old != nil {
		if sp.Command == "" {
			sp.Command, sp.Cwd = old.state.Command, old.state.Cwd
		}
		_ = s.stop(sp.Name)
	}
	if sp.Command == "" {
		return fmt.Errorf("no service %q: start a new one with --command", sp.Name)
	}
	dir := s.workspace
	if sp.Cwd != "" {
		dir = filepath.Join(s.workspace, filepath.Clean("/"+sp.Cwd))
	}
	logPath := filepath.Join(s.dir, "logs", sp.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	shell := "/bin/sh"
	if p, err := exec.LookPath("bash"); err == nil {
		shell = p // BASH_ENV: the values submitted during the session
	}
	cmd := exec.Command(shell, "-c", sp.Command)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sv := &service{cmd: cmd, done: make(chan struct{}),
		state: serviceState{serviceSpec: sp, Status: "running", StartedAt: time.Now().UTC(), Log: logPath}}
	if err := cmd.Start(); err != nil {
		code := 127
		sv.state.Status, sv.state.ExitCode = "failed", &code
		fmt.Fprintf(logf, "proliferate services: cannot start: %v\n", err)
		close(sv.done)
		s.mu.Lock()
		s.svcs[sp.Name] = sv
		s.mu.Unlock()
		return err
	}
	sv.state.PID = cmd.Process.Pid
	s.mu.Lock()
	s.svcs[sp.Name] = sv
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		s.mu.Lock()
		sv.state.ExitCode = &code
		switch {
		case sv.stopped:
			sv.state.Status = "stopped"
		case code == 0:
			sv.state.Status = "exited"
		default:
			sv.state.Status = "failed"
		}
		s.mu.Unlock()
		close(sv.done)
	}()
	return nil
}

func (s *supervisor) stop(name string) error {
	s.mu.Lock()
	sv := s.svcs[name]
	if sv != nil {
		sv.stopped = true
	}
	s.mu.Unlock()
	if sv == nil {
		return fmt.Errorf("no service %q", name)
	}
	if sv.cmd.Process == nil {
		return nil
	}
	select {
	case <-sv.done:
		return nil
	default:
	}
	_ = syscall.Kill(-sv.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-sv.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-sv.cmd.Process.Pid, syscall.SIGKILL)
		<-sv.done
	}
	return nil
}
