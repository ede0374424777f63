package invocations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/actions"
)

// Redis keys: the per-session, per-minute invocation counter (a fixed
// window shared by every gateway instance) and the original params of a
// pending invocation whose stored params were redacted or cut.
const (
	rateKeyPrefix   = "ratelimit:actions:"
	paramsKeyPrefix = "actions:params:"
)

// rateWindowTTL keeps a window's counter a little past its minute.
const rateWindowTTL = 2 * time.Minute

// allow counts one invocation of the session in the current minute and
// reports ErrRateLimited past RatePerMinute. Without Redis, or when Redis
// fails, the invocation is allowed (the limit protects the external
// services from a runaway agent; losing Redis must not stop every agent) and
// the failure is logged.
func (s *Svc) allow(ctx context.Context, sessionID string) error {
	if s.d.Redis == nil {
		return nil
	}
	key := fmt.Sprintf("%s%s:%d", rateKeyPrefix, sessionID, s.now().Unix()/60)
	pipe := s.d.Redis.Pipeline()
	incr := pipe.Incr(ctx, key)
	pipe.Expire(ctx, key, rateWindowTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.d.Log.WarnContext(ctx, "action rate limit unavailable; allowing", "session_id", sessionID, "error", err)
		return nil
	}
	if incr.Val() > RatePerMinute {
		return ErrRateLimited
	}
	return nil
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
