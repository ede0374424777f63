package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/broker"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/topics"
)

// Role is one long-running part of the platform.
type Role struct {
	Name string
	Run  func(ctx context.Context) error
}

// RunRoles runs roles until ctx ends or one fails; a failure stops the others.
func RunRoles(ctx context.Context, roles ...Role) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, r := range roles {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				cancel(fmt.Errorf("%s: %w", r.Name, err))
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// RoleBuilder prepares one role (connecting what it needs) without running it.
type RoleBuilder func(ctx context.Context) (Role, error)

// BuildRoles prepares roles in order, stopping at the first error.
func BuildRoles(ctx context.Context, builders ...RoleBuilder) ([]Role, error) {
	roles := make([]Role, 0, len(builders))
	for _, b := range builders {
		r, err := b(ctx)
		if err != nil {
			return nil, err
		}
		roles = append(roles, r)
	}
	return roles, nil
}

// Serve runs the given roles plus the ops endpoints of role (the
// subcommand's name, which picks the default ops port) until ctx ends: what
// a single-role subcommand (api, ingest, relay, scheduler…) does.
func (a *App) Serve(ctx context.Context, role string, extra []Role, builders ...RoleBuilder) error {
	roles, err := BuildRoles(ctx, append(builders, a.OpsRole(role))...)
	if err != nil {
		return err
	}
	return RunRoles(ctx, append(extra, roles...)...)
}

// OpsRole serves /healthz, /readyz and /metrics for role: on OPS_ADDR when
// it is set, else on the role's own port (config.OpsPorts), so roles
// started side by side on one machine do not collide.
func (a *App) OpsRole(role string) RoleBuilder {
	return func(ctx context.Context) (Role, error) {
		want := a.Cfg.OpsAddrFor(role)
		addr, errc, err := obs.Serve(ctx, want, obs.Handler(a.Reg, a.Checks))
		if err != nil {
			how := "OPS_ADDR"
			if a.Cfg.OpsAddr == "" {
				how = "the default ops address of " + role + " (set OPS_ADDR to choose another)"
			}
			return Role{}, fmt.Errorf("ops server on %s, %s: %w", want, how, err)
		}
		a.opsAddr.Store(&addr)
		a.Log.Info("ops endpoints listening", "role", role, "addr", addr, "paths", "/healthz /readyz /metrics")
		return Role{"ops", func(ctx context.Context) error {
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
				return <-errc
			}
		}}, nil
	}
}

// RelayRole publishes the transactional outbox.
func (a *App) RelayRole(ctx context.Context) (Role, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return Role{}, err
	}
	cl, err := a.NewKafkaClient("outbox-relay")
	if err != nil {
		return Role{}, err
	}
	relay := outbox.NewRelay(a.Pool, cl, outbox.RelayOptions{
		BatchSize:     a.Cfg.OutboxBatchSize,
		PollInterval:  a.Cfg.OutboxPollInterval,
		Retention:     a.Cfg.OutboxRetention,
		MaxPendingAge: a.Cfg.OutboxMaxPendingAge,
		Logger:        a.Log,
		Registerer:    a.Reg,
	})
	// Ready: Postgres answers, a broker leads every partition of the topics
	// events reach through the outbox, and the backlog is young enough.
	a.readyPostgres()
	var outboxTopics []string
	for _, t := range topics.All() {
		if t.DeadLetterOf == "" && t.Name != topics.WebhooksRaw {
			outboxTopics = append(outboxTopics, t.Name)
		}
	}
	if err := a.readyKafka(outboxTopics...); err != nil {
		return Role{}, err
	}
	a.Checks.Add("outbox", relay.Ready)
	return Role{"outbox-relay", relay.Run}, nil
}

// Integrations is the integrations domain service (token boundary, status),
// one per process so that every role shares its token caches.
func (a *App) Integrations(ctx context.Context) (*integrations.Service, error) {
	a.integrationsMu.Lock()
	defer a.integrationsMu.Unlock()
	if a.integrations != nil {
		return a.integrations, nil
	}
	svc, err := a.newIntegrations(ctx)
	if err != nil {
		return nil, err
	}
	a.integrations = svc
	return svc, nil
}

func (a *App) newIntegrations(ctx context.Context) (*integrations.Service, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	if err := a.OpenRedis(ctx); err != nil {
		return nil, err
	}
	box, err := a.SecretBox()
	if err != nil {
		return nil, err
	}
	return integrations.New(integrations.Options{Cfg: a.Cfg, Pool: a.Pool, Redis: a.Redis, Box: box, Log: a.Log,
		SlackClientID: a.Cfg.SlackClientID, SlackClientSecret: a.Cfg.SlackClientSecret})
}

// RunnableGroups names, sorted, the consumer groups the worker role runs
// when given no names (and so `proliferate dev` and `make run`): the groups
// of groupWirings. Every group of topics.Groups must be among them: the
// catalog lists no group that no code runs.
func (a *App) RunnableGroups() []string {
	var names []string
	for _, w := range groupWirings() {
		names = append(names, w.group.Name)
	}
	slices.Sort(names)
	return names
}

