package db

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PassLock takes the session-level advisory lock key on a pooled
// connection, for work that one replica at a time does (sweeps, cleaners,
// billing jobs). ok is false, with nothing to release, when another replica
// holds it. release unlocks with a fresh context (the lock must go even
// when ctx ended) and, should unlocking fail, closes the connection, which
// ends the session and its lock, before handing it back to the pool.
func PassLock(ctx context.Context, pool *pgxpool.Pool, key int64) (conn *pgxpool.Conn, release func(), ok bool, err error) {
	conn, err = pool.Acquire(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("acquire lock connection: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, nil, false, fmt.Errorf("advisory lock %d: %w", key, err)
	}
	if !ok {
		conn.Release()
		return nil, nil, false, nil
	}
	return conn, func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, true, nil
}

// LockKey is the advisory lock key of a name (FNV-1a, 64 bits).
func LockKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}
