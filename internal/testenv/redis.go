package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisDatabases is the --databases setting of the Redis that
// scripts/devstack.sh starts; database 0 holds only the allocation counter.
const redisDatabases = 1024

var (
	redisOnce   sync.Once
	redisClient *redis.Client
	redisURL    string
	redisErr    error
)

// Redis returns a client on a Redis database private to this test package
// (flushed when first taken).
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	if !inMain {
		t.Fatal("testenv: call testenv.Main(m) from TestMain to use Redis")
	}
	redisOnce.Do(func() { redisErr = openRedis() })
	if redisErr != nil {
		t.Fatalf("testenv: %v", redisErr)
	}
	return redisClient
}

// RedisURL is the URL of the package's Redis database.
func RedisURL(t testing.TB) string {
	t.Helper()
	Redis(t)
	return redisURL
}

func openRedis() error {
	raw := os.Getenv("REDIS_URL")
	if raw == "" {
		return fmt.Errorf("REDIS_URL is not set: run tests with `make test`, which starts Postgres and Redis (scripts/devstack.sh)")
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return fmt.Errorf("parse REDIS_URL: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero := redis.NewClient(opt)
	n, err := zero.Incr(ctx, "testenv:next-db").Result()
	zero.Close()
	if err != nil {
		return fmt.Errorf("allocate redis test database: %w", err)
	}
	opt.DB = 1 + int(n%(redisDatabases-1))
	redisURL = fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB)
	if opt.Password != "" {
		redisURL = fmt.Sprintf("redis://:%s@%s/%d", opt.Password, opt.Addr, opt.DB)
	}
	redisClient = redis.NewClient(opt)
	if err := redisClient.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("flush redis db %d: %w", opt.DB, err)
	}
	AtExit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = redisClient.FlushDB(ctx).Err()
		redisClient.Close()
	})
	return nil
}
