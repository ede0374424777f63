// Package ratelimit counts requests per key in Redis, so limits hold across
// every API replica (the original system's limits were per process).
package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limiter is a fixed-window counter: at most Limit hits per Window per key.
type Limiter struct {
	rdb    *redis.Client
	prefix string
	limit  int64
	window time.Duration
}

// New returns a limiter whose keys start with prefix (one per protected action).
func New(rdb *redis.Client, prefix string, limit int, window time.Duration) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix, limit: int64(limit), window: window}
}

// script increments the window's counter, sets its expiry on first hit, and
// returns the count and the remaining milliseconds, atomically.
var script = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {n, redis.call('PTTL', KEYS[1])}`)

// Allow counts a hit for key. When the limit is exceeded it returns false and
// how long until the window resets.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, time.Duration, error) {
	res, err := script.Run(ctx, l.rdb, []string{l.key(key)}, l.window.Milliseconds()).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("rate limit %s: %w", l.prefix, err)
	}
	if res[0] > l.limit {
		return false, time.Duration(max(res[1], 1)) * time.Millisecond, nil
	}
	return true, 0, nil
}

// undoScript takes one hit back, never below zero, keeping the expiry.
var undoScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) end
return 0`)

// Undo takes back one hit counted for key (an attempt that turned out not to
// count, such as a successful login against a failures-only limit).
func (l *Limiter) Undo(ctx context.Context, key string) error {
	if err := undoScript.Run(ctx, l.rdb, []string{l.key(key)}).Err(); err != nil {
		return fmt.Errorf("rate limit %s: %w", l.prefix, err)
	}
	return nil
}

// Reset forgets key's count.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := l.rdb.Del(ctx, l.key(key)).Err(); err != nil {
		return fmt.Errorf("rate limit %s: %w", l.prefix, err)
	}
	return nil
}

func (l *Limiter) key(k string) string { return fmt.Sprintf("ratelimit:%s:%s", l.prefix, k) }
