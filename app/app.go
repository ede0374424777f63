// Package app wires configuration, connections and roles together. Each
// subcommand of cmd/proliferate is a thin call into this package, so `dev` runs
// exactly the code the separate role processes run.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/migrations"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// App holds what roles share in one process. Open* methods connect lazily so a
// role only touches the dependencies it needs.
type App struct {
	Cfg    *config.Config
	Log    *slog.Logger
	Reg    *prometheus.Registry
	Checks *obs.Checks // what the roles of this process need (readiness.go)

	consumerMetrics *consumers.Metrics
	clientNames     map[string]int
	seeds           []string
	kafkaReady      kafkaReadiness

	Pool  *pgxpool.Pool
	Redis *redis.Client
	Codec *schemas.Codec
	box   *secretbox.Box

	redactorsOnce sync.Once
	redactors     *redaction.Cache

	sessionsOnce sync.Once
	sessions     runs.Sessions

	integrationsMu sync.Mutex
	integrations   *integrations.Service

	opsAddr     atomic.Pointer[string]
	apiAddr     atomic.Pointer[string]
	ingestAddr  atomic.Pointer[string]
	gatewayAddr atomic.Pointer[string]

	// LLMSim is the in-process scripted LLM the gateway started (no model
	// key in development); nil otherwise. Tests register scripts on it.
	LLMSim *llmsim.Server
	// llmSimLLM is the endpoint of LLMSim (one per process: the gateway and
	// the in-process LLM proxy share it).
	llmSimLLM *sandbox.LLM
	llmSimMu  sync.Mutex
	// llmProxyURL is the in-process LLM proxy's base URL once
	// LLMProxyRole started (make run), for the gateway's virtual keys.
	llmProxyURL atomic.Pointer[string]

	mu      sync.Mutex
	closers []func()
	// prebound are listeners bound before the roles started (Prebind), by
	// address setting.
	prebound map[string]net.Listener
}

// OpsAddr is where the ops endpoints listen once OpsRole started ("" before).
func (a *App) OpsAddr() string {
	if p := a.opsAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// New prepares an App; nothing is connected yet.
func New(cfg *config.Config, log *slog.Logger) *App {
	reg := obs.NewRegistry()
	a := &App{
		Cfg:             cfg,
		Log:             log,
		Reg:             reg,
		Checks:          &obs.Checks{Timeout: cfg.ReadyTimeout},
		consumerMetrics: consumers.NewMetrics(reg),
		clientNames:     map[string]int{},
		seeds:           cfg.KafkaBrokers,
	}
	if len(a.seeds) == 0 {
		a.seeds = []string{cfg.BrokerAddr}
	}
	return a
}

// SetSeeds points every Kafka client at seeds (dev sets the embedded broker's
// actual address).
func (a *App) SetSeeds(seeds []string) { a.seeds = seeds }

// Seeds are the brokers roles connect to.
func (a *App) Seeds() []string { return a.seeds }

// KafkaOptions are the options of one client of this process. name labels
// the client's metrics (franz-go's plugin takes one client per metrics set).
func (a *App) KafkaOptions(name string) kafka.Options {
	a.mu.Lock()
	a.clientNames[name]++
	if n := a.clientNames[name]; n > 1 {
		name = fmt.Sprintf("%s-%d", name, n)
	}
	a.mu.Unlock()
	m := kprom.NewMetrics("proliferate_kafka", kprom.Registerer(a.Reg), kprom.Gatherer(a.Reg),
		kprom.WithStaticLabel(prometheus.Labels{"client": name}))
	return kafka.Options{Seeds: a.seeds, ClientID: a.Cfg.KafkaClientID, Logger: a.Log, Metrics: m}
}

// NewKafkaClient builds a client from the one factory, closed with the App.
func (a *App) NewKafkaClient(name string, extra ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kafka.NewClient(a.KafkaOptions(name), extra...)
	if err != nil {
		return nil, err
	}
	a.onClose(cl.Close)
	return cl, nil
}

func (a *App) onClose(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closers = append(a.closers, f)
}

// Close releases everything opened, newest first.
func (a *App) Close() {
	a.mu.Lock()
	closers := a.closers
	a.closers = nil
	a.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// OpenPostgres connects the pool. Roles that need it say so with
// readyPostgres.
func (a *App) OpenPostgres(ctx context.Context) error {
	if a.Pool != nil {
		return nil
	}
	pool, err := db.Open(ctx, a.Cfg.DatabaseURL, a.Cfg.DatabaseMaxConns)
	if err != nil {
		return fmt.Errorf("%w (is Postgres running? `scripts/devstack.sh up` starts one)", err)
	}
	a.Pool = pool
	a.onClose(pool.Close)
	return nil
}

// Migrate applies pending migrations.
func (a *App) Migrate(ctx context.Context) error {
	if err := a.OpenPostgres(ctx); err != nil {
		return err
	}
	applied, err := migrations.Up(ctx, a.Pool)
	for _, m := range applied {
		a.Log.Info("migration applied", "version", m.Version, "name", m.Name)
	}
	return err
}

// OpenRedis connects Redis. Roles that need it say so with readyRedis.
func (a *App) OpenRedis(ctx context.Context) error {
	if a.Redis != nil {
		return nil
	}
	opt, err := redis.ParseURL(a.Cfg.RedisURL)
	if err != nil {
		return errors.New("parse REDIS_URL: invalid URL")
	}
	cl := redis.NewClient(opt)
	if err := cl.Ping(ctx).Err(); err != nil {
		cl.Close()
		return fmt.Errorf("connect to redis at %s: %w (is Redis running? `scripts/devstack.sh up` starts one)", opt.Addr, err)
	}
	a.Redis = cl
	a.onClose(func() { cl.Close() })
	return nil
}

// OpenKafka checks the brokers answer (dev fails fast at start). Roles that
// produce to Kafka say which topics with readyKafka.
func (a *App) OpenKafka(ctx context.Context) error {
	cl, err := a.readinessClient()
	if err != nil {
		return err
	}
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("connect to kafka at %v: %w", a.seeds, err)
	}
	return nil
}

// OpenCodec builds the event codec: single-object encoding, or Confluent
// framing through the schema registry when SCHEMA_REGISTRY_URL is set.
// The audit trail's emitters (internal/audit.Emit, called deep inside the
// domain packages) encode with it too.
func (a *App) OpenCodec(context.Context) error {
	if a.Codec != nil {
		return nil
	}
	codec, err := schemas.NewCodecFor(a.Cfg.SchemaRegistryURL)
	if err != nil {
		return fmt.Errorf("build event codec: %w", err)
	}
	a.Codec = codec
	audit.UseCodec(codec)
	return nil
}

// EnsureTopics creates missing catalog topics and logs drift.
func (a *App) EnsureTopics(ctx context.Context) (topics.Report, error) {
	cl, err := a.NewKafkaClient("admin")
	if err != nil {
		return topics.Report{}, err
	}
	rep, err := topics.Ensure(ctx, kadm.NewClient(cl), int16(a.Cfg.KafkaReplicationFactor))
	if err != nil {
		return rep, err
	}
	for _, d := range rep.Drift {
		a.Log.Warn("topic drift", "topic", d.Topic, "setting", d.Setting, "have", d.Have, "catalog", d.Want)
	}
	return rep, nil
}

// redactURL renders a connection URL without its password for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	return u.Redacted()
}
