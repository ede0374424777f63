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
	res, err := script.Run(ctx, l.rdb, []string{fmt.Sprintf("ratelimit:%s:%s", l.prefix, key)}, l.window.Milliseconds()).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("rate limit %s: %w", l.prefix, err)
	}
	if res[0] > l.limit {
		return false, time.Duration(max(res[1], 1)) * time.Millisecond, nil
	}
	return true, 0, nil
}
