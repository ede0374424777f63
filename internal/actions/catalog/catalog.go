// Package catalog builds the action sources a session has and the
// credentials to run them.
// It implements invocations.Sources for the gateway.
//
// Which sources a session has:
//   - Provider sources (linear, sentry): the integrations bound to the
//     session through session_connections. A session with no binding to an
//     action provider falls back to the organization's active integrations of
//     those providers that the session may see (visibility org, or private
//     to the person who started the session). Explicit bindings are the
//     whole set: a session bound to a Linear integration does not also get
//     the org's Sentry. With several candidates for one provider the oldest
//     (created_at, id) wins, so the choice is stable. Inactive integrations
//     (expired, revoked, …) are not sources: they yield no token.
//   - slack: when the organization has an active Slack installation. Its
//     bot token is decrypted by integrations at call time. With several
//     active workspaces the most recently installed one is used. Slack is
//     not an integrations row, so its integration id is nil.
//   - connector:<uuid>: every enabled org_connectors row of the
//     organization, as an MCP source (package mcp). Its integration id is
//     nil.
//
// Credentials never leave the gateway: Get resolves provider tokens when it
// is called (integrations.Service.TokenFor, the decrypted Slack bot token)
// and hands them over only in ExecContext.Token; a connector's auth names an
// org-wide secret by key, which the mcp.Config.Auth.Secret closure resolves
// and decrypts at every HTTP request to the server, so a rotated secret
// takes effect on the next call and the value is never in an ExecContext,
// an error or a log line.
//
// Connector risk policy: a connector's per-tool and default modes
// (allow / require_approval / deny) are fed to the MCP source as risk
// levels whose inferred mode is that mode (read / write / danger, see
// actions.InferMode), so the mode cascade enforces them below any explicit
// automation or org override.
//
// Drift: a connector tool is drifted when the admin
// reviewed it (its tool_risk_overrides entry carries a hash) and the
// definition's hash no longer matches. A tool never reviewed has nothing to
// drift from and is not drifted (its mode is inferred from its risk
// anyway). Because a reviewed tool's risk is always the admin's own mode,
// the risk level is not part of what can drift: a hash computed under any
// risk level matches, so changing a tool's mode does not make it drifted;
// changing its id or its parameter schema (after the normalisation of
// actions.DefinitionHash) does. A reviewed tool is checked against the
// server's current definition: Drifted fetches tools/list afresh (one round
// trip per invocation of a reviewed connector tool, shared with the cache)
// so a tool changed on the server is held on the very next invocation,
// whatever the 5-minute cache holds. Unreviewed tools cost no extra fetch.
// The definitions seen under each reviewable hash are recorded
// (reviews.go), so a drifted tool's approval request shows the diff from
// the reviewed definition to the current one.
//
// MCP sources are cached per connector, keyed by the row's updated_at: an
// edit rebuilds the source (closing the old one), otherwise the same source
// serves every request, so its MCP session and its 5-minute tools/list cache
// are shared across requests. Sources of connectors that disappeared from an
// org's enabled list are closed when that org is next listed. Close closes
// them all.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/providers"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Source ids of the provider sources.
const (
	SourceLinear = "linear"
	SourceSentry = "sentry"
	SourceSlack  = "slack"
)

// integrationProviders are the provider sources backed by integrations rows
// (integrations.integration_id), in listing order.
var integrationProviders = []string{SourceLinear, SourceSentry}

// MCPOptions tune every connector source (zero values take mcp's defaults:
// 15 s tools/list, 30 s tools/call, 5 min tool cache).
type MCPOptions struct {
	ListTimeout     time.Duration
	CallTimeout     time.Duration
	CacheTTL        time.Duration
	ProtocolVersion string
	// HTTPClient's transport carries the requests to MCP servers.
	HTTPClient *http.Client
}

