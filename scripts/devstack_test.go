package scripts_test

// These tests run the real scripts/devstack.sh against a private profile
// (own state dir under /var/tmp, own free ports) and always destroy it.
// They need Linux and either root (the script may apt-get install PostgreSQL
// 15 and Redis) or both already installed.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const pgBin = "/usr/lib/postgresql/15/bin"

var (
	portsMu   sync.Mutex
	usedPorts = map[int]bool{}
)

// freePort returns a loopback port that was free a moment ago and that no
// other test of this process has been given.
func freePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen on 127.0.0.1:0: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		portsMu.Lock()
		taken := usedPorts[port]
		usedPorts[port] = true
		portsMu.Unlock()
		if !taken {
			return port
		}
	}
	t.Fatal("no free port found")
	return 0
}

type stack struct {
	t         *testing.T
	script    string
	dir       string // PROLIFERATE_STACK_DIR
	pgPort    int
	redisPort int
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

func newStack(t *testing.T) *stack {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("devstack.sh targets Linux")
	}
	if testing.Short() {
		t.Skip("starts real PostgreSQL and Redis servers")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not found")
	}
	if os.Geteuid() != 0 {
		_, errPG := os.Stat(pgBin + "/postgres")
		_, errRedis := exec.LookPath("redis-server")
		if errPG != nil || errRedis != nil {
			t.Skip("PostgreSQL 15 or redis-server missing and not root (cannot install)")
		}
	}
	script, err := filepath.Abs("devstack.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir(): the postgres OS user must be able to reach the dir.
	base, err := os.MkdirTemp("/var/tmp", "proliferate-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &stack{
		t:         t,
		script:    script,
		dir:       filepath.Join(base, "stack"),
		pgPort:    freePort(t),
		redisPort: freePort(t),
	}
	t.Cleanup(func() {
		r := s.run("destroy")
		if r.code != 0 {
			t.Errorf("destroy exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		os.RemoveAll(base)
	})
	return s
}

// env is the environment for the script: ours, minus profile settings, plus
// the private profile.
func (s *stack) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PROLIFERATE_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"PROLIFERATE_STACK_DIR="+s.dir,
		"PROLIFERATE_PG_PORT="+strconv.Itoa(s.pgPort),
		"PROLIFERATE_REDIS_PORT="+strconv.Itoa(s.redisPort),
	)
	return append(env, extra...)
}

func (s *stack) runEnv(env []string, args ...string) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{s.script}, args...)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// A server that inherited the script's stdout/stderr would keep the pipes
	// open: make that an error instead of a hang.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.Exited():
		r.code = exitErr.ExitCode()
	default:
		s.t.Fatalf("devstack.sh %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, r.stdout, r.stderr)
	}
	return r
}

func (s *stack) run(args ...string) result {
	s.t.Helper()
	return s.runEnv(s.env(), args...)
}

// up runs `up`, requires success and the given outcome for both servers.
func (s *stack) up(pgHow, redisHow string) result {
	s.t.Helper()
	r := s.run("up")
	if r.code != 0 {
		s.t.Fatalf("up exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	wantPG := fmt.Sprintf("postgres 15 on 127.0.0.1:%d (data %s/pg) [%s]", s.pgPort, s.dir, pgHow)
	wantRedis := fmt.Sprintf("redis on 127.0.0.1:%d (dir %s/redis) [%s]", s.redisPort, s.dir, redisHow)
	if !strings.Contains(r.stdout, wantPG) || !strings.Contains(r.stdout, wantRedis) {
		s.t.Fatalf("up output:\n%s\nwant lines:\n%s\n%s\nstderr:\n%s", r.stdout, wantPG, wantRedis, r.stderr)
	}
	return r
}

// urls runs `env` and parses its export lines.
func (s *stack) urls() (databaseURL, redisURL string) {
	s.t.Helper()
	r := s.run("env")
	if r.code != 0 {
		s.t.Fatalf("env exited %d: %s", r.code, r.stderr)
	}
	vars := parseExports(s.t, r.stdout)
	return vars["DATABASE_URL"], vars["REDIS_URL"]
}

func parseExports(t *testing.T, out string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		rest, ok := strings.CutPrefix(line, "export ")
		name, value, ok2 := strings.Cut(rest, "=")
		if !ok || !ok2 {
			t.Fatalf("env: unexpected line %q", line)
		}
		if len(value) >= 2 && (value[0] == '\'' || value[0] == '"') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		vars[name] = value
	}
	if len(vars) != 2 || vars["DATABASE_URL"] == "" || vars["REDIS_URL"] == "" {
		t.Fatalf("env output %q: want exactly DATABASE_URL and REDIS_URL", out)
	}
	return vars
}

func (s *stack) checkURLs(databaseURL, redisURL string) {
	s.t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		s.t.Fatalf("DATABASE_URL %q: %v", databaseURL, err)
	}
	if u.Scheme != "postgres" || u.User.Username() != "proliferate" || u.Host != fmt.Sprintf("127.0.0.1:%d", s.pgPort) ||
		u.Path != "/proliferate" || u.Query().Get("sslmode") != "disable" {
		s.t.Fatalf("DATABASE_URL %q: unexpected", databaseURL)
	}
	u, err = url.Parse(redisURL)
	if err != nil {
		s.t.Fatalf("REDIS_URL %q: %v", redisURL, err)
	}
	if u.Scheme != "redis" || u.Host != fmt.Sprintf("127.0.0.1:%d", s.redisPort) || u.Path != "/0" {
		s.t.Fatalf("REDIS_URL %q: unexpected", redisURL)
	}
}

