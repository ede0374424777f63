package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Redis keys.
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

// Sandbox liveness: only the gateway that owns a session
// can ask its provider whether the session's sandbox is alive (the local
// provider knows its own process's sandboxes only). The owner therefore
// keeps alive:sandbox:{sandbox id} = its instance id, with the runtime
// lease's TTL, and renews it only after its provider said the sandbox is
// alive; it deletes the key as soon as the provider says dead or the
// runtime is gone. Any replica (the compute meter) reads it through
// Liveness.

func sandboxKey(sandboxID string) string { return "alive:sandbox:" + sandboxID }

// beatSandbox records that this instance's provider saw sandboxID alive.
func (l leases) beatSandbox(ctx context.Context, sandboxID string) error {
	if err := l.rdb.Set(ctx, sandboxKey(sandboxID), l.instance, l.runTTL).Err(); err != nil {
		return fmt.Errorf("hub: sandbox heartbeat %s: %w", sandboxID, err)
	}
	return nil
}

// dropSandbox deletes sandboxID's heartbeat if this instance wrote it.
func (l leases) dropSandbox(ctx context.Context, sandboxID string) error {
	if err := releaseScript.Run(ctx, l.rdb, []string{sandboxKey(sandboxID)}, l.instance).Err(); err != nil && err != redis.Nil {
		return fmt.Errorf("hub: drop sandbox heartbeat %s: %w", sandboxID, err)
	}
	return nil
}

// Liveness answers "is this session's sandbox alive?" for any replica, as
// the session's owner sees it:
//
//   - a heartbeat for the sandbox (renewed by the owner after its provider
//     said alive, within RuntimeTTL) → alive;
//   - no heartbeat while an owner holds the session → not alive (the owner
//     found it dead, or has not confirmed it lately: a stalled owner);
//   - no heartbeat and no owner → the owner process is gone. Provider, when
//     it is the session's provider, is asked (a cloud sandbox can outlive
//     its gateway; a local one died with it); otherwise dead.
//
// The compute meter counts every "not alive" as one failed check, so a
// sandbox is declared dead only after consecutive answers like these.
type Liveness struct {
	Redis *redis.Client
	// Provider is this process's provider; nil = never asked.
	Provider sandbox.Provider
}

// SandboxAlive reports whether sandboxID, the sandbox of sessionID on the
// provider named providerName, is alive.
func (l Liveness) SandboxAlive(ctx context.Context, sessionID, sandboxID, providerName string) (bool, error) {
	pipe := l.Redis.Pipeline()
	beat := pipe.Exists(ctx, sandboxKey(sandboxID))
	owner := pipe.Get(ctx, ownerKey(sessionID))
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return false, fmt.Errorf("hub: read liveness of %s: %w", sandboxID, err)
	}
	if beat.Val() == 1 {
		return true, nil
	}
	if owner.Val() != "" {
		return false, nil
	}
	if l.Provider == nil || l.Provider.Name() != providerName {
		return false, nil
	}
	return l.Provider.Alive(ctx, sandboxID)
}
