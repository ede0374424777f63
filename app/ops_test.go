package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/obs"
)

func loadConfig(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.LoadFrom(func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startOps builds and runs the ops role of role in its own App (as its own
// process would) and returns where it listens; the role stops with the test.
func startOps(t *testing.T, cfg *config.Config, role string) string {
	t.Helper()
	a := app.New(cfg, obs.NewLogger(io.Discard, "error", "text"))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := a.OpsRole(role)(ctx)
	if err != nil {
		cancel()
		t.Fatalf("ops of %s: %v", role, err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ops of %s stopped with %v", role, err)
		}
		a.Close()
	})
	return a.OpsAddr()
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// Split roles on one machine with the default configuration (no OPS_ADDR)
// each serve their ops endpoints, on their own documented port, at the
// same time; dev keeps 9464. The second role used to fail on a busy 9464.
func TestSplitRolesServeOpsSideBySideWithTheDefaults(t *testing.T) {
	cfg := loadConfig(t, nil)
	want := map[string]int{}
	for _, rp := range config.OpsPorts() {
		want[rp.Role] = rp.Port
	}
	if want["dev"] != 9464 {
		t.Fatalf("dev's ops port is %d, want 9464", want["dev"])
	}
	for _, role := range []string{"api", "ingest", "gateway", "worker"} {
		addr := startOps(t, cfg, role)
		if addr != "127.0.0.1:"+strconv.Itoa(want[role]) {
			t.Fatalf("%s serves ops on %s, want port %d", role, addr, want[role])
		}
	}
	for _, role := range []string{"api", "ingest", "gateway", "worker"} {
		if code := healthz(t, "127.0.0.1:"+strconv.Itoa(want[role])); code != http.StatusOK {
			t.Fatalf("%s /healthz answered %d", role, code)
		}
	}
}

// A set OPS_ADDR wins over the role's default.
func TestExplicitOpsAddrIsHonoured(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	explicit := ln.Addr().String()
	ln.Close()
	cfg := loadConfig(t, map[string]string{"OPS_ADDR": explicit})
	if addr := startOps(t, cfg, "api"); addr != explicit {
		t.Fatalf("api serves ops on %s, want OPS_ADDR=%s", addr, explicit)
	}
	if code := healthz(t, explicit); code != http.StatusOK {
		t.Fatalf("/healthz answered %d", code)
	}
	// Two roles given the same explicit address: the second says which
	// address and why instead of a bare "address in use".
	a := app.New(cfg, obs.NewLogger(io.Discard, "error", "text"))
	defer a.Close()
	if _, err := a.OpsRole("gateway")(context.Background()); err == nil {
		t.Fatal("a second ops server started on the same OPS_ADDR")
	} else if got := err.Error(); !strings.Contains(got, explicit) || !strings.Contains(got, "OPS_ADDR") {
		t.Fatalf("error %q", got)
	}
}
