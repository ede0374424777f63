package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// reset gives each test an empty outbox (tests of this package share a database).
func reset(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `TRUNCATE outbox, outbox_dead_letters`); err != nil {
		t.Fatal(err)
	}
}

func pending(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Add validates before writing anything.
func TestAddRejectsMessagesWithoutTopic(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, outbox.Message{Topic: "ok", Value: []byte("a")}, outbox.Message{Value: []byte("b")})
	})
	if err == nil || !strings.Contains(err.Error(), "message 1 has no topic") {
		t.Fatalf("want a precise error, got %v", err)
	}
	if p := pending(t, pool); p != 0 {
		t.Fatalf("%d rows written by a rejected call", p)
	}
}

// Add refuses a record over its topic's limit before anything is written.
func TestAddRefusesOversizedRecords(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	ctx := context.Background()
	limit := topics.MaxRecordBytes(topics.RunsLifecycle)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx,
			outbox.Message{Topic: topics.RunsLifecycle, Key: "run-1", Value: []byte("fits")},
			outbox.Message{Topic: topics.RunsLifecycle, Key: "run-1", Value: make([]byte, limit)})
	})
	if _, ok := errors.AsType[*topics.RecordTooLargeError](err); !ok {
		t.Fatalf("Add of an oversized record = %v, want *topics.RecordTooLargeError", err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows written (%v), want none", rows, err)
	}
}
