package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/triggers/llmgate"
	"github.com/proliferate/proliferate/internal/triggers/llmjudge"
	"github.com/proliferate/proliferate/producers/ingest"
	"github.com/proliferate/proliferate/producers/poller"
	"github.com/proliferate/proliferate/producers/scheduler"
	"github.com/proliferate/proliferate/topics"
)

// IngestRole serves the webhook endpoints on INGEST_ADDR: verify, produce to
// webhooks.raw with acks=all (large bodies by reference to the blob store),
// answer.
func (a *App) IngestRole(ctx context.Context) (Role, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return Role{}, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return Role{}, err
	}
	box, err := a.SecretBox()
	if err != nil {
		return Role{}, err
	}
	cl, err := a.NewKafkaClient("ingest", ingest.ClientOptions()...)
	if err != nil {
		return Role{}, err
	}
	// Bodies over INGEST_INLINE_BODY_BYTES go to the blob store, and
	// webhooks.raw carries a reference.
	store, err := a.BlobStore()
	if err != nil {
		return Role{}, err
	}
	srv, err := ingest.New(ingest.Deps{Cfg: a.Cfg, Log: a.Log, Pool: a.Pool, Kafka: cl, Codec: a.Codec, Box: box, Blobs: store})
	if err != nil {
		return Role{}, err
	}
	// Ready when it can route (Postgres) and write webhooks.raw (a broker
	// answers with a leader for every partition); otherwise it could only
	// answer 503. The blob store is deliberately not a readiness check:
	// every replica shares it, and without it ingest still takes every body
	// up to INGEST_INLINE_BODY_BYTES (nearly all of them), answering 503
	// only to the large ones.
	a.readyPostgres()
	if err := a.readyKafka(topics.WebhooksRaw); err != nil {
		return Role{}, err
	}
	ln, err := net.Listen("tcp", a.Cfg.IngestAddr)
	if err != nil {
		return Role{}, fmt.Errorf("ingest on INGEST_ADDR=%s: %w", a.Cfg.IngestAddr, err)
	}
	a.ingestAddr.Store(new(ln.Addr().String()))
	a.Log.Info("ingest listening", "addr", ln.Addr().String(), "paths", "/webhooks/github /webhooks/nango /webhooks/direct/{provider} /webhooks/t/{path}")
	return serveRole("ingest", ln, srv.Handler(), a.Cfg.ShutdownTimeout), nil
}

// IngestAddr is where ingest listens once IngestRole started ("" before).
func (a *App) IngestAddr() string {
	if p := a.ingestAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// serveRole serves h on ln until ctx ends, then shuts down gracefully.
func serveRole(name string, ln net.Listener, h http.Handler, grace time.Duration) Role {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return Role{name, func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
			defer cancel()
			err := srv.Shutdown(sctx)
			if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
				err = e
			}
			return err
		}
	}}
}

// SchedulerRole runs the cron scheduler and the poller: due schedules queue
// exactly one run per tick, due poll groups are polled once per interval,
// across any number of replicas.
func (a *App) SchedulerRole(ctx context.Context) (Role, error) {
	if err := a.OpenCodec(ctx); err != nil {
		return Role{}, err
	}
	svc, err := a.Integrations(ctx) // opens Postgres and Redis
	if err != nil {
		return Role{}, err
	}
	gate, err := a.triggerLLM(ctx, "poller")
	if err != nil {
		return Role{}, err
	}
	sched := scheduler.New(scheduler.Deps{Pool: a.Pool, Codec: a.Codec, Log: a.Log.With("role", "scheduler"), Tick: a.Cfg.SchedulerTick})
	poll := poller.New(poller.Deps{Pool: a.Pool, Redis: a.Redis, Codec: a.Codec, Log: a.Log.With("role", "poller"),
		Tokens: svc, LinearAPIURL: a.Cfg.LinearAPIURL, Tick: a.Cfg.SchedulerTick, LLM: gate})
	reaper, err := a.orgReaper(ctx, svc)
	if err != nil {
		return Role{}, err
	}
	// Schedules and polls are claimed in Postgres (runs leave through the
	// outbox); poll groups are locked in Redis.
	a.readyPostgres()
	a.readyRedis()
	return Role{"scheduler", func(ctx context.Context) error {
		return RunRoles(ctx, Role{"cron", sched.Run}, Role{"poller", poll.Run}, Role{"org-deletion", reaper.Run})
	}}, nil
}

// triggerProcessorHandler is the trigger processor's handler: webhook
// bodies over INGEST_INLINE_BODY_BYTES are in the blob store.
func (a *App) triggerProcessorHandler(ctx context.Context) (consumers.Handler, error) {
	svc, err := a.Integrations(ctx)
	if err != nil {
		return nil, err
	}
	a.readyPostgres()
	store, err := a.BlobStore()
	if err != nil {
		return nil, err
	}
	a.readyBlobStore(store)
	name := triggerprocessor.Group.Name
	gate, err := a.triggerLLM(ctx, name)
	if err != nil {
		return nil, err
	}
	return triggerprocessor.Handler(triggerprocessor.Deps{Pool: a.Pool, Codec: a.Codec,
		Log: a.Log.With("group", name), Integrations: svc, Blobs: store,
		LLM: gate}), nil
}

// triggerLLM is the gate through which the trigger processor and the poller
// ask automations' LLM filter and analysis prompts, with the agent's model
// (the scripted LLM in development). Without a model (production without
// ANTHROPIC_API_KEY) the filters follow TRIGGER_LLM_FAIL_OPEN and analyses
// are recorded as failed.
func (a *App) triggerLLM(ctx context.Context, who string) (*llmgate.Gate, error) {
	g := &llmgate.Gate{Pool: a.Pool, Codec: a.Codec, FailOpen: a.Cfg.TriggerLLMFailOpen, Log: a.Log.With("component", "trigger-llm", "role", who)}
	llm, err := a.agentLLM(ctx)
	if err != nil {
		g.Log.Warn("no model for automations' LLM filter and analysis prompts", "error", err)
		return g, nil
	}
	g.Judge, err = llmjudge.New(llmjudge.Config{BaseURL: llm.BaseURL, APIKey: llm.APIKey, Model: a.Cfg.TriggerLLMModel,
		Timeout: a.Cfg.TriggerLLMTimeout, MaxEventBytes: a.Cfg.TriggerLLMMaxEventBytes})
	return g, err
}
