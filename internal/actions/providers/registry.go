// Package providers holds the code-defined action sources and the Registry that maps an integration id to its source.
//
// Each provider is its own package: linear (GraphQL), sentry (REST) and
// slack (Web API), sharing the HTTP plumbing of package remote (30 s
// timeout per call, bounded reads, token scrubbing, strict parameter
// decoding). linearfake and sentryfake are in-process servers speaking the
// real wire formats, for this package's tests and anyone else's.
//
// Sources are stateless: the credential arrives with every call in
// actions.ExecContext.Token, resolved by the platform (for Slack,
// the bot token of the workspace installation). The registry
// therefore builds each source once and hands out the same value.
package providers

import (
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
	"github.com/proliferate/proliferate/internal/actions/providers/sentry"
	"github.com/proliferate/proliferate/internal/actions/providers/slack"
)

// ErrInvalidParams matches Execute errors for parameters a source cannot
// decode (wrong type, unknown field, missing value, a "." or ".." path
// segment): the caller's fault, answered 400, unlike the remote failures
// reported as *actions.ExecError. Those errors are also *actions.ParamsError.
var ErrInvalidParams = remote.ErrInvalidParams

// Config configures every provider source.
type Config struct {
	// LinearURL is Linear's GraphQL endpoint (LINEAR_API_URL; default
	// https://api.linear.app/graphql).
	LinearURL string
	// SentryURL is Sentry's API base including /api/0 (SENTRY_API_URL;
	// default https://sentry.io/api/0).
	SentryURL string
	// SlackURL is the Slack Web API base (SLACK_API_URL; default
	// https://slack.com/api).
	SlackURL string
	// HTTPClient sends every request (default: one new http.Client each).
	HTTPClient *http.Client
	// Timeout bounds each call (default 30 s).
	Timeout time.Duration
	// MaxResponseBytes bounds each answer (default 5 MiB).
	MaxResponseBytes int64
	Logger           *slog.Logger
}

// Constructor builds a source from the shared configuration.
type Constructor func(Config) actions.Source

// Constructors maps each integration id to its source's constructor.
func Constructors() map[string]Constructor {
	return map[string]Constructor{
		"linear": func(c Config) actions.Source {
			return linear.New(linear.Options{BaseURL: c.LinearURL, HTTPClient: c.HTTPClient, Timeout: c.Timeout,
				MaxResponseBytes: c.MaxResponseBytes, Logger: c.Logger})
		},
		"sentry": func(c Config) actions.Source {
			return sentry.New(sentry.Options{BaseURL: c.SentryURL, HTTPClient: c.HTTPClient, Timeout: c.Timeout,
				MaxResponseBytes: c.MaxResponseBytes, Logger: c.Logger})
		},
		"slack": func(c Config) actions.Source {
			return slack.New(slack.Options{BaseURL: c.SlackURL, HTTPClient: c.HTTPClient, Timeout: c.Timeout,
				MaxResponseBytes: c.MaxResponseBytes, Logger: c.Logger})
		},
	}
}

// Registry resolves integration ids ("linear", "sentry", "slack") to
// sources. It is immutable and safe for concurrent use.
type Registry struct {
	sources map[string]actions.Source
}

// NewRegistry builds every provider source with cfg.
func NewRegistry(cfg Config) *Registry {
	r := &Registry{sources: map[string]actions.Source{}}
	for id, ctor := range Constructors() {
		r.sources[id] = ctor(cfg)
	}
	return r
}

// Source returns the source of an integration id.
func (r *Registry) Source(integrationID string) (actions.Source, bool) {
	s, ok := r.sources[integrationID]
	return s, ok
}

// IDs lists the integration ids, sorted.
func (r *Registry) IDs() []string {
	ids := make([]string, 0, len(r.sources))
	for id := range r.sources {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
