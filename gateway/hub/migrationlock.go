package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMigrationLockTTL covers the worst snapshot (SnapshotTimeout,
// 120 s) plus terminate and the database write with room to spare
// (idle-snapshotting.md, constraint 6).
const DefaultMigrationLockTTL = 300 * time.Second

func migrationKey(sessionID string) string { return "lock:migration:" + sessionID }

// Lock is a Redis key held with a random token (SET NX PX); Held and
// Release compare the token, so an actor whose lock expired can neither
// release nor believe it still holds someone else's.
//
// The migration lock (AcquireMigrationLock) is the per-session lock every
// actor takes before it snapshots, stops or moves a session's sandbox:
// idle snapshots, expiry migrations, the orphan sweeper and credit
// enforcement. Destructive steps are additionally fenced in Postgres: the
// final write is a compare-and-set on the sandbox id
// (sessions.PauseIfSandbox), so a stale actor's write changes nothing.
type Lock struct {
	rdb   *redis.Client
	key   string
	token string
}

func tryLock(ctx context.Context, rdb *redis.Client, key, holder string, ttl time.Duration) (*Lock, bool, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	l := &Lock{rdb: rdb, key: key, token: holder + ":" + hex.EncodeToString(b[:])}
	ok, err := rdb.SetNX(ctx, l.key, l.token, ttl).Result()
	if err != nil {
		return nil, false, fmt.Errorf("hub: take %s: %w", key, err)
	}
	if !ok {
		return nil, false, nil
	}
	return l, true, nil
}

// AcquireMigrationLock takes the session's migration lock for ttl;
// ok is false when another actor holds it.
func AcquireMigrationLock(ctx context.Context, rdb *redis.Client, sessionID, holder string, ttl time.Duration) (*Lock, bool, error) {
	return tryLock(ctx, rdb, migrationKey(sessionID), holder, ttl)
}

// FenceOwner takes the session's owner lease for an actor that is not a
// hub (the orphan sweeper), so no hub can take the session until it is
// released; ok is false when a hub (or another actor) holds it.
func FenceOwner(ctx context.Context, rdb *redis.Client, sessionID, holder string, ttl time.Duration) (*Lock, bool, error) {
	return tryLock(ctx, rdb, ownerKey(sessionID), holder, ttl)
}

// Held reports whether the lock is still ours (it may have expired).
func (l *Lock) Held(ctx context.Context) (bool, error) {
	v, err := l.rdb.Get(ctx, l.key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("hub: check migration lock: %w", err)
	}
	return v == l.token, nil
}

// Release deletes the lock if it is still ours. It uses a fresh context
// so a cancelled operation still releases.
func (l *Lock) Release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = releaseScript.Run(rctx, l.rdb, []string{l.key}, l.token).Err()
}

// WaitMigrationLock waits until no actor holds the session's migration
// lock (polling every poll), or ctx ends.
func WaitMigrationLock(ctx context.Context, rdb *redis.Client, sessionID string, poll time.Duration) error {
	for {
		n, err := rdb.Exists(ctx, migrationKey(sessionID)).Result()
		if err != nil {
			return fmt.Errorf("hub: wait for migration lock %s: %w", sessionID, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hub: wait for migration lock %s: %w", sessionID, ctx.Err())
		case <-time.After(poll):
		}
	}
}
