package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/billingledger"
	"github.com/proliferate/proliferate/consumers/billingrater"
	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm"
	"github.com/proliferate/proliferate/internal/obs"
	litellmproducer "github.com/proliferate/proliferate/producers/litellm"
	"github.com/proliferate/proliferate/topics"
)

// Ledger is the billing ledger of this process.
func (a *App) Ledger(ctx context.Context) (*billing.Ledger, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return nil, err
	}
	return &billing.Ledger{Pool: a.Pool, Codec: a.Codec, Grace: a.Cfg.GracePeriod, Log: a.Log.With("component", "billing-ledger")}, nil
}

// proxyPublicURL is the LLM proxy base URL sandboxes use: the configured
// one, else the in-process proxy of `make run`.
func (a *App) proxyPublicURL() string {
	for _, u := range []string{a.Cfg.LLMProxyPublicURL, a.Cfg.LLMProxyURL} {
		if u != "" {
			return u
		}
	}
	if p := a.llmProxyURL.Load(); p != nil {
		return *p
	}
	return ""
}

// LLMKeys is the issuer of per-session virtual LLM keys, nil when no proxy
// is configured (the agent then uses the gateway's model endpoint
// directly, which LLM_PROXY_REQUIRED forbids).
func (a *App) LLMKeys(ctx context.Context) (llmkeys.Issuer, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	public := a.proxyPublicURL()
	if public == "" {
		if a.Cfg.LLMProxyRequired {
			return nil, errors.New("LLM_PROXY_REQUIRED is set but no LLM proxy is configured (LLM_PROXY_URL)")
		}
		return nil, nil
	}
	if a.Cfg.LLMProxyKind == "litellm" {
		cl, err := a.liteLLMClient()
		if err != nil {
			return nil, err
		}
		return litellm.NewIssuer(litellm.IssuerDeps{Client: cl, Pool: a.Pool, PublicURL: public,
			KeyDuration: a.Cfg.LLMProxyKeyDuration, BillingEnabled: a.Cfg.BillingEnabled, Logger: a.Log.With("component", "llm-keys")})
	}
	if err := a.OpenRedis(ctx); err != nil {
		return nil, err
	}
	return llmproxy.NewKeys(llmproxy.KeysDeps{Pool: a.Pool, Redis: a.Redis, PublicURL: public,
		Duration: a.Cfg.LLMProxyKeyDuration, BillingEnabled: a.Cfg.BillingEnabled, Logger: a.Log.With("component", "llm-keys")})
}

func (a *App) liteLLMClient() (*litellm.Client, error) {
	admin := a.Cfg.LLMProxyAdminURL
	if admin == "" {
		admin = a.Cfg.LLMProxyURL
	}
	if admin == "" || a.Cfg.LLMProxyMasterKey == "" {
		return nil, errors.New("LLM_PROXY_KIND=litellm needs LLM_PROXY_URL (or LLM_PROXY_ADMIN_URL) and LLM_PROXY_MASTER_KEY")
	}
	return litellm.NewClient(litellm.ClientConfig{AdminURL: admin, MasterKey: a.Cfg.LLMProxyMasterKey})
}

// LLMProxyRole serves the built-in LLM proxy on LLM_PROXY_ADDR: every
// sandbox's model traffic with its own virtual key, priced per request
// into llm.spend. Upstream: LLM_UPSTREAM_URL, else Anthropic with
// ANTHROPIC_API_KEY, else (development) the scripted LLM.
func (a *App) LLMProxyRole(ctx context.Context) (Role, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return Role{}, err
	}
	if err := a.OpenRedis(ctx); err != nil {
		return Role{}, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return Role{}, err
	}
	upstream, key := a.Cfg.LLMUpstreamURL, a.Cfg.AnthropicAPIKey
	if upstream == "" {
		if key != "" {
			upstream = "https://api.anthropic.com/v1"
		} else {
			llm, err := a.agentLLM(ctx)
			if err != nil {
				return Role{}, fmt.Errorf("llm-proxy: set LLM_UPSTREAM_URL or ANTHROPIC_API_KEY: %w", err)
			}
			upstream, key = llm.BaseURL, llm.APIKey
		}
	}
	p, err := llmproxy.New(llmproxy.Deps{Pool: a.Pool, Redis: a.Redis, Codec: a.Codec,
		UpstreamURL: upstream, UpstreamKey: key, Logger: a.Log.With("role", "llm-proxy"), Registerer: a.Reg})
	if err != nil {
		return Role{}, err
	}
	// Keys, balances and the outbox of llm.spend are in Postgres;
	// revocations arrive through Redis. The upstream model is an outside
	// service and is not checked.
	a.readyPostgres()
	a.readyRedis()
	addr, errc, err := obs.Serve(ctx, a.Cfg.LLMProxyAddr, p)
	if err != nil {
		return Role{}, fmt.Errorf("llm-proxy on LLM_PROXY_ADDR=%s: %w", a.Cfg.LLMProxyAddr, err)
	}
	url := "http://" + addr
	a.llmProxyURL.Store(&url)
	a.Log.Info("llm proxy listening", "addr", addr, "upstream", strings.TrimSuffix(upstream, "/"))
	return Role{"llm-proxy", func(ctx context.Context) error {
		runErr := p.Run(ctx)
		if err := <-errc; err != nil {
			return err
		}
		return runErr
	}}, nil
}

