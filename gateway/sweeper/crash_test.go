package sweeper_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/gateway/sweeper"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// childEnv selects the crash child mode of the test binary; the child reads
// its configuration from the other CRASH_* variables.
const childEnv = "SWEEPER_CRASH_CHILD"

func crashChildMode() bool { return os.Getenv(childEnv) != "" }

// recClient records the frames a hub sends; it never blocks.
type recClient struct {
	mu     sync.Mutex
	frames []map[string]any
}

func (c *recClient) Send(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	c.mu.Lock()
	c.frames = append(c.frames, m)
	c.mu.Unlock()
	return nil
}

func (c *recClient) Close(int, string) {}

// count returns how many frames of type typ satisfy pred (nil = any).
func (c *recClient) count(typ string, pred func(map[string]any) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, f := range c.frames {
		if f["type"] == typ && (pred == nil || pred(f)) {
			n++
		}
	}
	return n
}

// hubDeps are the hub settings of both gateway processes: short leases so
// the killed one's expire quickly.
func hubDeps(store *sessions.Store, prov sandbox.Provider, rdb *redis.Client, instance, llmURL string, log *slog.Logger) hub.Deps {
	return hub.Deps{
		Sessions: store, Provider: prov, Redis: rdb, InstanceID: instance, Log: log,
		GatewayURL: "http://gateway.test",
		LLM:        sandbox.LLM{ProviderID: "sim", BaseURL: llmURL + "/v1", APIKey: "sim-key", Model: "claude-sim"},
		OwnerTTL:   1500 * time.Millisecond, RenewEvery: 200 * time.Millisecond, RuntimeTTL: time.Second,
		TokenBatch: 20 * time.Millisecond, SSEHeartbeatTimeout: 30 * time.Second,
	}
}

