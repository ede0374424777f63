package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/sweeper"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/snapshots"
	"github.com/proliferate/proliferate/producers/meter"
)

// SessionStore is the sessions store of this process.
func (a *App) SessionStore(ctx context.Context) (*sessions.Store, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return nil, err
	}
	return &sessions.Store{Pool: a.Pool, Codec: a.Codec, MaxConcurrent: a.Cfg.MaxConcurrentSessions, Admit: a.billingGate()}, nil
}

// billingGate is the billing gate of session creation, resume and CLI
// connects (allows everything with BILLING_ENABLED=false).
func (a *App) billingGate() billing.Gate {
	return billing.Gate{Enabled: a.Cfg.BillingEnabled, Pool: a.Pool}
}

// agentLLM is the model the agent calls: the configured key (and base URL),
// or, without a key outside production, the scripted LLM served in process.
func (a *App) agentLLM(ctx context.Context) (sandbox.LLM, error) {
	if a.Cfg.AnthropicAPIKey != "" || a.Cfg.LLMBaseURL != "" {
		base := a.Cfg.LLMBaseURL
		if base == "" {
			base = "https://api.anthropic.com/v1"
		}
		return sandbox.LLM{ProviderID: "anthropic", BaseURL: base, APIKey: a.Cfg.AnthropicAPIKey}, nil
	}
	if a.Cfg.Env == "production" {
		return sandbox.LLM{}, errors.New("the gateway needs a model: set ANTHROPIC_API_KEY (or LLM_BASE_URL of a proxy); the scripted LLM is for development only")
	}
	a.llmSimMu.Lock()
	defer a.llmSimMu.Unlock()
	if a.llmSimLLM != nil {
		return *a.llmSimLLM, nil
	}
	sim := llmsim.New(llmsim.Options{Logger: a.Log.With("component", "llm-sim")})
	if dir := a.Cfg.LLMSimScriptsDir; dir != "" {
		if err := sim.LoadScripts(dir); err != nil {
			return sandbox.LLM{}, fmt.Errorf("LLMSIM_SCRIPTS_DIR: %w", err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sandbox.LLM{}, err
	}
	a.LLMSim = sim
	srv := &http.Server{Handler: sim.Handler()}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	url := "http://" + ln.Addr().String() + "/v1"
	a.Log.Warn("no ANTHROPIC_API_KEY: agents talk to the scripted LLM (llm-sim), not a real model",
		"llm_base_url", url, "hint", "a prompt containing [[script:hello]] (or bash, edit, complete, snapshot, env, slow) picks a script")
	llm := sandbox.LLM{ProviderID: "sim", BaseURL: url, APIKey: "sim", Model: "claude-sim"}
	a.llmSimLLM = &llm
	return llm, nil
}

// repoResolver lists a session's repositories (its configuration's, in
// order) with clone URLs and, where a GitHub integration is connected to a
// repo, an installation token.
func (a *App) repoResolver() hub.RepoResolver {
	return hub.RepoResolverFunc(func(ctx context.Context, s sessions.Session) ([]sandbox.Repo, error) {
		if s.ConfigurationID == nil {
			return nil, nil
		}
		list, err := prebuildsdb.New(a.Pool).ConfigurationRepoClones(ctx, prebuildsdb.ConfigurationRepoClonesParams{
			ConfigurationID: *s.ConfigurationID, OrgID: s.OrgID})
		if err != nil {
			return nil, err
		}
		var out []sandbox.Repo
		for _, x := range list {
			clone := x.GithubUrl
			if clone == "" {
				clone = "https://github.com/" + x.GithubRepoName + ".git"
			} else if strings.HasPrefix(clone, "https://github.com/") && !strings.HasSuffix(clone, ".git") {
				clone += ".git"
			}
			repo := sandbox.Repo{CloneURL: clone, WorkspacePath: x.WorkspacePath, Branch: x.DefaultBranch}
			if x.IntegrationID != "" {
				svc, err := a.Integrations(ctx)
				if err != nil {
					return nil, err
				}
				_, name, _ := strings.Cut(x.GithubRepoName, "/")
				tok, err := svc.TokenFor(ctx, s.OrgID, x.IntegrationID, integrations.ForRepository(name))
				if err != nil {
					return nil, fmt.Errorf("token for %s: %w", x.GithubRepoName, err)
				}
				repo.Token = tok.Value
			}
			out = append(out, repo)
		}
		return out, nil
	})
}

// githubTokens gives git push and pull-request creation the installation
// token of the GitHub integration connected to owner/repo in the session's
// organization (never another organization's); "" when none is connected.
func (a *App) githubTokens() gitops.TokenSource {
	return gitops.TokenSourceFunc(func(ctx context.Context, orgID, owner, repo string) (string, error) {
		integrationID, err := reposdb.New(a.Pool).ConnectedIntegrationByName(ctx, reposdb.ConnectedIntegrationByNameParams{
			OrgID: orgID, GithubRepoName: owner + "/" + repo})
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		svc, err := a.Integrations(ctx)
		if err != nil {
			return "", err
		}
		tok, err := svc.TokenFor(ctx, orgID, integrationID, integrations.ForRepository(repo))
		if err != nil {
			return "", err
		}
		return tok.Value, nil
	})
}

// GatewayRole serves the session gateway on GATEWAY_ADDR: WebSocket
// streaming, session HTTP routes and sandbox tool callbacks, with one hub
// per live session and a sandbox per session (SANDBOX_PROVIDER).
func (a *App) GatewayRole(ctx context.Context) (Role, error) {
	store, err := a.SessionStore(ctx)
	if err != nil {
		return Role{}, err
	}
	if err := a.OpenRedis(ctx); err != nil {
		return Role{}, err
	}
	llm, err := a.agentLLM(ctx)
	if err != nil {
		return Role{}, err
	}
	prov, err := a.newSandboxProvider(func() (*local.Provider, error) {
		return local.New(local.Options{DataDir: a.Cfg.SandboxDataDir, OpenCodeBin: a.Cfg.OpenCodeBin,
			Limits: sandboxLimits(a.Cfg), RequireLimits: a.Cfg.Env == "production",
			Timeout: a.Cfg.SandboxTimeout, Isolation: a.Cfg.SandboxIsolation, Logger: a.Log.With("component", "sandbox"),
			Egress: a.Cfg.SandboxEgress, EgressAllow: a.Cfg.SandboxEgressAllow, EgressPlatformHosts: egressPlatformHosts(a.Cfg), Registerer: a.Reg})
	})
	if err != nil {
		return Role{}, fmt.Errorf("sandbox provider: %w", err)
	}
	keys, err := a.LLMKeys(ctx)
	if err != nil {
		return Role{}, err
	}
	box, err := a.SecretBox()
	if err != nil {
		return Role{}, err
	}
	// Liveness as the owning gateway sees it: the meter runs on one replica
	// and its provider knows only this process's sandboxes.
	mtr, err := meter.New(meter.Deps{Pool: a.Pool, Codec: a.Codec, Provider: prov, Sessions: store, LLMKeys: keys,
		Liveness: hub.Liveness{Redis: a.Redis, Provider: prov},
		Interval: a.Cfg.MeterInterval, Log: a.Log.With("component", "compute-meter"), Registerer: a.Reg})
	if err != nil {
		return Role{}, fmt.Errorf("compute meter: %w", err)
	}
	host, _ := os.Hostname()
	book := snapshots.New(snapshots.Deps{Pool: a.Pool, Limits: a.snapshotLimits(), Providers: []sandbox.Provider{prov},
		Log: a.Log.With("component", "snapshots")})
	cleaner := snapshots.NewCleaner(book, snapshots.CleanerOptions{Every: a.Cfg.SnapshotCleanupInterval})
	prebuilt := a.prebuilt()
	tpub := a.transcriptPublisher()
	hubs := hub.NewManager(hub.Deps{
		Sessions: store, Provider: prov, Redis: a.Redis, InstanceID: host + "/" + uuid.NewString(),
		Log: a.Log.With("component", "hub"), GatewayURL: a.Cfg.GatewayPublicURL,
		LLM: llm, Repos: a.repoResolver(), SystemPrompt: a.sessionPrompt,
		Git:       hub.GitDeps{GitHub: &gitops.GitHub{BaseURL: a.Cfg.GitHubAPIURL, Tokens: a.githubTokens()}},
		Snapshots: book, Gate: a.bootGate(), LLMKeys: keys, GitFreshness: a.gitFreshness(), Prebuilt: prebuilt,
		Env: hub.SecretsEnv{DB: a.Pool, Box: box}, EnvRequestTimeout: a.Cfg.EnvRequestTimeout,
		Transcript: tpub, History: a.Pool,
		Services: hub.RepoServices{Store: &repos.Store{Pool: a.Pool}}, // reads only
		IdleTTL:  a.Cfg.HubIdleTTL, IdleCheckEvery: a.Cfg.IdleCheckInterval,
		IdleGrace: a.Cfg.IdleSnapshotDelay, HeadlessIdleGrace: a.Cfg.HeadlessIdleDelay,
		ExpiryLead: a.Cfg.ExpiryLead, ExpiryScanEvery: min(a.Cfg.IdleCheckInterval, a.Cfg.ExpiryLead/4),
		Previews: hub.PreviewDeps{PollEvery: a.Cfg.PreviewPollInterval, PortMin: a.Cfg.PreviewPortMin, PortMax: a.Cfg.PreviewPortMax,
			URL: gateway.PreviewLinks{Redis: a.Redis, PublicURL: a.Cfg.GatewayPublicURL, TTL: a.Cfg.PreviewLinkTTL}.URL},
	})
	builder := a.configBuilder(hubs, store, prebuilt)
	sw := sweeper.New(sweeper.Deps{Sessions: store, Pool: a.Pool, Redis: a.Redis, Provider: prov, Snapshots: book, LLMKeys: keys,
		Log: a.Log.With("component", "orphan-sweeper"), Every: a.Cfg.OrphanSweepInterval, Grace: a.Cfg.OrphanSweepGrace})
	apiServer, err := a.APIServer(ctx)
	if err != nil {
		return Role{}, err
	}
	cat, err := a.ActionCatalog(ctx)
	if err != nil {
		return Role{}, err
	}
	frames := gateway.NewSessionFrames(hubs, a.Redis, a.Log.With("component", "session-frames"))
	actionsSvc := a.actionService(cat, gateway.NewActionNotifier(frames, a.Log.With("component", "actions")))
	ln, err := a.listen("GATEWAY_ADDR", a.Cfg.GatewayAddr)
	if err != nil {
		return Role{}, fmt.Errorf("gateway on GATEWAY_ADDR=%s: %w", a.Cfg.GatewayAddr, err)
	}
	advertise := a.Cfg.GatewayAdvertiseURL
	if advertise == "" {
		advertise = advertiseURL(ln.Addr().String())
	}
	blobs, err := a.BlobStore()
	if err != nil {
		_ = ln.Close()
		return Role{}, fmt.Errorf("gateway: evidence blob store: %w", err)
	}
	gw, err := gateway.New(gateway.Deps{Cfg: a.Cfg, Log: a.Log.With("role", "gateway"), Pool: a.Pool, Redis: a.Redis,
		Codec: a.Codec, Hubs: hubs, Sessions: store, Authenticator: apiServer.Authenticator(), Actions: actionsSvc, AdvertiseURL: advertise,
		Repos: repoAccess{a}, Prebuilt: prebuilt, Builds: builder, Evidence: &evidence.Store{Pool: a.Pool, Blobs: blobs},
		Redactors: a.Redactors()})
	if err != nil {
		_ = ln.Close()
		return Role{}, err
	}
	// Sessions and the API it embeds live in Postgres; owner leases,
	// frames fan-out and LLM key revocations in Redis; sandboxes on the
	// local disk.
	a.readyPostgres()
	a.readyRedis()
	a.readySandboxDir(a.Cfg.SandboxDataDir)
	a.gatewayAddr.Store(new(ln.Addr().String()))
	a.Log.Info("gateway listening", "addr", ln.Addr().String(), "advertise_url", advertise, "sandbox_provider", prov.Name())
	serve := serveRole("gateway", ln, gw.Handler(), a.Cfg.ShutdownTimeout)
	return Role{"gateway", func(ctx context.Context) error {
		// Sessions of gateways that died are paused (orphaned) and resume
		// on their next connect; one sweep at a time across replicas.
		// Snapshots past retention, superseded or of deleted sessions are
		// deleted; one pass at a time across replicas.
		swCtx, stopSweep := context.WithCancel(ctx)
		var bg sync.WaitGroup
		bg.Go(func() { _ = sw.Run(swCtx) })
		bg.Go(func() { _ = cleaner.Run(swCtx) })
		// Configuration builds: stale ones fail, lost ones are claimed.
		bg.Go(func() { _ = builder.Run(swCtx) })
		// Running sessions are metered (one meter across replicas).
		bg.Go(func() { _ = mtr.Run(swCtx) })
		// Pending action approvals expire (ACTIONS_PENDING_TTL, ACTIONS_PENDING_TTL_AUTOMATION).
		bg.Go(func() { a.sweepInvocations(swCtx, actionsSvc, a.Cfg.ActionsSweepInterval) })
		err := serve.Run(ctx)
		stopSweep()
		bg.Wait()
		sctx, cancel := context.WithTimeout(context.Background(), a.Cfg.ShutdownTimeout)
		defer cancel()
		builder.Close() // its setup sessions stop before the hubs shut down
		hubs.Shutdown(sctx)
		tpub.Close(sctx) // what the hubs recorded reaches the outbox
		gw.Close(sctx)
		prov.Close()
		return err
	}}, nil
}

// advertiseURL is the URL other gateway replicas reach a gateway listening
// on addr at (GATEWAY_ADVERTISE_URL unset): http://addr, with a wildcard
// host (0.0.0.0, ::) replaced by this machine's hostname.
func advertiseURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		} else {
			host = "127.0.0.1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// snapshotLimits are the configured snapshot limits (billing plans plug in
// here).
func (a *App) snapshotLimits() snapshots.Limits {
	if a.Cfg.BillingEnabled {
		return billing.PlanLimits{Pool: a.Pool}
	}
	return snapshots.StaticLimits{MaxPerOrg: a.Cfg.SnapshotMaxPerOrg, RetentionDays: a.Cfg.SnapshotRetentionDays}
}

// GatewayAddr is where the gateway listens once GatewayRole started.
func (a *App) GatewayAddr() string {
	if p := a.gatewayAddr.Load(); p != nil {
		return *p
	}
	return ""
}
