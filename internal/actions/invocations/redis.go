package invocations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/actions"
)

// Redis keys: the per-session sliding window of recent invocations
// (shared by every gateway instance) and the original params of a pending
// invocation whose stored params were redacted or cut.
const (
	rateKeyPrefix   = "ratelimit:actions:window:"
	paramsKeyPrefix = "actions:params:"
)

// RateWindow is the window RatePerMinute counts in.
const RateWindow = time.Minute

// RateLimitError is the ErrRateLimited of one refused invocation:
// RetryAfter is when the oldest call of the window leaves it (so a retry
// then is accepted unless others took the slot first).
type RateLimitError struct{ RetryAfter time.Duration }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%v; retry in %s", ErrRateLimited, e.RetryAfter)
}

// Is makes errors.Is(err, ErrRateLimited) hold.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// slidingWindow is an exact sliding-window log: a sorted set of the
// accepted calls' times (ms) per session. In one atomic step it drops the
// calls older than the window, and either records this call (fewer than
// the limit remain) or refuses it and returns how long until the oldest
// remaining call leaves the window. Refused calls are not recorded. Every
// accepted call therefore has at most limit accepted calls in the window
// ending at it, on any number of gateways (the script runs atomically in
// Redis; the time is the caller's clock, so gateways should keep NTP time).
//
//	KEYS[1] the session's set; ARGV: now ms, window ms, limit, unique member
//	returns {1, 0} accepted, {0, retry-after ms} refused
var slidingWindow = redis.NewScript(`
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return {1, 0}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local wait = tonumber(oldest[2]) + window - now
if wait < 1 then wait = 1 end
return {0, wait}
`)

// allow records one invocation of the session in the sliding window and
// returns a *RateLimitError when RatePerMinute calls were accepted in the
// last RateWindow. Without Redis, or when Redis fails, the invocation is
// allowed (the limit protects the external services from a runaway agent;
// losing Redis must not stop every agent) and the failure is logged.
func (s *Svc) allow(ctx context.Context, sessionID string) error {
	if s.d.Redis == nil {
		return nil
	}
	now := s.now()
	member := strconv.FormatInt(now.UnixNano(), 36) + "-" + strconv.FormatUint(rand.Uint64(), 36)
	res, err := slidingWindow.Run(ctx, s.d.Redis, []string{rateKeyPrefix + sessionID},
		now.UnixMilli(), RateWindow.Milliseconds(), RatePerMinute, member).Int64Slice()
	if err != nil || len(res) != 2 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.d.Log.WarnContext(ctx, "action rate limit unavailable; allowing", "session_id", sessionID, "error", err)
		return nil
	}
	if res[0] == 1 {
		return nil
	}
	return &RateLimitError{RetryAfter: time.Duration(res[1]) * time.Millisecond}
}

// keepParams stores the original params of a pending invocation until it
// can no longer be approved (ttl plus a minute). Called inside the
// insert's transaction: failing it rolls the invocation back.
func (s *Svc) keepParams(ctx context.Context, id string, params json.RawMessage, ttl time.Duration) error {
	if s.d.Redis == nil {
		return nil // approval then fails cleanly (originalParams)
	}
	if err := s.d.Redis.Set(ctx, paramsKeyPrefix+id, []byte(params), ttl+time.Minute).Err(); err != nil {
		return fmt.Errorf("keep params of invocation %s: %w", id, err)
	}
	return nil
}

var errParamsLost = errors.New("invocations: original params lost")

// originalParams returns the params to execute an approved invocation
// with: the kept originals, or the stored ones when they were stored
// unchanged (nothing redacted or cut).
func (s *Svc) originalParams(ctx context.Context, inv Invocation) (json.RawMessage, error) {
	if s.d.Redis != nil {
		b, err := s.d.Redis.GetDel(ctx, paramsKeyPrefix+inv.ID).Bytes()
		switch {
		case err == nil:
			return b, nil
		case !errors.Is(err, redis.Nil):
			s.d.Log.WarnContext(ctx, "read kept params", "invocation_id", inv.ID, "error", err)
		}
	}
	// Content redaction leaves the marker inside strings ("Bearer [REDACTED]").
	if bytes.Contains(inv.Params, []byte(actions.Redacted)) || bytes.Contains(inv.Params, []byte(`"_truncated":true`)) {
		return nil, errParamsLost
	}
	return inv.Params, nil
}

// dropParams forgets the kept params of a resolved invocation.
func (s *Svc) dropParams(ctx context.Context, id string) {
	if s.d.Redis == nil {
		return
	}
	if err := s.d.Redis.Del(context.WithoutCancel(ctx), paramsKeyPrefix+id).Err(); err != nil {
		s.d.Log.WarnContext(ctx, "drop kept params", "invocation_id", id, "error", err)
	}
}