func (s *stack) psql(sql string) string {
	s.t.Helper()
	dbURL, _ := s.urls()
	out, err := exec.Command(pgBin+"/psql", "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", dbURL, "-c", sql).CombinedOutput()
	if err != nil {
		s.t.Fatalf("psql %q: %v\n%s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (s *stack) redisCLI(args ...string) string {
	s.t.Helper()
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.redisPort)}, args...)
	out, err := exec.Command("redis-cli", full...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (s *stack) checkServing() {
	s.t.Helper()
	if got := s.psql("SELECT current_user || '/' || current_database()"); got != "proliferate/proliferate" {
		s.t.Fatalf("psql: got %q, want proliferate/proliferate", got)
	}
	if out, err := exec.Command(pgBin+"/pg_isready", "-h", "127.0.0.1", "-p", strconv.Itoa(s.pgPort)).CombinedOutput(); err != nil {
		s.t.Fatalf("pg_isready: %v: %s", err, out)
	}
	if got := s.redisCLI("ping"); got != "PONG" {
		s.t.Fatalf("redis PING: got %q", got)
	}
	// 1024 databases: test packages each take their own DB number.
	if got := s.redisCLI("-n", "1023", "ping"); got != "PONG" {
		s.t.Fatalf("redis PING on db 1023: got %q", got)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// procState is the state letter of /proc/<pid>/stat, "" if gone.
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return ""
	}
	return string(data[i+2])
}

// waitDead polls until pid is gone or a zombie; returns the last state seen.
func waitDead(t *testing.T, pid int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := procState(pid)
		if st == "" || st == "Z" || st == "X" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive (state %s) after SIGKILL", pid, st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestUpThenReuse(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	cold := s.up("started", "started")
	warm := s.up("reused", "reused")
	t.Logf("up cold %v, warm %v", cold.took, warm.took)
	if warm.took > 3*time.Second {
		t.Errorf("up with both servers running took %v; want well under 1 s", warm.took)
	}
	if warm.stderr != "" {
		t.Errorf("reuse printed on stderr: %s", warm.stderr)
	}
	dbURL, redisURL := s.urls()
	s.checkURLs(dbURL, redisURL)
	s.checkServing()
	if r := s.run("status"); r.code != 0 {
		t.Fatalf("status exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestRecoverAfterKill9(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.up("started", "started")
	s.psql("CREATE TABLE survivor (v int); INSERT INTO survivor VALUES (42)")
	s.redisCLI("set", "k", "v")

	pgPid := readPid(t, filepath.Join(s.dir, "pg", "postmaster.pid"))
	redisPid := readPid(t, filepath.Join(s.dir, "redis.pid"))
	for _, pid := range []int{pgPid, redisPid} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %d: %v", pid, err)
		}
	}
	t.Logf("after kill -9: postgres pid %d state %q, redis pid %d state %q (Z = zombie window)",
		pgPid, waitDead(t, pgPid), redisPid, waitDead(t, redisPid))

	r := s.up("recovered", "recovered")
	t.Logf("up after kill -9 took %v", r.took)
	if got := s.psql("SELECT v FROM survivor"); got != "42" {
		t.Fatalf("table created before the kill: got %q, want 42", got)
	}
	s.checkServing()
	s.up("reused", "reused")
}

func TestRefusesForeignListener(t *testing.T) {
	t.Parallel()
	s := newStack(t)

	// The foreign listener takes a port of its own and the stack is told
	// to use it: listening again on a port freePort gave up would race
	// with any other socket of the machine taking it meanwhile.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s.pgPort = ln.Addr().(*net.TCPAddr).Port
	r := s.run("up")
	if r.code == 0 {
		t.Fatalf("up succeeded although 127.0.0.1:%d is held by the test\nstdout:\n%s", s.pgPort, r.stdout)
	}
	for _, want := range []string{"port " + strconv.Itoa(s.pgPort), "PROLIFERATE_PG_PORT"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not mention %q:\n%s", want, r.stderr)
		}
	}
	if _, err := exec.LookPath("ss"); err == nil {
		if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not name the holder (%s):\n%s", want, r.stderr)
		}
	}
	checkListenerAlive(t, ln)
	if r := s.run("status"); r.code != 1 {
		t.Errorf("status exited %d, want 1:\n%s", r.code, r.stdout)
	}
	ln.Close()

	// Same for redis' port; postgres starts, redis is refused.
	ln2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", s.redisPort))
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	r = s.run("up")
	if r.code == 0 {
		t.Fatalf("up succeeded although 127.0.0.1:%d is held by the test\nstdout:\n%s", s.redisPort, r.stdout)
	}
	if !strings.Contains(r.stdout, fmt.Sprintf("postgres 15 on 127.0.0.1:%d", s.pgPort)) {
		t.Errorf("postgres should have started:\n%s", r.stdout)
	}
	for _, want := range []string{"port " + strconv.Itoa(s.redisPort), "PROLIFERATE_REDIS_PORT"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not mention %q:\n%s", want, r.stderr)
		}
	}
	checkListenerAlive(t, ln2)
}

