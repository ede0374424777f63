package db

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Listen keeps a connection of its own (configured as pool's, outside it)
// LISTENing on channel until ctx ends, and signals wake, never blocking, on
// every notification and after each connect, since notifications sent while
// it was down are lost. A lost connection is reopened after a backoff (100 ms
// doubling to 30 s) and logged; whoever waits on wake polls meanwhile. up,
// when not nil, is told when the connection is listening (true) and when it
// is lost (false).
func Listen(ctx context.Context, pool *pgxpool.Pool, channel string, wake chan<- struct{}, log *slog.Logger, up func(bool)) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if up == nil {
		up = func(bool) {}
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := listenOnce(ctx, pool, channel, signal, func() { up(true); backoff = 100 * time.Millisecond })
		up(false)
		if ctx.Err() != nil {
			return
		}
		log.Warn("listen connection lost; polling until it reconnects", "channel", channel, "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func listenOnce(ctx context.Context, pool *pgxpool.Pool, channel string, signal, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}
