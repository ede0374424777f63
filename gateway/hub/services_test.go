package hub_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// service finds the named service in an auto_start_output frame.
func service(f map[string]any, name string) map[string]any {
	svcs, _ := f["services"].([]any)
	for _, s := range svcs {
		if m, _ := s.(map[string]any); m["name"] == name {
			return m
		}
	}
	return nil
}

// The configuration's service commands start on their own at boot and
// again after a resume, inside the real bubblewrap sandbox under the real
// CLI's supervisor: auto_start_output frames report a running server and a
// command that exited (status failed, exit code 3, its output), and
// run_auto_start restarts them on request; a client attaching later gets
// the last report.
func TestServiceCommandsStartAtBootAndResume(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})
	sh := sandboxtest.Shared(t)

	cli := sandboxtest.CLI(t)
	prov, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: sh.Tools.Binary, PluginDir: sh.Tools.PluginDir,
		CLIPath: cli, Isolation: local.IsolationBwrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	store := &repos.Store{Pool: e.pool, Now: time.Now}
	cfg, err := store.CreateConfiguration(ctx, e.org, e.user, repos.ConfigurationInput{Name: "svc", ServiceCommands: []repos.ServiceCommand{
		{Name: "web", Command: fmt.Sprintf("echo web-up; exec python3 -m http.server %d --bind 127.0.0.1", port)},
		{Name: "oneshot", Command: "echo oneshot-ran; exit 3"},
	}})
	if err != nil {
		t.Fatal(err)
	}

	d := e.deps(unique("gw-"))
	d.Provider = prov
	d.LLM = sh.LLM
	d.SSEHeartbeatTimeout = 30 * time.Second
	d.Services = hub.RepoServices{Store: store}
	logs := &testenv.LogBuffer{}
	d.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "hub: service commands") || strings.Contains(l, "hub: auto-start") {
				t.Logf("measured: %s", l)
			}
		}
	})
	m := e.manager(t, d)
	id := e.session(t, sessionstest.Options{ModelID: sh.LLM.Model, Title: "services", ConfigurationID: cfg.ID})

	waitServices := func(c interface {
		has(string, func(map[string]any) bool) bool
	}, trigger string) {
		t.Helper()
		testenv.Eventually(t, 90*time.Second, "auto_start_output: web running, oneshot failed with exit 3", func() bool {
			return c.has(protocol.MsgAutoStartOutput, func(f map[string]any) bool {
				w, o := service(f, "web"), service(f, "oneshot")
				return f["trigger"] == trigger && w != nil && o != nil && w["status"] == "running" &&
					o["status"] == "failed" && o["exit_code"] == float64(3) && strings.Contains(o["output"].(string), "oneshot-ran")
			})
		})
	}
	h, c := attach(t, m, id, e.principal())
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitServices(c, "boot")
	list := func() string {
		t.Helper()
		s := e.get(t, id)
		res, err := prov.Exec(ctx, *s.SandboxID, sandbox.ExecCommand{Args: []string{"proliferate", "services", "list"}, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("services list: %v %s", err, res.Stderr)
		}
		return string(res.Stdout)
	}
	if out := list(); !strings.Contains(out, "web") || !strings.Contains(out, "running") {
		t.Fatalf("services list:\n%s", out)
	}

	// run_auto_start restarts them; only for who may change the session.
	h.HandleClientMessage(ctx, c, &auth.Principal{Kind: auth.KindUser, UserID: e.user, OrgID: unique("other-org-")}, []byte(`{"type":"run_auto_start"}`))
	c.wait(t, protocol.MsgError, func(f map[string]any) bool { return f["code"] == "forbidden" })
	h.HandleClientMessage(ctx, c, e.principal(), []byte(`{"type":"run_auto_start"}`))
	waitServices(c, protocol.ClientRunAutoStart)
	// A client that attaches later gets the services' latest state right
	// after init, without waiting for the next change.
	_, late := attach(t, m, id, e.principal())
	if !late.has(protocol.MsgAutoStartOutput, func(f map[string]any) bool {
		return f["trigger"] == protocol.ClientRunAutoStart && service(f, "web") != nil
	}) {
		t.Fatalf("a client attaching after auto-start got no auto_start_output with init: %v", late.all())
	}

	// Resume: a new sandbox from the pause snapshot starts them again.
	if err := h.Pause(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if s := e.get(t, id); s.Status != sessions.StatusPaused {
		t.Fatalf("after pause: %+v", s)
	}
	h, c = attach(t, m, id, e.principal())
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitServices(c, "boot")
}
