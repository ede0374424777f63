// Package outboxtest reads what transactions left in the outbox, for tests
// that check what the relay will publish without running it.
package outboxtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Values are the encoded events the outbox holds for topic under key,
// oldest first.
func Values(t testing.TB, pool *pgxpool.Pool, topic, key string) [][]byte {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topic, key)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// Records are those events as the records the relay would publish.
func Records(t testing.TB, pool *pgxpool.Pool, topic, key string) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range Values(t, pool, topic, key) {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: v})
	}
	return recs
}
