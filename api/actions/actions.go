// Package actions is the REST API of agent actions: the organization's inbox of invocations, the action
// modes at org and automation scope, the actions an automation's
// integrations offer with the mode each one would get, and the live
// preflight of an MCP connector. Handlers are thin: the mode cascade is
// internal/actions (ResolveMode), connector access internal/actions/mcp.
//
// Decisions:
//   - Every route is org-scoped; an id of another organization is 404,
//     like a missing one. Reads are for members, mode changes and
//     connector validation for admins and owners.
//   - Mode keys are "<source>:<action>" (actions.ModeKey), the key the
//     cascade reads: source is linear, sentry, slack or
//     connector:<uuid> of a connector of the caller's organization, and
//     action an action that source has (a provider's static definition; a
//     connector tool reviewed in its overrides or listed by the server
//     now), else 422 naming the key and nothing is stored. A mode
//     is allow, require_approval or deny (422 otherwise); a null mode
//     clears the key (without the connector check, so keys of a deleted
//     connector can be cleaned up). Writes are one jsonb_set / "-"
//     statement, so two admins changing different keys never lose each
//     other's change; a map holds at most MaxModes keys.
//   - A connector's configured modes (risk_policy.default_mode and the
//     per-tool modes of tool_risk_overrides) become its tools' risk hints
//     (allow → read, require_approval → write, deny → danger), so the
//     inferred default of the cascade is the mode the admin configured.
//   - The inbox is invocations.Service.ListOrg (newest first, keyset
//     pages, session titles joined); one invocation is read here, scoped
//     to the caller's organization (the service's Get is per session).
//   - Integration actions list provider actions from their static
//     definitions and connector tools live (tools/list with a short
//     timeout, ConnectorTimeout). A connector that cannot be listed is
//     still shown, with its error and no actions, so the page renders.
//     Modes are resolved without the drift guard (drift is per reviewed
//     hash, decided at invocation time).
//   - Connector credentials are resolved server-side from the org-wide
//     secret the connector names, for each request to the MCP server; the
//     value never appears in a response or a log line.
package actions

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions/catalog"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/integrations"
)

// Route tags.
const (
	tagActions    = "actions"
	tagConnectors = "connectors"
)

// Defaults.
const (
	// DefaultConnectorTimeout bounds a connector's tools/list when the
	// integration actions of an automation are listed.
	DefaultConnectorTimeout = 5 * time.Second
	// DefaultValidateTimeout bounds a connector preflight.
	DefaultValidateTimeout = 15 * time.Second
	// MaxModes is the most keys one action_modes map holds.
	MaxModes = 1000
)

// Options override what Register derives from the server.
type Options struct {
	// Inbox lists the organization's invocations; nil builds the
	// invocations service in its API shape (Pool, Redis, Codec; no
	// sources).
	Inbox Inbox
	// ConnectorTimeout bounds each connector's tools/list in the
	// integration actions list (default DefaultConnectorTimeout).
	ConnectorTimeout time.Duration
	// ValidateTimeout bounds a connector preflight (default
	// DefaultValidateTimeout).
	ValidateTimeout time.Duration
	// HTTPClient carries requests to MCP servers (nil: the default
	// transport).
	HTTPClient *http.Client
}

// Register registers the routes with the defaults.
func Register(s *api.Server) error { return RegisterWith(Options{})(s) }

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		if s.Pool == nil {
			return fmt.Errorf("actions api: a database pool is required")
		}
		if o.Inbox == nil {
			codec, err := s.EventCodec()
			if err != nil {
				return fmt.Errorf("actions api: %w", err)
			}
			o.Inbox = invocations.New(invocations.Deps{Pool: s.Pool, Redis: s.Redis, Codec: codec, Log: s.Log})
		}
		if o.ConnectorTimeout <= 0 {
			o.ConnectorTimeout = DefaultConnectorTimeout
		}
		if o.ValidateTimeout <= 0 {
			o.ValidateTimeout = DefaultValidateTimeout
		}
		log := s.Log
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		integ, err := integrations.New(integrations.Options{Cfg: s.Cfg, Pool: s.Pool, Redis: s.Redis, Box: s.Box, Log: log, Now: s.Now,
			HTTPClient: o.HTTPClient})
		if err != nil {
			return fmt.Errorf("actions api: %w", err)
		}
		// The catalog lists and validates connectors (the API never
		// executes actions): one cached MCP source per connector revision.
		cat := catalog.New(catalog.Deps{Pool: s.Pool, Integrations: integ,
			Secrets: catalog.OrgSecrets{Pool: s.Pool, Box: s.Box},
			MCP:     catalog.MCPOptions{ListTimeout: o.ValidateTimeout, HTTPClient: o.HTTPClient}, Log: log})
		h := &handlers{pool: s.Pool, integ: integ, cat: cat, log: log, o: o}
		for _, r := range append(h.routes(), h.redactionRoutes()...) {
			s.Handle(r)
		}
		return nil
	}
}

type handlers struct {
	pool  *pgxpool.Pool
	integ *integrations.Service
	cat   *catalog.Catalog
	log   *slog.Logger
	o     Options
}

// Statuses are the invocation statuses ?status= accepts.
var Statuses = []string{invocations.StatusPending, invocations.StatusApproved, invocations.StatusExecuting,
	invocations.StatusCompleted, invocations.StatusDenied, invocations.StatusFailed, invocations.StatusExpired}

func (h *handlers) routes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/actions", Summary: "The organization's action inbox: invocations with their session titles, newest first",
			Tag: tagActions, Access: api.OrgMember, Response: api.Page[invocations.Invocation]{}, Handler: h.list,
			Query: append([]api.Param{{Name: "status", Description: "only invocations in this status: " + strings.Join(Statuses, ", ")}},
				api.PageQuery...)},
		{Method: http.MethodGet, Path: "/actions/modes", Summary: "The organization's action modes (\"<source>:<action>\" → mode)",
			Tag: tagActions, Access: api.OrgMember, Response: ModesResponse{}, Handler: h.orgModes},
		{Method: http.MethodPut, Path: "/actions/modes", Summary: "Set (or, with mode null, clear) an organization action mode",
			Tag: tagActions, Access: api.OrgAdmin, Request: ModeRequest{}, Response: ModesResponse{}, Handler: h.setOrgMode},
		{Method: http.MethodGet, Path: "/actions/:id", Summary: "One invocation of the organization",
			Tag: tagActions, Access: api.OrgMember, Response: invocations.Invocation{}, Handler: h.get},
		{Method: http.MethodGet, Path: "/automations/:id/integration-actions",
			Summary: "The actions of an automation's integrations and connectors with each one's resolved mode",
			Tag:     tagActions, Access: api.OrgMember, Response: IntegrationActionsResponse{}, Handler: h.integrationActions},
		{Method: http.MethodPut, Path: "/automations/:id/action-modes",
			Summary: "Set (or, with mode null, clear) an automation action mode (overrides the organization's)",
			Tag:     tagActions, Access: api.OrgAdmin, Request: ModeRequest{}, Response: ModesResponse{}, Handler: h.setAutomationMode},
		{Method: http.MethodPost, Path: "/connectors/:id/validate",
			Summary: "Preflight an MCP connector: connect with its stored auth, list its tools, report risks, hashes and warnings",
			Tag:     tagConnectors, Access: api.OrgAdmin, Response: ValidateResponse{}, Handler: h.validateConnector},
	}
}
