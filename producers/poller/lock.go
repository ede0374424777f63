package poller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseScript deletes the lock only while it still holds our token, so a
// poll that outlived its TTL cannot release a lock another replica now holds.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// lockKey is the Redis key of a poll group's lock.
func lockKey(groupID string) string { return "poll:" + groupID }

// lock takes the group's lock (SET NX PX with a random token). ok is false
// when another replica holds it.
func lock(ctx context.Context, rdb *redis.Client, groupID string, ttl time.Duration) (token string, ok bool, err error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	ok, err = rdb.SetNX(ctx, lockKey(groupID), token, ttl).Result()
	return token, ok, err
}

// unlock releases the lock if it is still ours (compare-and-delete).
func unlock(ctx context.Context, rdb *redis.Client, groupID, token string) error {
	return releaseScript.Run(ctx, rdb, []string{lockKey(groupID)}, token).Err()
}