// WorkerRoles returns a role per named consumer group; no names means all.
func (a *App) WorkerRoles(ctx context.Context, names []string) ([]Role, error) {
	if len(names) == 0 {
		names = a.RunnableGroups()
	}
	var roles []Role
	for _, name := range names {
		w, ok := wiring(name)
		if !ok {
			return nil, fmt.Errorf("unknown consumer group %q (available: %s)", name, strings.Join(a.RunnableGroups(), ", "))
		}
		r, err := a.groupRole(ctx, w)
		if err != nil {
			return nil, err
		}
		roles = append(roles, r)
		if w.alongside != nil {
			roles = append(roles, w.alongside(a))
		}
	}
	return roles, nil
}

// groupRole builds the runner of one consumer group.
func (a *App) groupRole(ctx context.Context, w groupWiring) (Role, error) {
	name := w.group.Name
	if err := a.OpenCodec(ctx); err != nil {
		return Role{}, err
	}
	cfg := consumers.Config{
		Codec: a.Codec,
		Retry: consumers.RetryOptions{
			MaxAttempts:    a.Cfg.ConsumerMaxAttempts,
			InitialBackoff: a.Cfg.ConsumerBackoffInitial,
			MaxBackoff:     a.Cfg.ConsumerBackoffMax,
		},
		ShutdownTimeout: a.Cfg.ShutdownTimeout,
		MembershipGrace: a.Cfg.ConsumerReadyGrace,
		Kafka:           a.KafkaOptions("consumer/" + name),
		Metrics:         a.consumerMetrics,
		Logger:          a.Log,
	}
	if err := w.handlers(ctx, a, &cfg); err != nil {
		return Role{}, fmt.Errorf("consumer group %s: %w", name, err)
	}
	cfg, err := consumers.ForGroup(w.group, cfg)
	if err != nil {
		return Role{}, err
	}
	r, err := consumers.New(cfg)
	if err != nil {
		return Role{}, err
	}
	// Ready while its member is in the group, and while its dead-letter
	// topic can take a record.
	a.readyGroup(name, r.Ready)
	if err := a.readyKafka(w.group.DeadLetter()); err != nil {
		return Role{}, err
	}
	return Role{"consumer/" + name, r.Run}, nil
}

// StartBroker starts the embedded broker; the caller closes it.
func (a *App) StartBroker() (*broker.Broker, error) {
	b, err := broker.Start(broker.Options{
		Addr:              a.Cfg.BrokerAddr,
		DataDir:           a.Cfg.BrokerDataDir,
		RetentionInterval: a.Cfg.BrokerRetentionInterval,
		Logger:            a.Log,
	})
	if err != nil {
		return nil, err
	}
	a.Log.Info("embedded kafka broker listening", "addr", b.Addr(), "data_dir", a.Cfg.BrokerDataDir)
	return b, nil
}

// Dev runs the whole platform in one process: the embedded broker (unless
// KAFKA_BROKERS is set), migrations, topics, the outbox relay, every consumer
// group and the ops endpoints.
func (a *App) Dev(ctx context.Context) error {
	if a.Cfg.Embedded() {
		b, err := a.StartBroker()
		if err != nil {
			return err
		}
		defer b.Close() // after every client is closed (deferred Close of App runs first)
		a.SetSeeds([]string{b.Addr()})
	}
	defer a.Close()
	if err := a.Migrate(ctx); err != nil {
		return err
	}
	if err := a.OpenRedis(ctx); err != nil {
		return err
	}
	if err := a.OpenKafka(ctx); err != nil {
		return err
	}
	rep, err := a.EnsureTopics(ctx)
	if err != nil {
		return err
	}
	a.Log.Info("topics ready", "created", len(rep.Created), "existing", len(rep.Existing), "drift", len(rep.Drift))
	if err := a.OpenCodec(ctx); err != nil {
		return err
	}
	roles, err := a.WorkerRoles(ctx, nil)
	if err != nil {
		return err
	}
	more, err := BuildRoles(ctx, a.RelayRole, a.APIRole, a.MailRole, a.IngestRole, a.SchedulerRole, a.FinalizerRole, a.BillingJobsRole, a.LLMProxyRole, a.GatewayRole, a.OpsRole("dev"))
	if err != nil {
		return err
	}
	roles = append(roles, more...)
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = r.Name
	}
	a.Log.Info("proliferate dev running; Ctrl-C stops it",
		"kafka", strings.Join(a.Seeds(), ","), "postgres", redactURL(a.Cfg.DatabaseURL),
		"redis", redactURL(a.Cfg.RedisURL), "roles", strings.Join(names, ","))
	err = RunRoles(ctx, roles...)
	if err != nil {
		a.Log.Error("proliferate dev stopping after a role failed", "error", err)
		return err
	}
	a.Log.Info("proliferate dev stopped cleanly")
	return nil
}