// Deps are what a Catalog is built from.
type Deps struct {
	Pool         *pgxpool.Pool
	Integrations *integrations.Service
	// Secrets resolves connector auth secrets (OrgSecrets in production).
	Secrets   SecretResolver
	Providers providers.Config
	MCP       MCPOptions
	// Now is the clock of the connectors' tool caches (nil: time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// Catalog implements invocations.Sources. Safe for concurrent use.
type Catalog struct {
	pool     *pgxpool.Pool
	integ    *integrations.Service
	secrets  SecretResolver
	registry *providers.Registry
	mcpOpts  MCPOptions
	now      func() time.Time
	log      *slog.Logger

	mu     sync.Mutex
	conns  map[string]*cachedConnector // by connector id
	closed bool
	// recorded: the definitions this process stored (reviews.go).
	recorded map[string]bool
}

var _ invocations.Sources = (*Catalog)(nil)

// New builds the catalog. It does not reach the network.
func New(d Deps) *Catalog {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Providers.Logger == nil {
		d.Providers.Logger = d.Log
	}
	return &Catalog{
		pool: d.Pool, integ: d.Integrations, secrets: d.Secrets,
		registry: providers.NewRegistry(d.Providers),
		mcpOpts:  d.MCP, now: d.Now, log: d.Log.With("component", "actions-catalog"),
		conns: map[string]*cachedConnector{}, recorded: map[string]bool{},
	}
}

// List returns the session's sources with their actions: provider sources
// (sorted by id), then connectors (oldest first). A source that cannot list
// its actions (an unreachable connector) is left out and logged.
func (c *Catalog) List(ctx context.Context, sess sessions.Session) ([]invocations.Available, error) {
	ec := actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID}
	var out []invocations.Available
	bound, err := c.providerIntegrations(ctx, sess)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(bound)+1)
	for _, p := range integrationProviders {
		if _, ok := bound[p]; ok {
			ids = append(ids, p)
		}
	}
	hasSlack, err := c.hasSlack(ctx, sess.OrgID)
	if err != nil {
		return nil, err
	}
	if hasSlack {
		ids = append(ids, SourceSlack)
	}
	for _, id := range ids {
		src, ok := c.registry.Source(id)
		if !ok {
			continue
		}
		defs, err := src.ListActions(ctx, ec)
		if err != nil {
			c.log.WarnContext(ctx, "action source left out: listing failed", "org_id", sess.OrgID,
				"session_id", sess.ID, "source", id, "error", err)
			continue
		}
		out = append(out, invocations.Available{Integration: id, DisplayName: src.DisplayName(), Actions: defs})
	}

	conns, err := c.integ.ListEnabledConnectors(ctx, sess.OrgID)
	if err != nil {
		return nil, fmt.Errorf("catalog: list connectors: %w", err)
	}
	c.prune(sess.OrgID, conns)
	avail := make([]*invocations.Available, len(conns))
	var wg sync.WaitGroup
	for i, conn := range conns {
		src, err := c.connectorSource(conn)
		if err != nil {
			c.log.WarnContext(ctx, "connector left out: unusable definition", "org_id", sess.OrgID,
				"connector_id", conn.ID, "connector", conn.Name, "error", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defs, err := src.ListActions(ctx, ec)
			if err != nil {
				c.log.WarnContext(ctx, "connector left out: tools/list failed", "org_id", sess.OrgID,
					"session_id", sess.ID, "connector_id", conn.ID, "connector", conn.Name, "error", err)
				return
			}
			avail[i] = &invocations.Available{Integration: src.ID(), DisplayName: src.DisplayName(), Actions: defs}
		}()
	}
	wg.Wait()
	for _, a := range avail {
		if a != nil {
			out = append(out, *a)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Get returns one of the session's sources with its execution context and
// integration id (nil for slack and connectors). ErrUnknownIntegration when
// the session has no such source (including another organization's). A
// provider whose token cannot be obtained (the broker is down) is an
// *actions.ExecError naming the provider, never the credential.
func (c *Catalog) Get(ctx context.Context, sess sessions.Session, sourceID string) (actions.Source, actions.ExecContext, *string, error) {
	ec := actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID}
	switch {
	case sourceID == SourceLinear || sourceID == SourceSentry:
		bound, err := c.providerIntegrations(ctx, sess)
		if err != nil {
			return nil, ec, nil, err
		}
		itID, ok := bound[sourceID]
		if !ok {
			return nil, ec, nil, unknown(sourceID)
		}
		tok, err := c.integ.TokenFor(ctx, sess.OrgID, itID)
		if err != nil {
			return nil, ec, nil, c.tokenError(ctx, sess, sourceID, err)
		}
		src, _ := c.registry.Source(sourceID)
		ec.Token = tok.Value
		return src, ec, &itID, nil
	case sourceID == SourceSlack:
		tok, err := c.slackToken(ctx, sess.OrgID)
		if err != nil {
			return nil, ec, nil, c.tokenError(ctx, sess, sourceID, err)
		}
		src, _ := c.registry.Source(SourceSlack)
		ec.Token = tok.Value
		return src, ec, nil, nil
	case strings.HasPrefix(sourceID, actions.ConnectorPrefix):
		conn, err := c.connector(ctx, sess.OrgID, sourceID)
		if err != nil {
			return nil, ec, nil, err
		}
		if !conn.Enabled {
			return nil, ec, nil, unknown(sourceID)
		}
		src, err := c.connectorSource(conn)
		if err != nil {
			return nil, ec, nil, fmt.Errorf("%w: %s: %v", invocations.ErrUnknownIntegration, sourceID, err)
		}
		return src, ec, nil, nil
	}
	return nil, ec, nil, unknown(sourceID)
}

// Drifted checks a connector tool against its review: def (as listed) for
// a tool never reviewed, the definition the server lists now for a
// reviewed one (see the package comment and reviews.go); the zero Drift
// for provider sources.
func (c *Catalog) Drifted(ctx context.Context, sess sessions.Session, sourceID string, def actions.Definition) (invocations.Drift, error) {
	if !strings.HasPrefix(sourceID, actions.ConnectorPrefix) {
		return invocations.Drift{}, nil
	}
	conn, err := c.connector(ctx, sess.OrgID, sourceID)
	if err != nil {
		return invocations.Drift{}, err
	}
	o, ok := conn.ToolOverrides[def.ID]
	if !ok || o.Hash == "" {
		// Never reviewed: nothing to drift from.
		return invocations.Drift{Current: &def, CurrentHash: actions.DefinitionHash(def)}, nil
	}
	// A review is about to authorize the call: decide against the server's
	// current definition, not the (up to CacheTTL old) cached one.
	cur, listed, err := c.current(ctx, sess, conn, def.ID)
	if err != nil {
		return invocations.Drift{}, err
	}
	out := invocations.Drift{ReviewedHash: o.Hash}
	if listed {
		out.Current, out.CurrentHash = &cur, actions.DefinitionHash(cur)
	}
	if listed && actions.MatchesHash(cur, o.Hash) {
		// The reviewed definition itself: keep it for a later diff.
		c.recordDefinition(ctx, conn.ID, o.Hash, cur, false)
		return out, nil
	}
	// Changed, or a reviewed tool the server no longer lists.
	out.Drifted = true
	if listed {
		c.recordDefinition(ctx, conn.ID, out.CurrentHash, cur, false)
	}
	reviewed, err := c.reviewedDefinition(ctx, conn.ID, def.ID, o.Hash)
	if err != nil {
		return invocations.Drift{}, err
	}
	diff := actions.DiffDefinitions(reviewed, out.Current)
	out.Diff = &diff
	return out, nil
}

// CurrentDefinition fetches a connector tool's definition from its server
// now (mcp.Source.Current: never from the cache); ok is false when the
// server no longer lists it. ErrUnknownIntegration for a connector the
// session does not have (another org's, disabled, deleted).
func (c *Catalog) CurrentDefinition(ctx context.Context, sess sessions.Session, sourceID, actionID string) (actions.Definition, bool, error) {
	if !strings.HasPrefix(sourceID, actions.ConnectorPrefix) {
		return actions.Definition{}, false, unknown(sourceID)
	}
	conn, err := c.connector(ctx, sess.OrgID, sourceID)
	if err != nil {
		return actions.Definition{}, false, err
	}
	if !conn.Enabled {
		return actions.Definition{}, false, unknown(sourceID)
	}
	return c.current(ctx, sess, conn, actionID)
}

func (c *Catalog) current(ctx context.Context, sess sessions.Session, conn integrations.Connector, actionID string) (actions.Definition, bool, error) {
	src, err := c.connectorSource(conn)
	if err != nil {
		return actions.Definition{}, false, fmt.Errorf("%w: %s%s: %v", invocations.ErrUnknownIntegration, actions.ConnectorPrefix, conn.ID, err)
	}
	return src.Current(ctx, actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID}, actionID)
}

// Close closes every cached connector source; the catalog serves no
// connector afterwards.
func (c *Catalog) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*cachedConnector{}
	c.mu.Unlock()
	var errs []error
	for _, e := range conns {
		if err := e.src.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close connector %s: %w", e.id, err))
		}
	}
	return errors.Join(errs...)
}

