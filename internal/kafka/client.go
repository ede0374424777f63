// Package kafka is the one Kafka client factory of Proliferate and its producer
// helper. Every role builds its clients here so they share one set of
// production defaults: idempotent producers with acks=all, the configured
// client id, structured logging and Prometheus client metrics.
package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Options say where a client connects and what it reports to.
type Options struct {
	Seeds    []string
	ClientID string
	Logger   *slog.Logger
	// Metrics, when set, receives franz-go's client metrics (connections,
	// bytes, produce/fetch batches, per-broker latencies).
	Metrics *kprom.Metrics
}

// NewClient returns a client with the platform defaults, extended by extra
// (consumer group settings, topics to consume, hooks). Idempotent production and
// acks=all are franz-go's defaults; they are repeated here so nobody turns them
// off by accident.
func NewClient(o Options, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Seeds...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), // murmur2 on key, as the Java client
		// No AllowAutoTopicCreation: topics come from `topics ensure` and the
		// catalog, so a typo in a topic name fails instead of creating a topic.
		kgo.UnknownTopicRetries(3),
	}
	if o.ClientID != "" {
		opts = append(opts, kgo.ClientID(o.ClientID))
	}
	if o.Logger != nil {
		opts = append(opts, kgo.WithLogger(slogLogger{o.Logger}))
	}
	if o.Metrics != nil {
		opts = append(opts, kgo.WithHooks(o.Metrics))
	}
	opts = append(opts, extra...)
	return kgo.NewClient(opts...)
}

// slogLogger adapts slog to franz-go's logger. franz-go's info level is chatty
// (every metadata refresh), so it is logged at debug.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	if s.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	default:
		l = slog.LevelDebug
	}
	s.l.Log(context.Background(), l, "kafka: "+msg, keyvals...)
}
