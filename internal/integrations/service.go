package integrations

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/secretbox"
)

// Options are what Service is built from.
type Options struct {
	Cfg   *config.Config
	Pool  *pgxpool.Pool
	Redis *redis.Client
	Box   *secretbox.Box
	Log   *slog.Logger
	// Now is the clock (tests move it); it also times token caching.
	Now func() time.Time
	// HTTPClient calls third parties (default: a client with a 30 s timeout).
	HTTPClient *http.Client
	// Slack app OAuth credentials for oauth.v2.access. Empty disables Slack
	// installs (config.Config has no fields for them yet).
	SlackClientID, SlackClientSecret string
	// NangoIntegrationKeys maps preset ids to Nango integration keys when they
	// differ from the preset id.
	NangoIntegrationKeys map[string]string
}

// Service is the integrations domain: records, bindings, Slack
// installations, connectors, and the token boundary.
type Service struct {
	pool    *pgxpool.Pool
	box     *secretbox.Box
	log     *slog.Logger
	now     func() time.Time
	states  *stateStore
	presets Presets
	prod    bool

	github *GitHubApp // nil when GITHUB_APP_ID is unset
	nango  *Nango     // nil when NANGO_SECRET_KEY is unset
	slack  *Slack     // nil when the Slack client credentials are unset
	sentry *Sentry
	linear *Linear
}

// New builds the service from configuration. A GitHub App id without a
// usable private key is a configuration error.
func New(o Options) (*Service, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	cfg := o.Cfg
	s := &Service{
		pool: o.Pool, box: o.Box, log: o.Log, now: o.Now,
		states:  &stateStore{rdb: o.Redis},
		presets: DefaultPresets(o.NangoIntegrationKeys),
		prod:    cfg.Env == "production",
		sentry:  NewSentry(cfg.SentryAPIURL, o.HTTPClient),
		linear:  NewLinear(cfg.LinearAPIURL, o.HTTPClient),
	}
	if cfg.GitHubAppID != "" {
		if strings.TrimSpace(cfg.GitHubAppPrivateKey) == "" {
			return nil, errors.New("integrations: GITHUB_APP_PRIVATE_KEY must be set when GITHUB_APP_ID is")
		}
		key, err := ParseGitHubPrivateKey(cfg.GitHubAppPrivateKey)
		if err != nil {
			return nil, err
		}
		s.github = NewGitHubApp(cfg.GitHubAppID, key, cfg.GitHubAPIURL, o.HTTPClient, o.Now)
	}
	if cfg.NangoSecretKey != "" {
		s.nango = NewNango(cfg.NangoURL, cfg.NangoSecretKey, o.HTTPClient, o.Now)
	}
	if o.SlackClientID != "" && o.SlackClientSecret != "" {
		s.slack = NewSlack(cfg.SlackAPIURL, o.SlackClientID, o.SlackClientSecret, o.HTTPClient)
	}
	return s, nil
}

// Presets returns the provider table.
func (s *Service) Presets() Presets { return s.presets }

// Configured reports which brokers the deployment has settings for.
func (s *Service) Configured(p Provider) bool {
	switch p {
	case ProviderGitHubApp:
		return s.github != nil
	case ProviderNango:
		return s.nango != nil
	}
	return false
}

// Page is a list position: rows strictly before (At, ID) in (created_at
// DESC, id DESC) order, Limit+1 of them so the caller knows if more follow.
type Page struct {
	Limit int
	At    time.Time
	ID    string
}
