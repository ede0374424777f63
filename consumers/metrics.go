package consumers

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus series of every runner in a process, labelled by
// group. Create one per process (registering twice panics).
type Metrics struct {
	records  *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration *prometheus.HistogramVec
	lag      *prometheus.GaugeVec
}

// Record outcomes of proliferate_consumer_records_total.
const (
	OutcomeOK           = "ok"
	OutcomeDeadLettered = "dead_lettered"
)

// NewMetrics registers the consumer series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proliferate_consumer_records_total",
			Help: "Records finished by a consumer group, by outcome (ok, dead_lettered). rate() of it is the throughput.",
		}, []string{"group", "topic", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proliferate_consumer_attempt_failures_total",
			Help: "Handler attempts that returned an error (each retry counts).",
		}, []string{"group", "topic"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proliferate_consumer_handle_seconds",
			Help:    "Time spent in one handler attempt.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"group", "topic"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proliferate_consumer_lag_records",
			Help: "Records behind the partition's high watermark after the last processed record.",
		}, []string{"group", "topic", "partition"}),
	}
	reg.MustRegister(m.records, m.failures, m.duration, m.lag)
	return m
}

// Measure times each handler attempt and counts failed ones. Label children
// are cached per topic: the lookup would otherwise cost more than a fast
// handler.
func (m *Metrics) Measure(group string) Middleware {
	var perTopic sync.Map // topic → *topicSeries
	series := func(topic string) *topicSeries {
		if s, ok := perTopic.Load(topic); ok {
			return s.(*topicSeries)
		}
		s, _ := perTopic.LoadOrStore(topic, &topicSeries{
			duration: m.duration.WithLabelValues(group, topic),
			failures: m.failures.WithLabelValues(group, topic),
		})
		return s.(*topicSeries)
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, msg *Message) error {
			start := time.Now()
			err := next(ctx, msg)
			s := series(msg.Record.Topic)
			s.duration.Observe(time.Since(start).Seconds())
			if err != nil {
				s.failures.Inc()
			}
			return err
		}
	}
}

type topicSeries struct {
	duration prometheus.Observer
	failures prometheus.Counter
}

// partitionSeries are one partition worker's cached series.
type partitionSeries struct {
	ok, deadLettered prometheus.Counter
	lag              prometheus.Gauge
}

func (m *Metrics) partition(group, topic string, partition int32) partitionSeries {
	return partitionSeries{
		ok:           m.records.WithLabelValues(group, topic, OutcomeOK),
		deadLettered: m.records.WithLabelValues(group, topic, OutcomeDeadLettered),
		lag:          m.lag.WithLabelValues(group, topic, strconv.Itoa(int(partition))),
	}
}

func (m *Metrics) forget(group, topic string, partition int32) {
	m.lag.DeleteLabelValues(group, topic, strconv.Itoa(int(partition)))
}