func (a *App) enforcerHandler(ctx context.Context) (consumers.Handler, error) {
	if !a.Cfg.BillingEnabled {
		// BILLING_ENABLED=false: usage is recorded, nothing is paused.
		return func(context.Context, *consumers.Message) error { return nil }, nil
	}
	deps, err := a.enforcerDeps(ctx)
	if err != nil {
		return nil, err
	}
	a.readyPostgres()
	a.readyLLMKeys(deps.Keys)
	return enforcer.Handler(deps), nil
}

func (a *App) billingRaterHandler(context.Context) (consumers.Handler, error) {
	cl, err := a.NewKafkaClient("billing-rater-producer")
	if err != nil {
		return nil, err
	}
	a.onClose(cl.Close)
	if err := a.readyKafka(topics.BillingUsage); err != nil {
		return nil, err
	}
	return billingrater.Handler(billingrater.Deps{Producer: cl, Codec: a.Codec,
		Log: a.Log.With("group", billingrater.Group.Name)}), nil
}

// enforcerDeps pause the sessions of exhausted and suspended organizations
// through the gateway (which owns their sandboxes) and revoke their LLM
// keys.
func (a *App) enforcerDeps(ctx context.Context) (enforcer.Deps, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return enforcer.Deps{}, err
	}
	keys, err := a.LLMKeys(ctx)
	if err != nil {
		return enforcer.Deps{}, err
	}
	return enforcer.Deps{Pool: a.Pool, Pauser: enforcer.GatewayPauser{C: a.gatewayClient("enforcer")},
		Keys: keys, Log: a.Log.With("group", enforcer.Group.Name)}, nil
}

// BillingJobsRole runs the work around the ledger: the grace clock (on
// time, woken by NOTIFY), the enforcer's retry sweep, monthly partitions,
// the LiteLLM spend collector (LLM_PROXY_KIND=litellm), and with Autumn
// the usage poster, auto-top-up, trial activation and the nightly
// reconciliation. Each job runs once at a time across replicas.
func (a *App) BillingJobsRole(ctx context.Context) (Role, error) {
	ledger, err := a.Ledger(ctx)
	if err != nil {
		return Role{}, err
	}
	if _, err := billingjobs.NextRun(a.Cfg.ReconcileAt, time.Now()); err != nil {
		return Role{}, fmt.Errorf("BILLING_RECONCILE_AT: %w", err)
	}
	var ac *autumn.Client
	if a.Cfg.AutumnSecretKey != "" {
		ac = autumn.New(a.Cfg.AutumnURL, a.Cfg.AutumnSecretKey, 15*time.Second)
	}
	// Every job works on Postgres; Autumn, an outside service, is not
	// checked.
	a.readyPostgres()
	deps := billingjobs.Deps{Pool: a.Pool, Ledger: ledger, Autumn: ac, Log: a.Log.With("role", "billing-jobs")}
	topup := &billingjobs.TopUp{Deps: deps}
	rec := &billingjobs.Reconciler{Deps: deps, At: a.Cfg.ReconcileAt}
	jobs := []func(context.Context) error{
		(&billingjobs.Partitions{Deps: deps}).Run,
	}
	if a.Cfg.BillingEnabled {
		ed, err := a.enforcerDeps(ctx)
		if err != nil {
			return Role{}, err
		}
		a.readyLLMKeys(ed.Keys)
		jobs = append(jobs,
			(&billingjobs.GraceClock{Deps: deps, AfterExpire: func(ctx context.Context, c billing.Change) { _, _ = topup.Check(ctx, c.OrgID) }}).Run,
			enforcer.Sweeper{Deps: ed}.Run)
		if ac != nil {
			jobs = append(jobs,
				(&billingjobs.Outbox{Deps: deps, Interval: a.Cfg.BillingOutboxInterval, TopUp: topup, Reconciler: rec}).Run,
				topup.Run, (&billingjobs.Trial{Deps: deps}).Run, rec.Run)
		}
	}
	if a.Cfg.LLMProxyKind == "litellm" && a.Cfg.LLMProxyURL != "" {
		cl, err := a.liteLLMClient()
		if err != nil {
			return Role{}, err
		}
		kcl, err := a.NewKafkaClient("litellm-collector")
		if err != nil {
			return Role{}, err
		}
		a.onClose(kcl.Close)
		if err := a.readyKafka(topics.LLMSpend); err != nil {
			return Role{}, err
		}
		coll, err := litellmproducer.NewCollector(litellmproducer.CollectorDeps{Client: cl, Pool: a.Pool, Kafka: kcl, Codec: a.Codec,
			Interval: a.Cfg.LLMSpendSyncInterval, BillingEnabled: a.Cfg.BillingEnabled, Logger: a.Log.With("component", "litellm-collector")})
		if err != nil {
			return Role{}, err
		}
		jobs = append(jobs, coll.Run)
	}
	return Role{"billing-jobs", func(ctx context.Context) error {
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() { _ = j(ctx) })
		}
		wg.Wait()
		return nil
	}}, nil
}

// billingLedgerHandler applies one transaction per organization per
// fetched batch.
func (a *App) billingLedgerHandler(ctx context.Context) (consumers.BatchHandler, error) {
	l, err := a.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	a.readyPostgres()
	return billingledger.BatchHandler(billingledger.Deps{Ledger: l, Log: a.Log.With("group", billingledger.Group.Name)}), nil
}