func unknown(sourceID string) error {
	return fmt.Errorf("%w: %q", invocations.ErrUnknownIntegration, sourceID)
}

// tokenError maps a credential failure: a source the session no longer has
// (inactive, removed) is unknown; anything else is a failed execution whose
// message names the provider and the kind of failure.
func (c *Catalog) tokenError(ctx context.Context, sess sessions.Session, sourceID string, err error) error {
	if errors.Is(err, integrations.ErrNotFound) || errors.Is(err, integrations.ErrInactive) {
		return unknown(sourceID)
	}
	c.log.WarnContext(ctx, "action credentials unavailable", "org_id", sess.OrgID, "session_id", sess.ID,
		"source", sourceID, "error", err)
	return &actions.ExecError{Message: sourceID + ": the integration's credentials could not be obtained", Err: err}
}

// providerIntegrations maps each provider source of the session to the
// integration that backs it (see the package comment).
func (c *Catalog) providerIntegrations(ctx context.Context, sess sessions.Session) (map[string]string, error) {
	q := integrationsdb.New(c.pool)
	bound, err := q.SessionProviderIntegrations(ctx, integrationsdb.SessionProviderIntegrationsParams{
		OrgID: sess.OrgID, SessionID: sess.ID, Providers: integrationProviders})
	if err != nil {
		return nil, fmt.Errorf("catalog: session connections: %w", err)
	}
	if len(bound) == 0 {
		org, err := q.OrgProviderIntegrations(ctx, integrationsdb.OrgProviderIntegrationsParams{
			OrgID: sess.OrgID, Providers: integrationProviders, CreatedBy: sess.CreatedBy})
		if err != nil {
			return nil, fmt.Errorf("catalog: org integrations: %w", err)
		}
		for _, r := range org {
			bound = append(bound, integrationsdb.SessionProviderIntegrationsRow{Provider: r.Provider, ID: r.ID, Active: true})
		}
	}
	// Explicit bindings are the whole set: an inactive bound integration is
	// no source and does not fall back to the org's.
	out := map[string]string{}
	for _, b := range bound {
		if _, ok := out[b.Provider]; !ok && b.Active {
			out[b.Provider] = b.ID
		}
	}
	return out, nil
}

