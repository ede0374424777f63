// Package apptest starts the whole platform (`proliferate dev`) in a test:
// every listener on a free loopback port, the test's Postgres database and
// Redis, an embedded broker under a temporary directory. Tests outside
// app (the dashboard's browser tests) and inside it share it.
package apptest

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/testenv"
)

// prebound holds the gateway listener Config bound for each configuration
// until Start hands it to the app.
var prebound sync.Map // *config.Config → net.Listener

// Config is the configuration of a test's dev stack: every listener on a
// free port, data under dataDir, and sessions recorded (RUN_SESSIONS=record)
// unless overrides (name, value pairs) say otherwise. The gateway's
// public URL must be known before it starts: Config binds its listener on
// port 0 now and Start hands it to the app (App.Prebind), so the port
// stays the test's from here on.
func Config(t testing.TB, dataDir string, overrides ...string) *config.Config {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() }) // unless a started gateway closed it already
	gw := ln.Addr().String()
	env := map[string]string{
		"DATABASE_URL":         testenv.DatabaseURL(t),
		"REDIS_URL":            testenv.RedisURL(t),
		"BROKER_ADDR":          "127.0.0.1:0",
		"BROKER_DATA_DIR":      dataDir,
		"OPS_ADDR":             "127.0.0.1:0",
		"API_ADDR":             "127.0.0.1:0",
		"INGEST_ADDR":          "127.0.0.1:0",
		"GATEWAY_ADDR":         gw,
		"GATEWAY_PUBLIC_URL":   "http://" + gw,
		"SANDBOX_DATA_DIR":     filepath.Join(dataDir, "sandboxes"),
		"RUN_SESSIONS":         "record",
		"OUTBOX_POLL_INTERVAL": "50ms",
		"BLOB_DIR":             filepath.Join(dataDir, "blobs"),
		"LLM_PROXY_ADDR":       "127.0.0.1:0",
		// Platforms of one test process share its Redis database: each
		// counts its own sign-ups and sign-ins (a package's browser tests
		// sign up more people from 127.0.0.1 than one deployment allows
		// an address in an hour).
		"RATE_LIMIT_NAMESPACE": rand.Text(),
		// Billing has its own end-to-end tests; the others run with every
		// session allowed.
		"BILLING_ENABLED": "false",
	}
	for i := 0; i+1 < len(overrides); i += 2 {
		env[overrides[i]] = overrides[i+1]
	}
	cfg, err := config.LoadFrom(func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GatewayAddr == gw {
		prebound.Store(cfg, ln)
	}
	return cfg
}

// FreeAddr returns a loopback address with a port free right now. The port
// is closed again, so another process may take it before it is used: only
// for listeners this process cannot bind itself (another process's, a
// sandbox's); a listener of the app is bound first and handed over with
// App.Prebind, as Config and Start do for the gateway.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Running is a started platform.
type Running struct {
	App *app.App
	// Stop stops it (once; the test's cleanup calls it too).
	Stop func() error
	// Logs holds a shared platform's warnings and errors (nil for Start's
	// platforms: their logs go where the test said).
	Logs *testenv.LogBuffer
}

// Start runs `dev` with cfg until the test ends; logs go to logs (nil:
// discarded, errors only).
//
// The package's shared platforms (Shared) are stopped first: platforms of
// one test package share its database, and two running at once would
// drain each other's queues (the outbox relay publishing one platform's
// events to the other's broker, the mail sender sending its mail). The
// next test that asks for a shared platform starts it again.
func Start(t testing.TB, cfg *config.Config, logs io.Writer) Running {
	t.Helper()
	stopShared()
	level := "debug"
	if logs == nil {
		logs, level = io.Discard, "error"
	}
	return start(t, cfg, logs, level)
}

var (
	sharedMu sync.Mutex
	shared   = map[string]Running{}
)

// Shared returns the platform configured by overrides (name, value pairs,
// as for Config) that all of the package's tests asking for the same
// overrides share: the first one starts it and it runs until the package's
// tests end (testenv.Main stops it) or a test starts a platform of its own
// (Start). Starting a platform is most of a
// short test's time; tests on a shared one keep apart by tenant (each
// signs up its own people and organizations) and give rows unique names.
// A test that needs a setting of its own, or stops or restarts its
// platform, uses Start. The package's browser tests sign up many people
// from 127.0.0.1: a shared platform allows them (SIGNUP_RATE_LIMIT), and
// its logs (warnings and errors) are in Running.Logs.
func Shared(t testing.TB, overrides ...string) Running {
	t.Helper()
	key := strings.Join(overrides, "\x00")
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if r, ok := shared[key]; ok {
		return r
	}
	dir, err := os.MkdirTemp("", "apptest-shared-")
	if err != nil {
		t.Fatal(err)
	}
	testenv.AtExit(func() { _ = os.RemoveAll(dir) })
	pt := packageTB{t}
	cfg := Config(pt, filepath.Join(dir, "kafka"), append([]string{"SIGNUP_RATE_LIMIT", "100000"}, overrides...)...)
	logs := &testenv.LogBuffer{}
	r := start(pt, cfg, logs, "warn")
	r.Logs = logs
	shared[key] = r
	return r
}

// stopShared stops the package's running shared platforms.
func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for key, r := range shared {
		_ = r.Stop()
		delete(shared, key)
	}
}

// packageTB is the test that starts a shared platform, with its cleanups
// deferred to the end of the package's tests.
type packageTB struct{ testing.TB }

func (p packageTB) Cleanup(f func()) { testenv.AtExit(f) }

func start(t testing.TB, cfg *config.Config, logs io.Writer, level string) Running {
	t.Helper()
	a := app.New(cfg, obs.NewLogger(logs, level, "text"))
	if v, ok := prebound.LoadAndDelete(cfg); ok {
		if ln := v.(net.Listener); ln.Addr().String() == cfg.GatewayAddr {
			a.Prebind("GATEWAY_ADDR", ln)
		} else {
			_ = ln.Close() // the test moved the gateway elsewhere
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Dev(ctx) }()
	testenv.Eventually(t, 30*time.Second, "dev to start its ops endpoints", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev exited early: %v", err)
		default:
		}
		return a.OpsAddr() != ""
	})
	var stopped bool
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return Running{App: a, Stop: stop}
}
