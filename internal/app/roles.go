package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
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

// GroupFactory builds one consumer group's handler from the App. Each consumer
// group package registers one in Groups as it is built.
type GroupFactory func(ctx context.Context, a *App) (consumers.Handler, error)

// Groups lists the consumer groups this build can run, by name (the names of
// topics.Groups). Issues add their groups here.
func (a *App) Groups() map[string]GroupFactory {
	groups := map[string]GroupFactory{
		topics.GroupTriggerProcessor: func(ctx context.Context, a *App) (consumers.Handler, error) {
			svc, err := a.Integrations(ctx)
			if err != nil {
				return nil, err
			}
			a.readyPostgres()
			// Webhook bodies over INGEST_INLINE_BODY_BYTES are in the blob store.
			store, err := a.BlobStore()
			if err != nil {
				return nil, err
			}
			a.readyBlobStore(store)
			gate, err := a.triggerLLM(ctx, topics.GroupTriggerProcessor)
			if err != nil {
				return nil, err
			}
			return triggerprocessor.Handler(triggerprocessor.Deps{Pool: a.Pool, Codec: a.Codec,
				Log: a.Log.With("group", topics.GroupTriggerProcessor), Integrations: svc, Blobs: store,
				LLM: gate}), nil
		},
	}
	maps.Copy(groups, runGroups())
	maps.Copy(groups, billingGroups())
	return groups
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

// runnableGroups is every consumer group this build runs: the one-record
// groups (known) and the batch groups (batch, also keys of known with a nil
// factory).
func (a *App) runnableGroups() (known map[string]GroupFactory, batch map[string]BatchGroupFactory) {
	known = a.Groups()
	batch = batchGroups()
	maps.Copy(batch, historyBatchGroups())
	for n := range batch {
		known[n] = nil // a batch group: built by groupRole from batch
	}
	return known, batch
}

// RunnableGroups names, sorted, the consumer groups the worker role runs
// when given no names (and so `proliferate dev` and `make run`). Every
// group of topics.Groups must be among them: the catalog lists no group
// that no code runs.
func (a *App) RunnableGroups() []string {
	known, _ := a.runnableGroups()
	return slices.Sorted(maps.Keys(known))
}

// WorkerRoles returns a role per named consumer group; no names means all.
func (a *App) WorkerRoles(ctx context.Context, names []string) ([]Role, error) {
	known, batch := a.runnableGroups()
	if len(names) == 0 {
		for n := range known {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) == 0 {
			a.Log.Warn("this build has no consumer groups yet; the worker serves only its ops endpoints")
		}
	}
	var roles []Role
	for _, name := range names {
		factory, ok := known[name]
		if !ok {
			available := make([]string, 0, len(known))
			for n := range known {
				available = append(available, n)
			}
			slices.Sort(available)
			if len(available) == 0 {
				return nil, fmt.Errorf("unknown consumer group %q: this build has no consumer groups yet", name)
			}
			return nil, fmt.Errorf("unknown consumer group %q (available: %s)", name, strings.Join(available, ", "))
		}
		var r Role
		var err error
		if bf, ok := batch[name]; ok {
			r, err = a.groupRole(ctx, name, nil, bf)
		} else {
			r, err = a.GroupRole(ctx, name, factory)
		}
		if err != nil {
			return nil, err
		}
		roles = append(roles, r)
	}
	return roles, nil
}

// GroupRole builds the runner of one consumer group.
func (a *App) GroupRole(ctx context.Context, name string, factory GroupFactory) (Role, error) {
	return a.groupRole(ctx, name, factory, nil)
}

// BatchGroupFactory builds a batch consumer group's handler (a group that
// applies a partition's fetched records together, like the billing ledger).
type BatchGroupFactory func(ctx context.Context, a *App) (consumers.BatchHandler, error)

func (a *App) groupRole(ctx context.Context, name string, factory GroupFactory, batchFactory BatchGroupFactory) (Role, error) {
	if err := a.OpenCodec(ctx); err != nil {
		return Role{}, err
	}
	var h consumers.Handler
	var bh consumers.BatchHandler
	var err error
	if batchFactory != nil {
		bh, err = batchFactory(ctx, a)
	} else {
		h, err = factory(ctx, a)
	}
	if err != nil {
		return Role{}, fmt.Errorf("consumer group %s: %w", name, err)
	}
	var groupTopics []string
	for _, g := range topics.Groups() {
		if g.Name == name {
			groupTopics = g.Topics
		}
	}
	r, err := consumers.New(consumers.Config{
		Group:        name,
		Topics:       groupTopics,
		Handler:      h,
		BatchHandler: bh,
		Codec:        a.Codec,
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
	})
	if err != nil {
		return Role{}, err
	}
	// Ready while its member is in the group, and while its dead-letter
	// topic can take a record.
	a.readyGroup(name, r.Ready)
	if err := a.readyKafka(topics.DeadLetterTopic(name)); err != nil {
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
	more, err := BuildRoles(ctx, a.RelayRole, a.APIRole, a.IngestRole, a.SchedulerRole, a.FinalizerRole, a.BillingJobsRole, a.LLMProxyRole, a.GatewayRole, a.OpsRole("dev"))
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