// crashChild is "gateway process A": a hub manager with the local sandbox
// provider that starts the session's runtime, has the real agent answer a
// prompt, prints READY and then serves until it is killed.
func crashChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	pool, err := db.Open(ctx, os.Getenv("CRASH_DATABASE_URL"), 10)
	if err != nil {
		fail(err)
	}
	ropts, err := redis.ParseURL(os.Getenv("CRASH_REDIS_URL"))
	if err != nil {
		fail(err)
	}
	codec, err := schemas.NewCodec()
	if err != nil {
		fail(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	prov, err := local.New(local.Options{DataDir: os.Getenv("CRASH_DATA_DIR"), OpenCodeBin: os.Getenv("CRASH_OPENCODE_BIN"),
		PluginDir: os.Getenv("CRASH_PLUGIN_DIR"), Logger: log})
	if err != nil {
		fail(err)
	}
	m := hub.NewManager(hubDeps(&sessions.Store{Pool: pool, Codec: codec}, prov, redis.NewClient(ropts), "gw-a", os.Getenv("CRASH_LLM_URL"), log))
	p := &auth.Principal{Kind: auth.KindUser, UserID: os.Getenv("CRASH_USER"), OrgID: os.Getenv("CRASH_ORG"), Role: "member"}
	h, err := m.Hub(ctx, os.Getenv("CRASH_SESSION"))
	if err != nil {
		fail(err)
	}
	c := &recClient{}
	if _, err := h.Attach(ctx, c, p); err != nil {
		fail(err)
	}
	if err := h.Prompt(ctx, p, "[[script:bash]] Write hello.txt before the crash"); err != nil {
		fail(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for c.count(protocol.MsgMessageComplete, nil) == 0 {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("no message_complete"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("READY")
	select {} // serve until SIGKILL
}

// A gateway killed with SIGKILL: its session is marked orphaned by the
// sweeper once its leases expire, then another gateway process attaches,
// resumes it with the agent's conversation intact, and a prompt works.
func TestGatewayKilledSessionIsOrphanedAndResumesElsewhere(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(ctx, filepath.Join(filepath.Dir(file), "..", "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	llm := httptest.NewServer(llmsim.New(llmsim.Options{APIKey: "sim-key"}).Handler())
	t.Cleanup(llm.Close)
	dataDir := t.TempDir()
	id := sessionstest.New(t, e.pool, e.org, sessionstest.Options{CreatedBy: e.user, ModelID: "claude-sim", Title: "crash"})

	// Gateway process A.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1",
		"CRASH_DATABASE_URL="+testenv.DatabaseURL(t), "CRASH_REDIS_URL="+testenv.RedisURL(t),
		"CRASH_DATA_DIR="+dataDir, "CRASH_OPENCODE_BIN="+tools.Binary, "CRASH_PLUGIN_DIR="+tools.PluginDir,
		"CRASH_LLM_URL="+llm.URL, "CRASH_SESSION="+id, "CRASH_USER="+e.user, "CRASH_ORG="+e.org)
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	var ready atomic.Bool
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready.Store(true)
			}
		}
	}()
	testenv.Eventually(t, 3*time.Minute, "gateway A to run the session and the agent to answer", ready.Load)
	before := e.get(t, id)
	if before.Status != sessions.StatusRunning || before.SandboxID == nil || before.SandboxURL == nil || before.CodingAgentSessionID == nil {
		t.Fatalf("session before the crash: %+v", before)
	}
	if alive, _ := hub.RuntimeAlive(ctx, e.rdb, id); !alive {
		t.Fatal("gateway A holds no runtime lease")
	}

	if err := child.Process.Kill(); err != nil { // SIGKILL: no shutdown, no lease release
		t.Fatal(err)
	}
	_ = child.Wait()
	// The agent dies with its gateway (parent-death signal).
	testenv.Eventually(t, 30*time.Second, "gateway A's agent to die with it", func() bool {
		resp, err := http.Get(*before.SandboxURL + "/global/health")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	prov, err := local.New(local.Options{DataDir: dataDir, OpenCodeBin: tools.Binary, PluginDir: tools.PluginDir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)
	sw := sweeper.New(sweeper.Deps{Sessions: e.store, Redis: e.rdb, Provider: prov, Log: log, Grace: 100 * time.Millisecond})
	passes := 0
	testenv.Eventually(t, 30*time.Second, "the sweeper to pause the orphan", func() bool {
		if _, err := sw.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		passes++
		return e.get(t, id).Status == sessions.StatusPaused
	})
	orphaned := e.get(t, id)
	if orphaned.PauseReason == nil || *orphaned.PauseReason != sweeper.PauseReason || orphaned.SandboxID != nil {
		t.Fatalf("after the sweep: reason=%v sandbox=%v", orphaned.PauseReason, orphaned.SandboxID)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "sandboxes", id, "workspace")); err != nil {
		t.Fatalf("the orphan's workspace was not kept: %v", err)
	}
	t.Logf("orphan paused after %d passes", passes)

	// Gateway process B attaches: the session resumes.
	m := hub.NewManager(hubDeps(e.store, prov, e.rdb, "gw-b", llm.URL, log))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(sctx)
	})
	p := &auth.Principal{Kind: auth.KindUser, UserID: e.user, OrgID: e.org, Role: "member"}
	h, err := m.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c := &recClient{}
	start := time.Now()
	if _, err := h.Attach(ctx, c, p); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("measured: orphan resumed through gateway B in %s", time.Since(start))
	after := e.get(t, id)
	if after.Status != sessions.StatusRunning || after.PauseReason != nil || after.SandboxID == nil || *after.SandboxID == *before.SandboxID {
		t.Fatalf("after resume: status=%s reason=%v sandbox=%v (before %s)", after.Status, after.PauseReason, after.SandboxID, *before.SandboxID)
	}
	// The work survives: the file the agent wrote before the crash is in the
	// resumed sandbox's workspace.
	if b, err := os.ReadFile(filepath.Join(dataDir, "sandboxes", id, "workspace", "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("the agent's pre-crash work is gone: %q, %v", b, err)
	}
	// The agent's conversation carries over only when the agent's state
	// outlives its process (see the package report: OpenCode runs with an
	// in-memory database today).
	t.Logf("agent session before %s, after %s", *before.CodingAgentSessionID, *after.CodingAgentSessionID)
	// And a prompt works.
	if err := h.Prompt(ctx, p, "[[script:hello]] Say hello after the crash"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "message_complete after the resume", func() bool { return c.count(protocol.MsgMessageComplete, nil) > 0 })
	if n := c.count(protocol.MsgError, nil); n != 0 {
		t.Fatalf("%d error frames after the resume", n)
	}
}