func (c *Catalog) hasSlack(ctx context.Context, orgID string) (bool, error) {
	ok, err := integrationsdb.New(c.pool).HasActiveSlackBot(ctx, orgID)
	if err != nil {
		return false, fmt.Errorf("catalog: slack installation: %w", err)
	}
	return ok, nil
}

// slackToken is the bot token of the org's active installation, the most
// recently installed one when there are several.
func (c *Catalog) slackToken(ctx context.Context, orgID string) (integrations.Token, error) {
	tok, err := c.integ.SlackBotToken(ctx, orgID)
	if !errors.Is(err, integrations.ErrAmbiguous) {
		return tok, err
	}
	id, err := integrationsdb.New(c.pool).LatestActiveSlackInstallation(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return integrations.Token{}, integrations.ErrNotFound
	}
	if err != nil {
		return integrations.Token{}, fmt.Errorf("catalog: slack installation: %w", err)
	}
	return c.integ.SlackInstallationToken(ctx, orgID, id)
}

// connector loads "connector:<uuid>" of org; anything else (a malformed id,
// another org's connector) is ErrUnknownIntegration.
func (c *Catalog) connector(ctx context.Context, orgID, sourceID string) (integrations.Connector, error) {
	raw := strings.TrimPrefix(sourceID, actions.ConnectorPrefix)
	id, err := uuid.Parse(raw)
	if err != nil || id.String() != strings.ToLower(raw) {
		return integrations.Connector{}, unknown(sourceID)
	}
	conn, err := c.integ.GetConnector(ctx, orgID, id.String())
	if errors.Is(err, integrations.ErrNotFound) {
		return conn, unknown(sourceID)
	}
	if err != nil {
		return conn, fmt.Errorf("catalog: %w", err)
	}
	return conn, nil
}
