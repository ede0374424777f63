// Package containers is the opt-in container path of the test environment:
// production images of Kafka, Postgres and Redis through testcontainers, for
// tests that want a real Kafka broker rather than kfake. Every function skips
// the test cleanly where no Docker engine runs (as on the CI machines), so the
// default `make test` path stays testenv's local services.
package containers

import (
	"context"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Images are pinned so a test run is reproducible.
const (
	KafkaImage    = "confluentinc/confluent-local:7.6.1"
	PostgresImage = "postgres:15-alpine"
	RedisImage    = "redis:7-alpine"
)

// Kafka starts a single-node KRaft Kafka and returns its bootstrap addresses.
func Kafka(t *testing.T) []string {
	t.Helper()
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx := context.Background()
	c, err := tckafka.Run(ctx, KafkaImage, tckafka.WithClusterID("proliferate-test"))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("containers: start kafka: %v", err)
	}
	brokers, err := c.Brokers(ctx)
	if err != nil {
		t.Fatalf("containers: kafka brokers: %v", err)
	}
	return brokers
}

// Postgres starts Postgres 15 and returns a connection URL.
func Postgres(t *testing.T) string {
	t.Helper()
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, PostgresImage,
		tcpostgres.WithDatabase("proliferate"), tcpostgres.WithUsername("proliferate"), tcpostgres.WithPassword("proliferate"),
		tcpostgres.BasicWaitStrategies())
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("containers: start postgres: %v", err)
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		t.Fatalf("containers: postgres url: %v", err)
	}
	return url
}

// Redis starts Redis 7 and returns a connection URL.
func Redis(t *testing.T) string {
	t.Helper()
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx := context.Background()
	c, err := tcredis.Run(ctx, RedisImage)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("containers: start redis: %v", err)
	}
	url, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("containers: redis url: %v", err)
	}
	return url
}
