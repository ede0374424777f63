// Package migrations holds the ordered SQL migrations of the platform's
// Postgres schema, embedded in the binary, and applies them.
//
// Files are named NNNN_name.sql and applied in order, each in its own
// transaction, under a Postgres advisory lock so replicas starting together
// cannot apply one twice. An applied migration's checksum is recorded; editing
// a file after it was applied is reported instead of silently ignored.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed sql/*.sql
var files embed.FS

// lockID is the advisory lock key serialising migrators ("proliferate-migrate").
const lockID int64 = 0x70726f6c6d6967

// Migration is one SQL file.
type Migration struct {
	Version  string // NNNN
	Name     string
	SQL      string
	Checksum string
}

// State is a migration with its applied time, nil when pending.
type State struct {
	Migration
	AppliedAt *time.Time
	// Modified is true when the applied checksum differs from the file's.
	Modified bool
}

// All returns the embedded migrations in order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		version, name, ok := strings.Cut(base, "_")
		if !ok || len(version) != 4 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", e.Name())
		}
		body, err := files.ReadFile("sql/" + e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{version, name, string(body), hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %s", out[i].Version)
		}
	}
	return out, nil
}

const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    text PRIMARY KEY,
	name       text NOT NULL,
	checksum   text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// Up applies every pending migration and returns the ones it applied. Running
// it again applies nothing.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Migration, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID) }()
	if _, err := conn.Exec(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	states, err := status(ctx, conn.Conn(), all)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for _, s := range states {
		if s.Modified {
			return applied, fmt.Errorf("migrate: %s_%s.sql was changed after it was applied; add a new migration instead", s.Version, s.Name)
		}
		if s.AppliedAt != nil {
			continue
		}
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, s.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", s.Version, s.Name, s.Checksum)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migrate: apply %s_%s.sql: %w", s.Version, s.Name, err)
		}
		applied = append(applied, s.Migration)
	}
	return applied, nil
}

// Status lists every migration with whether and when it was applied.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]State, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	return status(ctx, conn.Conn(), all)
}

func status(ctx context.Context, conn *pgx.Conn, all []Migration) ([]State, error) {
	applied := map[string]struct {
		at  time.Time
		sum string
	}{}
	rows, err := conn.Query(ctx, "SELECT version, checksum, applied_at FROM schema_migrations")
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "42P01" {
		rows = nil // no table yet: nothing applied
	} else if err != nil {
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	if rows != nil {
		for rows.Next() {
			var v, sum string
			var at time.Time
			if err := rows.Scan(&v, &sum, &at); err != nil {
				return nil, err
			}
			applied[v] = struct {
				at  time.Time
				sum string
			}{at, sum}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
	}
	out := make([]State, len(all))
	for i, m := range all {
		out[i] = State{Migration: m}
		if a, ok := applied[m.Version]; ok {
			at := a.at
			out[i].AppliedAt = &at
			out[i].Modified = a.sum != m.Checksum
		}
	}
	return out, nil
}
