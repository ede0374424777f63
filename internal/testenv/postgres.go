// Package testenv is the one test-environment helper: a real Kafka broker
// (in-process kfake) per test, a real Postgres database per test package and a
// real Redis database per test package, all from the services `make test`
// starts (DATABASE_URL, REDIS_URL).
package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/migrations"
)

var (
	pgOnce sync.Once
	pgPool *pgxpool.Pool
	pgURL  string
	pgName string
	pgErr  error
	inMain bool

	cleanupMu sync.Mutex
	cleanup   []func()
)

// Main runs a package's tests and then drops the package's database. Every
// package that uses Postgres or Redis calls it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	inMain = true
	code := m.Run()
	cleanupMu.Lock()
	fs := cleanup
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	os.Exit(code)
}

// AtExit registers f to run when Main has run the package's tests, before
// the package's database is dropped (functions registered later run
// first): the cleanup of what the package's tests share (a platform
// started once for all of them).
func AtExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanup = append(cleanup, f)
}

// DatabaseURL returns the URL of the package's database, creating and migrating
// it on first use.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	Postgres(t)
	return pgURL
}

// Postgres returns a pool on a database private to this test package, created
// from DATABASE_URL and migrated to the latest schema. Tests of one package
// share it; give rows test-unique ids.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	if !inMain {
		t.Fatal("testenv: call testenv.Main(m) from TestMain to use Postgres")
	}
	pgOnce.Do(func() { pgErr = createDatabase() })
	if pgErr != nil {
		t.Fatalf("testenv: %v", pgErr)
	}
	return pgPool
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

func createDatabase() error {
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		return fmt.Errorf("DATABASE_URL is not set: run tests with `make test`, which starts Postgres and Redis (scripts/devstack.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := db.Open(ctx, base, 2)
	if err != nil {
		return err
	}
	defer admin.Close()
	dropStale(ctx, admin)

	wd, _ := os.Getwd()
	pkg := unsafeName.ReplaceAllString(strings.ToLower(filepath.Base(wd)), "_")
	pgName = fmt.Sprintf("test_%s_%d_%04d", pkg, time.Now().Unix(), rand.IntN(10000))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgName); err != nil {
		return fmt.Errorf("create test database %s: %w", pgName, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	u.Path = "/" + pgName
	pgURL = u.String()
	pgPool, err = db.Open(ctx, pgURL, 50)
	if err != nil {
		return err
	}
	if _, err := migrations.Up(ctx, pgPool); err != nil {
		return err
	}
	AtExit(func() {
		pgPool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if admin, err := db.Open(ctx, base, 1); err == nil {
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgName+" WITH (FORCE)")
			admin.Close()
		}
	})
	return nil
}

// EmptyDatabase creates a database with no tables (not migrated) for tests of
// migrations themselves, dropped when the test ends, and returns its URL.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		t.Fatal("testenv: DATABASE_URL is not set: run tests with `make test`")
	}
	ctx := context.Background()
	admin, err := db.Open(ctx, base, 1)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer admin.Close()
	name := fmt.Sprintf("test_empty_%d_%06d", time.Now().Unix(), rand.IntN(1000000))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create %s: %v", name, err)
	}
	t.Cleanup(func() {
		if admin, err := db.Open(context.Background(), base, 1); err == nil {
			_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			admin.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: parse DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// dropStale removes test databases left by killed test runs (older than 2 h).
func dropStale(ctx context.Context, admin *pgxpool.Pool) {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'test\\_%'")
	if err != nil {
		return
	}
	var names []string
	for rows.Next() {
		var n string
		if rows.Scan(&n) == nil {
			names = append(names, n)
		}
	}
	rows.Close()
	cutoff := time.Now().Add(-2 * time.Hour).Unix()
	for _, n := range names {
		parts := strings.Split(n, "_")
		if len(parts) < 3 {
			continue
		}
		ts, err := strconv.ParseInt(parts[len(parts)-2], 10, 64)
		if err == nil && ts < cutoff {
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
		}
	}
}
