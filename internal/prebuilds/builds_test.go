package prebuilds_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The build record's life with real Postgres: one build at a time per
// configuration (also under concurrent starts), a claim once, ready makes
// the snapshot the configuration's, failed keeps the previous snapshot
// usable, a build past its deadline fails, an unclaimed one is listed for
// the periodic pass, and another organization sees nothing.
func TestBuildLifecycle(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	org, other := runstest.Org(t, pool), runstest.Org(t, pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	b := &prebuilds.Builds{Pool: pool, Now: clock}
	var cfg, repo string
	if err := pool.QueryRow(ctx, `INSERT INTO configurations (org_id, name) VALUES ($1, 'c') RETURNING id::text`, org).Scan(&cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, org, cfg, "", time.Hour); !errors.Is(err, prebuilds.ErrNoRepos) {
		t.Fatalf("a configuration without repos: %v", err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name, default_branch) VALUES ($1, 'acme/app', 'main') RETURNING id::text`, org).Scan(&repo); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
		VALUES ($1, $2, $3, '.', 0)`, cfg, repo, org); err != nil {
		t.Fatal(err)
	}
	status := func() (st string, snap, errMsg *string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT snapshot_status, snapshot_id, snapshot_error FROM configurations WHERE id = $1`, cfg).Scan(&st, &snap, &errMsg); err != nil {
			t.Fatal(err)
		}
		return
	}

	if _, err := b.Start(ctx, other, cfg, "", time.Hour); !errors.Is(err, prebuilds.ErrNotFound) {
		t.Fatalf("another organization's configuration: %v", err)
	}
	// Concurrent starts: exactly one build.
	var wg sync.WaitGroup
	results := make([]error, 8)
	builds := make([]prebuilds.Build, 8)
	for i := range results {
		wg.Go(func() { builds[i], results[i] = b.Start(ctx, org, cfg, "", time.Hour) })
	}
	wg.Wait()
	var first prebuilds.Build
	started := 0
	for i, err := range results {
		switch {
		case err == nil:
			started++
			first = builds[i]
		case !errors.Is(err, prebuilds.ErrBuildRunning):
			t.Fatalf("start: %v", err)
		}
	}
	if started != 1 || first.Status != prebuilds.BuildBuilding || first.OrgID != org || !first.DeadlineAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("%d builds started: %+v", started, first)
	}
	if st, _, _ := status(); st != "building" {
		t.Fatalf("configuration %s while building", st)
	}
	if _, err := b.Get(ctx, other, first.ID); !errors.Is(err, prebuilds.ErrNotFound) {
		t.Fatalf("another organization's build: %v", err)
	}
	if _, err := b.List(ctx, other, cfg, 10, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff"); !errors.Is(err, prebuilds.ErrNotFound) {
		t.Fatalf("another organization's list: %v", err)
	}

	// Not claimed yet: the periodic pass lists it once the grace passed.
	if ids, err := b.Unclaimed(ctx, time.Minute); err != nil || len(ids) != 0 {
		t.Fatalf("unclaimed within the grace: %v %v", ids, err)
	}
	advance(2 * time.Minute)
	if ids, err := b.Unclaimed(ctx, time.Minute); err != nil || !contains(ids, first.ID) {
		t.Fatalf("unclaimed after the grace: %v %v", ids, err)
	}
	if ok, err := b.Claim(ctx, first.ID, "gw-1"); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if ok, err := b.Claim(ctx, first.ID, "gw-2"); err != nil || ok {
		t.Fatalf("a second claim: %v %v", ok, err)
	}
	if ids, _ := b.Unclaimed(ctx, time.Minute); contains(ids, first.ID) {
		t.Fatal("a claimed build is listed as unclaimed")
	}
	key := strings.Repeat("ab", 32)
	done, err := b.Finish(ctx, first.ID, "snap-1", "local", key)
	if err != nil || done.Status != prebuilds.BuildReady || *done.SnapshotID != "snap-1" || done.FinishedAt == nil {
		t.Fatalf("finish: %+v %v", done, err)
	}
	if _, err := b.Finish(ctx, first.ID, "snap-x", "local", key); !errors.Is(err, prebuilds.ErrBuildEnded) {
		t.Fatalf("finishing twice: %v", err)
	}
	if st, snap, _ := status(); st != "ready" || *snap != "snap-1" {
		t.Fatalf("configuration after the build: %s %v", st, snap)
	}
	r := &prebuilds.Resolver{Pool: pool}
	if s, ok, err := r.Current(ctx, org, cfg); err != nil || !ok || s.ID != "snap-1" || s.VersionKey != key || s.Provider != "local" {
		t.Fatalf("current after the build: %+v %v %v", s, ok, err)
	}

	// A second build: the previous snapshot stays usable while it runs and
	// after it failed.
	advance(time.Second)
	second, err := b.Start(ctx, org, cfg, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok, _ := r.Current(ctx, org, cfg); !ok || s.ID != "snap-1" {
		t.Fatalf("current while rebuilding: %+v %v", s, ok)
	}
	failed, err := b.Fail(ctx, second.ID, "service command \"deps\" exited with code 3")
	if err != nil || failed.Status != prebuilds.BuildFailed || !strings.Contains(*failed.Error, "code 3") {
		t.Fatalf("fail: %+v %v", failed, err)
	}
	if st, snap, msg := status(); st != "failed" || *snap != "snap-1" || !strings.Contains(*msg, "code 3") {
		t.Fatalf("configuration after a failed build: %s %v %v", st, snap, msg)
	}
	if s, ok, _ := r.Current(ctx, org, cfg); !ok || s.ID != "snap-1" {
		t.Fatalf("current after a failed build: %+v %v", s, ok)
	}

	// A third one whose gateway died: failed at its deadline.
	advance(time.Second)
	third, err := b.Start(ctx, org, cfg, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, third.ID, "gw-dead"); err != nil {
		t.Fatal(err)
	}
	if exp, err := b.Expire(ctx); err != nil || len(exp) != 0 {
		t.Fatalf("expired before the deadline: %v %v", exp, err)
	}
	advance(time.Minute)
	exp, err := b.Expire(ctx)
	if err != nil || len(exp) != 1 || exp[0].ID != third.ID || *exp[0].Error != prebuilds.ExpiredError {
		t.Fatalf("expire: %+v %v", exp, err)
	}
	if ok, _ := b.Claim(ctx, third.ID, "gw-late"); ok {
		t.Fatal("an expired build was claimed")
	}

	list, err := b.List(ctx, org, cfg, 2, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff")
	if err != nil || len(list) != 3 || list[0].ID != third.ID || list[1].ID != second.ID || list[2].ID != first.ID {
		t.Fatalf("list (limit 2 returns 3 to tell a next page): %+v %v", list, err)
	}
	rest, err := b.List(ctx, org, cfg, 2, list[1].StartedAt, list[1].ID)
	if err != nil || len(rest) != 1 || rest[0].ID != first.ID {
		t.Fatalf("next page: %+v %v", rest, err)
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
