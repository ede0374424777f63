package e2b_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/e2b/e2bfake"
)

func newClient(t *testing.T, fake *e2bfake.Server, key string) *e2b.Client {
	t.Helper()
	c, err := e2b.NewClient(e2b.ClientOptions{APIKey: key, APIURL: fake.URL(), Domain: fake.Domain(),
		PortURL: fake.PortURL, RetryBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientLifecycle: create, get, list by metadata and state, pause,
// connect (resume: 201, running: 200), timeout, kill — E2B's routes,
// bodies and status codes.
func TestClientLifecycle(t *testing.T) {
	fake := e2bfake.StartForTest(t, nil, nil)
	c := newClient(t, fake, e2bfake.TestAPIKey)
	ctx := t.Context()

	info, err := c.Create(ctx, e2b.NewSandbox{TemplateID: e2bfake.TestTemplate, Timeout: 300, Secure: true,
		Metadata: map[string]string{"proliferate_session": "s1", "other": "a&b=c"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.SandboxID == "" || info.EnvdAccessToken == "" || info.EnvdVersion == "" {
		t.Fatalf("create answer %+v", info)
	}
	if _, err := c.Create(ctx, e2b.NewSandbox{TemplateID: e2bfake.TestTemplate, Metadata: map[string]string{"proliferate_session": "s2"}, Timeout: 300}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Get(ctx, info.SandboxID)
	if err != nil || d.State != e2b.StateRunning || d.Metadata["other"] != "a&b=c" || time.Until(d.EndAt) < 4*time.Minute {
		t.Fatalf("get: %+v %v", d, err)
	}
	list, err := c.List(ctx, map[string]string{"proliferate_session": "s1", "other": "a&b=c"}, e2b.StateRunning)
	if err != nil || len(list) != 1 || list[0].SandboxID != info.SandboxID {
		t.Fatalf("list by metadata: %+v %v", list, err)
	}

	// envd works on the running sandbox, with its access token.
	e := c.Envd(info)
	exit, out, _, err := e.Run(ctx, e2b.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo ok > f; pwd"}})
	if err != nil || exit != 0 || strings.TrimSpace(string(out)) != e2bfake.Home {
		t.Fatalf("run: %d %q %v", exit, out, err)
	}

	if err := c.Pause(ctx, info.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, info.SandboxID); !errors.Is(err, e2b.ErrConflict) {
		t.Fatalf("second pause: %v, want ErrConflict (409)", err)
	}
	if list, err := c.List(ctx, map[string]string{"proliferate_session": "s1"}, e2b.StateRunning); err != nil || len(list) != 0 {
		t.Fatalf("running list after pause: %+v %v", list, err)
	}
	if list, err := c.List(ctx, map[string]string{"proliferate_session": "s1"}, e2b.StatePaused); err != nil || len(list) != 1 {
		t.Fatalf("paused list: %+v %v", list, err)
	}
	// envd of a paused sandbox: the proxy's 502, not found.
	if _, _, _, err := e.Run(ctx, e2b.ProcessConfig{Cmd: "true"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("envd of a paused sandbox: %v, want ErrNotFound", err)
	}
	resumed, wasPaused, err := c.Connect(ctx, info.SandboxID, 10*time.Minute)
	if err != nil || !wasPaused || resumed.SandboxID != info.SandboxID {
		t.Fatalf("connect to the paused sandbox: %+v %v %v", resumed, wasPaused, err)
	}
	if data, err := c.Envd(resumed).ReadFile(ctx, e2bfake.Home+"/f"); err != nil || string(data) != "ok\n" {
		t.Fatalf("file after resume: %q %v", data, err)
	}
	if _, wasPaused, err := c.Connect(ctx, info.SandboxID, time.Minute); err != nil || wasPaused {
		t.Fatalf("connect to a running sandbox: %v %v, want 200", wasPaused, err)
	}
	if err := c.SetTimeout(ctx, info.SandboxID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Get(ctx, info.SandboxID); err != nil || time.Until(d.EndAt) > 31*time.Second {
		t.Fatalf("end after timeout: %+v %v", d, err)
	}
	if err := c.Kill(ctx, info.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, info.SandboxID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("get after kill: %v, want ErrNotFound", err)
	}
	if err := c.Kill(ctx, info.SandboxID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second kill: %v, want ErrNotFound", err)
	}
	var apiErr *e2b.APIError
	if _, _, err := c.Connect(ctx, "nosuch", time.Minute); !errors.As(err, &apiErr) || apiErr.Status != 404 || !strings.Contains(apiErr.Message, "nosuch") {
		t.Fatalf("connect unknown: %v", err)
	}
}

// TestClientErrors: a refused key is ErrAuth and not retried; 429 and
// 503 are retried (bounded) and honour Retry-After; a create that got
// 500 is not retried (it may have created a sandbox).
func TestClientErrors(t *testing.T) {
	fake := e2bfake.StartForTest(t, nil, nil)
	ctx := t.Context()
	bad := newClient(t, fake, "e2b_wrong")
	if _, err := bad.List(ctx, nil); !errors.Is(err, e2b.ErrAuth) {
		t.Fatalf("bad key: %v, want ErrAuth", err)
	}
	c := newClient(t, fake, e2bfake.TestAPIKey)
	fake.FailNext(http.MethodGet, "/v2/sandboxes", http.StatusServiceUnavailable, 2, "")
	before := fake.Calls(http.MethodGet, "/v2/sandboxes")
	if _, err := c.List(ctx, nil); err != nil {
		t.Fatalf("list after two 503s: %v", err)
	}
	if n := fake.Calls(http.MethodGet, "/v2/sandboxes") - before; n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
	fake.FailNext(http.MethodPost, "/sandboxes", http.StatusTooManyRequests, 1, "0")
	info, err := c.Create(ctx, e2b.NewSandbox{TemplateID: e2bfake.TestTemplate, Timeout: 60, Secure: true})
	if err != nil {
		t.Fatalf("create after a 429: %v", err)
	}
	defer c.Kill(ctx, info.SandboxID)
	fake.FailNext(http.MethodPost, "/sandboxes", http.StatusInternalServerError, 1, "")
	before = fake.Calls(http.MethodPost, "/sandboxes")
	var apiErr *e2b.APIError
	if _, err := c.Create(ctx, e2b.NewSandbox{TemplateID: e2bfake.TestTemplate}); !errors.As(err, &apiErr) || apiErr.Status != 500 {
		t.Fatalf("create with 500: %v", err)
	}
	if n := fake.Calls(http.MethodPost, "/sandboxes") - before; n != 1 {
		t.Fatalf("create retried after 500: %d calls", n)
	}
	// Retries are bounded.
	fake.FailNext(http.MethodGet, "/sandboxes/", http.StatusBadGateway, 5, "")
	before = fake.Calls(http.MethodGet, "/sandboxes/"+info.SandboxID)
	if _, err := c.Get(ctx, info.SandboxID); err == nil {
		t.Fatal("get through endless 502s succeeded")
	}
	if n := fake.Calls(http.MethodGet, "/sandboxes/"+info.SandboxID) - before; n != 5 {
		t.Fatalf("%d calls, want 1 + 4 retries", n)
	}
	if _, err := c.Create(ctx, e2b.NewSandbox{TemplateID: "no-such-template"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("unknown template: %v, want ErrNotFound", err)
	}
	// envd refuses a missing access token.
	noToken := c.Envd(e2b.SandboxInfo{SandboxID: info.SandboxID})
	if _, _, _, err := noToken.Run(ctx, e2b.ProcessConfig{Cmd: "true"}); !errors.Is(err, e2b.ErrAuth) {
		t.Fatalf("envd without token: %v, want ErrAuth", err)
	}
}

// TestEnvdWire: processes (stdout, stderr, exit code, stdin, env, cwd,
// a pty), files, and the {port}-{id}.{domain} host routing of E2B's proxy
// (a client that dials every host to the fake).
func TestEnvdWire(t *testing.T) {
	fake := e2bfake.StartForTest(t, nil, nil)
	ctx := t.Context()
	dial := fake.DialContextFor()
	c, err := e2b.NewClient(e2b.ClientOptions{APIKey: e2bfake.TestAPIKey, Domain: fake.Domain(),
		APIURL:     "http://api." + fake.Domain(),
		PortURL:    func(id string, port int) string { return fmt.Sprintf("http://%d-%s.%s", port, id, fake.Domain()) },
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dial}}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Create(ctx, e2b.NewSandbox{TemplateID: e2bfake.TestTemplate, Timeout: 120, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(ctx, info.SandboxID)
	e := c.Envd(info)
	exit, out, errOut, err := e.Run(ctx, e2b.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `printf "$A"; printf err >&2; pwd; exit 7`},
		Envs: map[string]string{"A": "x|"}, Cwd: "/tmp"})
	if err != nil || exit != 7 || string(out) != "x|/tmp\n" || string(errOut) != "err" {
		t.Fatalf("run: %d %q %q %v", exit, out, errOut, err)
	}
	if err := e.WriteFile(ctx, e2bfake.Home+"/dir/sub/file.txt", []byte("content")); err != nil {
		t.Fatal(err)
	}
	if data, err := e.ReadFile(ctx, "dir/sub/file.txt"); err != nil || string(data) != "content" {
		t.Fatalf("read relative to home: %q %v", data, err)
	}
	if _, err := e.ReadFile(ctx, "missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	// stdin, then close it.
	yes := true
	s, err := e.Start(ctx, e2b.StartRequest{Process: e2b.ProcessConfig{Cmd: "cat"}, Stdin: &yes, Tag: "cat-1"})
	if err != nil {
		t.Fatal(err)
	}
	procs, err := e.List(ctx)
	if err != nil || len(procs) != 1 || procs[0].Tag != "cat-1" || procs[0].PID != s.PID {
		t.Fatalf("list: %+v %v", procs, err)
	}
	if err := e.SendStdin(ctx, s.PID, []byte("echoed")); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseStdin(ctx, s.PID); err != nil {
		t.Fatal(err)
	}
	exit, out, _, err = s.Collect(ctx, e, 1<<20)
	if err != nil || exit != 0 || string(out) != "echoed" {
		t.Fatalf("cat: %d %q %v", exit, out, err)
	}
	// A process outlives its stream; a signal ends it.
	no := false
	s, err = e.Start(ctx, e2b.StartRequest{Process: e2b.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}, Stdin: &no})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if procs, err := e.List(ctx); err != nil || len(procs) != 1 {
		t.Fatalf("after disconnect: %+v %v", procs, err)
	}
	if err := e.Signal(ctx, s.PID, e2b.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := e.Signal(ctx, 999999, e2b.SIGKILL); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("signal to an unknown process: %v", err)
	}
}
