package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/migrations"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestFilesAreWellFormed(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != "0001" {
		t.Fatalf("migrations: %+v", all)
	}
}

// Replicas starting together apply each migration exactly once; later runs
// apply nothing.
func TestConcurrentUpAppliesOnceAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, testenv.EmptyDatabase(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	all, _ := migrations.All()

	var mu sync.Mutex
	appliedTotal := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			applied, err := migrations.Up(ctx, pool)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			appliedTotal += len(applied)
			mu.Unlock()
		})
	}
	wg.Wait()
	if appliedTotal != len(all) {
		t.Fatalf("applied %d migrations across replicas, want %d", appliedTotal, len(all))
	}
	again, err := migrations.Up(ctx, pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("second up applied %v, err %v", again, err)
	}
	states, err := migrations.Status(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.AppliedAt == nil || s.Modified {
			t.Fatalf("%s not applied cleanly: %+v", s.Version, s)
		}
	}
}

func TestStatusOnEmptyDatabaseListsAllPending(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, testenv.EmptyDatabase(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	states, err := migrations.Status(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.AppliedAt != nil {
			t.Fatalf("%s reported applied on an empty database", s.Version)
		}
	}
}

// Editing a migration after it was applied is reported, not ignored.
func TestChangedMigrationIsReported(t *testing.T) {
	ctx := context.Background()
	pool, err := db.Open(ctx, testenv.EmptyDatabase(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE schema_migrations SET checksum = 'edited' WHERE version = '0001'"); err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Up(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "0001_outbox.sql was changed after it was applied") {
		t.Fatalf("want a precise error, got %v", err)
	}
}
