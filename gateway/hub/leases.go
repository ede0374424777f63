package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis keys (sessions-gateway.md §2).
func ownerKey(sessionID string) string   { return "lease:owner:" + sessionID }
func runtimeKey(sessionID string) string { return "lease:runtime:" + sessionID }

// acquireScript takes the lease when free or re-extends it when this
// instance already holds it: 1 = held by us now, 0 = another holder.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

// renewScript extends the lease only if we still hold it (check-and-extend):
// 1 = renewed, 0 = lost.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// releaseScript deletes the keys only while we hold the owner lease
// (owner-aware cleanup: a hub that never owned must not clear them).
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then redis.call('DEL', KEYS[2]) end
  return 1
end
return 0`)

// leases are one instance's Redis lease operations.
type leases struct {
	rdb      *redis.Client
	instance string
	ownerTTL time.Duration
	runTTL   time.Duration
}

func (l leases) acquireOwner(ctx context.Context, sessionID string) (bool, error) {
	n, err := acquireScript.Run(ctx, l.rdb, []string{ownerKey(sessionID)}, l.instance, l.ownerTTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("hub: acquire owner lease %s: %w", sessionID, err)
	}
	return n == 1, nil
}

func (l leases) renewOwner(ctx context.Context, sessionID string) (bool, error) {
	n, err := renewScript.Run(ctx, l.rdb, []string{ownerKey(sessionID)}, l.instance, l.ownerTTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("hub: renew owner lease %s: %w", sessionID, err)
	}
	return n == 1, nil
}

// setRuntime writes the runtime liveness lease (owner only).
func (l leases) setRuntime(ctx context.Context, sessionID string) error {
	if err := l.rdb.Set(ctx, runtimeKey(sessionID), l.instance, l.runTTL).Err(); err != nil {
		return fmt.Errorf("hub: set runtime lease %s: %w", sessionID, err)
	}
	return nil
}

// release drops the owner lease (and the runtime lease when dropRuntime)
// if this instance holds it.
func (l leases) release(ctx context.Context, sessionID string, dropRuntime bool) error {
	keys := []string{ownerKey(sessionID)}
	if dropRuntime {
		keys = append(keys, runtimeKey(sessionID))
	}
	if err := releaseScript.Run(ctx, l.rdb, keys, l.instance).Err(); err != nil && err != redis.Nil {
		return fmt.Errorf("hub: release leases %s: %w", sessionID, err)
	}
	return nil
}

// OwnerOf returns the instance id holding the session's owner lease ("" if
// none). Useful to route a request to the owner.
func OwnerOf(ctx context.Context, rdb *redis.Client, sessionID string) (string, error) {
	v, err := rdb.Get(ctx, ownerKey(sessionID)).Result()
	if err == redis.Nil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("hub: read owner lease %s: %w", sessionID, err)
	}
	return v, nil
}

// RuntimeAlive reports whether the session's runtime lease is set (a live
// runtime heartbeat within RuntimeTTL), for orphan detection.
func RuntimeAlive(ctx context.Context, rdb *redis.Client, sessionID string) (bool, error) {
	n, err := rdb.Exists(ctx, runtimeKey(sessionID)).Result()
	if err != nil {
		return false, fmt.Errorf("hub: read runtime lease %s: %w", sessionID, err)
	}
	return n == 1, nil
}

// dropRuntime deletes the runtime lease if this instance wrote it (the
// runtime is gone: snapshotted, migrated away).
func (l leases) dropRuntime(ctx context.Context, sessionID string) error {
	if err := releaseScript.Run(ctx, l.rdb, []string{runtimeKey(sessionID)}, l.instance).Err(); err != nil && err != redis.Nil {
		return fmt.Errorf("hub: drop runtime lease %s: %w", sessionID, err)
	}
	return nil
}
