package builds

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func frame(t *testing.T, m protocol.AutoStartOutputMessage) []byte {
	t.Helper()
	m.Type = protocol.MsgAutoStartOutput
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The build waits for the boot's auto-start: other frames are ignored, a
// running service is not yet started, the watch's last frame (done) with
// no failure means started, a failed service fails the build at once with
// its exit code and its log tail redacted (left out without a redactor),
// and a hub that closes the build's client fails it.
func TestWaitServices(t *testing.T) {
	ctx := context.Background()
	code := 3
	const secret = "s3cr3t-database-password"
	red := actions.NewRedactor(secret)

	w := &watcher{wake: make(chan struct{}, 1)}
	_ = w.Send([]byte(`{"type":"init"}`))
	_ = w.Send(frame(t, protocol.AutoStartOutputMessage{Services: []protocol.AutoStartService{{Name: "web", Status: "running"}}}))
	done := make(chan error, 1)
	go func() { done <- w.waitServices(ctx, red) }()
	_ = w.Send(frame(t, protocol.AutoStartOutputMessage{Services: []protocol.AutoStartService{{Name: "web", Status: "running"}}, Done: true}))
	if err := <-done; err != nil {
		t.Fatalf("started services: %v", err)
	}

	w = &watcher{wake: make(chan struct{}, 1)}
	_ = w.Send(frame(t, protocol.AutoStartOutputMessage{Services: []protocol.AutoStartService{
		{Name: "web", Status: "running"},
		{Name: "deps", Status: "failed", ExitCode: &code, Output: "connecting with " + secret + "\nboom\n"},
	}}))
	err := w.waitServices(ctx, red)
	if err == nil || !strings.Contains(err.Error(), `"deps" exited with code 3`) || !strings.Contains(err.Error(), "boom") ||
		strings.Contains(err.Error(), secret) {
		t.Fatalf("failed service: %v", err)
	}
	if err := w.waitServices(ctx, nil); err == nil || strings.Contains(err.Error(), "boom") {
		t.Fatalf("failed service without a redactor: %v", err)
	}

	w = &watcher{wake: make(chan struct{}, 1)}
	_ = w.Send(frame(t, protocol.AutoStartOutputMessage{Services: []protocol.AutoStartService{}, Done: true, Error: "services: exit 1"}))
	if err := w.waitServices(ctx, red); err == nil || !strings.Contains(err.Error(), "exit 1") {
		t.Fatalf("auto-start error: %v", err)
	}

	w = &watcher{wake: make(chan struct{}, 1)}
	go w.Close(1000, "session ended")
	if err := w.waitServices(ctx, red); err == nil || !strings.Contains(err.Error(), "session ended") {
		t.Fatalf("closed: %v", err)
	}
}

// A build whose gateway died (claimed, never finished) is failed by any
// gateway's pass once its deadline passed, with the configuration's status;
// before the deadline the pass leaves it alone (real Postgres).
func TestPassFailsBuildsPastTheirDeadline(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	var cfg, repo string
	if err := pool.QueryRow(ctx, `INSERT INTO configurations (org_id, name) VALUES ($1, 'c') RETURNING id::text`, org).Scan(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name, default_branch) VALUES ($1, 'acme/app', 'main') RETURNING id::text`, org).Scan(&repo); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
		VALUES ($1, $2, $3, '.', 0)`, cfg, repo, org); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store := &prebuilds.Builds{Pool: pool, Now: clock}
	b, err := store.Start(ctx, org, cfg, "", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Claim(ctx, b.ID, "gateway-that-died"); err != nil || !ok {
		t.Fatalf("claim %v %v", ok, err)
	}
	builder := New(Deps{Builds: store, InstanceID: "gw-2", Every: time.Minute})
	defer builder.Close()
	builder.Pass(ctx)
	if got, _ := store.Get(ctx, org, b.ID); got.Status != prebuilds.BuildBuilding {
		t.Fatalf("before its deadline: %s", got.Status)
	}
	mu.Lock()
	now = now.Add(10 * time.Minute)
	mu.Unlock()
	builder.Pass(ctx)
	got, err := store.Get(ctx, org, b.ID)
	if err != nil || got.Status != prebuilds.BuildFailed || got.Error == nil || *got.Error != prebuilds.ExpiredError {
		t.Fatalf("after its deadline: %+v %v", got, err)
	}
	var st string
	if err := pool.QueryRow(ctx, `SELECT snapshot_status FROM configurations WHERE id = $1`, cfg).Scan(&st); err != nil || st != "failed" {
		t.Fatalf("configuration %s %v", st, err)
	}
}
