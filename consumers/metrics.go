package consumers

import (
	"context"
	"strconv"
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

// Measure times each handler attempt and counts failed ones.
func (m *Metrics) Measure(group string) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, msg *Message) error {
			start := time.Now()
			err := next(ctx, msg)
			m.duration.WithLabelValues(group, msg.Record.Topic).Observe(time.Since(start).Seconds())
			if err != nil {
				m.failures.WithLabelValues(group, msg.Record.Topic).Inc()
			}
			return err
		}
	}
}

func (m *Metrics) finished(group, topic, outcome string) {
	m.records.WithLabelValues(group, topic, outcome).Inc()
}

func (m *Metrics) setLag(group, topic string, partition int32, lag int64) {
	m.lag.WithLabelValues(group, topic, strconv.Itoa(int(partition))).Set(float64(max(lag, 0)))
}

func (m *Metrics) forget(group, topic string, partition int32) {
	m.lag.DeleteLabelValues(group, topic, strconv.Itoa(int(partition)))
}
