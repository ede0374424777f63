package containers_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv/containers"
	"github.com/proliferate/proliferate/migrations"
)

// The platform's pieces against production images: migrations on Postgres 15,
// Redis, and a produce/consume round trip on a real Kafka broker.
func TestAgainstProductionImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	pool, err := db.Open(ctx, containers.Postgres(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}

	opt, err := redis.ParseURL(containers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	seeds := containers.Kafka(t)
	admin, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 3, 1, nil, "smoke"); err != nil {
		t.Fatal(err)
	}
	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds}, kgo.ConsumeTopics("smoke"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.NewProducer(cl, nil).Produce(ctx, &kgo.Record{Topic: "smoke", Value: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("record not consumed from the real broker")
		}
		if len(fs.Records()) > 0 {
			return
		}
	}
}