// checkListenerAlive proves ln still accepts connections.
func checkListenerAlive(t *testing.T, ln net.Listener) {
	t.Helper()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("foreign listener %s no longer reachable: %v", ln.Addr(), err)
	}
	c.Close()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("foreign listener %s: accept: %v", ln.Addr(), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("foreign listener %s did not accept", ln.Addr())
	}
}

func TestDownStatusUp(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.up("started", "started")
	s.psql("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('yes')")
	if r := s.run("status"); r.code != 0 {
		t.Fatalf("status exited %d:\n%s", r.code, r.stdout)
	}

	if r := s.run("down"); r.code != 0 {
		t.Fatalf("down exited %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := s.run("status")
	if r.code != 1 {
		t.Fatalf("status after down exited %d, want 1:\n%s", r.code, r.stdout)
	}
	if !strings.Contains(r.stdout, "postgres 15: down") || !strings.Contains(r.stdout, "redis: down") {
		t.Errorf("status after down:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "pg", "PG_VERSION")); err != nil {
		t.Fatalf("down removed the data: %v", err)
	}
	if r := s.run("down"); r.code != 0 {
		t.Fatalf("second down exited %d:\n%s", r.code, r.stderr)
	}

	s.up("started", "started")
	if got := s.psql("SELECT v FROM kept"); got != "yes" {
		t.Fatalf("data after down/up: got %q", got)
	}
	s.checkServing()
	if r := s.run("status"); r.code != 0 {
		t.Fatalf("status exited %d:\n%s", r.code, r.stdout)
	}
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const n = 3
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = s.run("up") })
	}
	wg.Wait()
	var started, reused int
	for _, r := range results {
		if r.code != 0 {
			t.Fatalf("concurrent up exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		started += strings.Count(r.stdout, "[started]")
		reused += strings.Count(r.stdout, "[reused]")
	}
	if started != 2 || reused != 2*(n-1) {
		t.Fatalf("want each server started once and reused otherwise; got %d started, %d reused", started, reused)
	}
	s.checkServing()
}

func TestEnvProfiles(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("devstack.sh targets Linux")
	}
	script, err := filepath.Abs("devstack.sh")
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"PATH=" + os.Getenv("PATH")}
	for _, tc := range []struct {
		env        []string
		pg, redis  string
		profileDir string
	}{
		{nil, "15432", "16379", "/var/tmp/proliferate/dev"},
		{[]string{"CI=true"}, "25432", "26379", "/var/tmp/proliferate/ci"},
		{[]string{"PROLIFERATE_STACK=ci"}, "25432", "26379", "/var/tmp/proliferate/ci"},
		{[]string{"CI=true", "PROLIFERATE_PG_PORT=1234", "PROLIFERATE_REDIS_PORT=5678"}, "1234", "5678", ""},
	} {
		cmd := exec.Command("bash", script, "env")
		cmd.Env = append(append([]string{}, base...), tc.env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("env %v: %v", tc.env, err)
		}
		vars := parseExports(t, string(out))
		wantDB := "postgres://proliferate@127.0.0.1:" + tc.pg + "/proliferate?sslmode=disable"
		wantRedis := "redis://127.0.0.1:" + tc.redis + "/0"
		if vars["DATABASE_URL"] != wantDB || vars["REDIS_URL"] != wantRedis {
			t.Errorf("env %v: got %v, want %s and %s", tc.env, vars, wantDB, wantRedis)
		}
		// eval-ability: the values must survive a shell round trip.
		sh := exec.Command("bash", "-c", string(out)+`printf '%s\n%s\n' "$DATABASE_URL" "$REDIS_URL"`)
		sh.Env = cmd.Env
		got, err := sh.Output()
		if err != nil || string(got) != wantDB+"\n"+wantRedis+"\n" {
			t.Errorf("eval of env output %v: got %q (%v)", tc.env, got, err)
		}
		if tc.profileDir != "" {
			st := exec.Command("bash", script, "status")
			st.Env = cmd.Env
			so, _ := st.Output()
			if !strings.Contains(string(so), "state dir "+tc.profileDir) {
				t.Errorf("status %v: want state dir %s in\n%s", tc.env, tc.profileDir, so)
			}
		}
	}
}
