// Package integrations is the HTTP surface of external connectivity:
// integration records (GitHub App installations, Nango connections) and
// their repo bindings, personal connections, Slack installations, Sentry and
// Linear metadata, and the MCP connector catalog. Handlers are thin; the
// domain lives in internal/integrations, whose Service.GetToken is the only
// path to a live provider token. No route ever returns a token.
package integrations

import (
	"errors"
	"net/http"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

// Route tags.
const (
	tagIntegrations = "integrations"
	tagConnectors   = "connectors"
	tagSlack        = "slack"
)

// Options override settings (tests inject clients and credentials).
type Options struct {
	// Slack app OAuth client credentials (oauth.v2.access). Without them
	// Slack installs answer 503 not_configured.
	SlackClientID, SlackClientSecret string
	// HTTPClient calls third parties (default: 30 s timeout).
	HTTPClient *http.Client
	// NangoIntegrationKeys maps preset ids to Nango integration keys.
	NangoIntegrationKeys map[string]string
}

// Register registers the routes with the configured Slack app credentials.
func Register(s *api.Server) error {
	return RegisterWith(Options{SlackClientID: s.Cfg.SlackClientID, SlackClientSecret: s.Cfg.SlackClientSecret})(s)
}

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		svc, err := integrations.New(integrations.Options{
			Cfg: s.Cfg, Pool: s.Pool, Redis: s.Redis, Box: s.Box, Log: s.Log, Now: s.Now,
			HTTPClient: o.HTTPClient, SlackClientID: o.SlackClientID, SlackClientSecret: o.SlackClientSecret,
			NangoIntegrationKeys: o.NangoIntegrationKeys,
		})
		if err != nil {
			return err
		}
		h := &handlers{svc: svc, s: s}
		h.integrationRoutes()
		h.bindingRoutes()
		h.metadataRoutes()
		h.slackRoutes()
		h.connectorRoutes()
		h.importRoutes()
		h.onboardingRoutes()
		return nil
	}
}

type handlers struct {
	svc *integrations.Service
	s   *api.Server
}

// page reads ?limit and ?cursor into the domain's list position.
func page(c *api.Ctx) (integrations.Page, error) {
	p, err := c.Page()
	if err != nil {
		return integrations.Page{}, err
	}
	at, id := p.CursorArgs()
	if !api.IsUUID(id) {
		return integrations.Page{}, httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
	}
	return integrations.Page{Limit: p.Limit, At: at, ID: id}, nil
}

// apiError maps domain outcomes to the API's errors; what names the resource
// for not-found answers. Upstream failures name the provider and never carry
// a credential or a provider response body.
func apiError(err error, what string) error {
	if err == nil {
		return nil
	}
	var ve *integrations.ValidationError
	var ue *integrations.UpstreamError
	switch {
	case errors.As(err, &ve):
		fields := make([]httpapi.FieldError, len(ve.Fields))
		for i, f := range ve.Fields {
			fields[i] = httpapi.FieldError{Field: f.Field, Problem: f.Problem}
		}
		return httpapi.Invalid(fields...)
	case errors.Is(err, integrations.ErrRepoNotFound):
		return httpapi.NotFound("repo")
	case errors.Is(err, integrations.ErrBindingNotFound):
		return httpapi.NotFound("connection")
	case errors.Is(err, integrations.ErrNotFound):
		return httpapi.NotFound(what)
	case errors.Is(err, integrations.ErrPrivateNeedsCreator):
		return httpapi.Forbidden("only the member who connected an integration can make it private")
	case errors.Is(err, integrations.ErrForbidden):
		return httpapi.Forbidden("only an admin or the member who connected it can change this " + what)
	case errors.Is(err, integrations.ErrInstallationClaimed):
		return httpapi.Conflict("installation_claimed", "this GitHub App installation is connected to another organization; disconnect it there first")
	case errors.Is(err, integrations.ErrConnectorNameTaken):
		return httpapi.Conflict("connector_name_taken", "another connector of this organization has that name")
	case errors.Is(err, integrations.ErrConflict):
		return httpapi.Conflict("", "this connection is already registered in this organization under another provider or privately by another member")
	case errors.Is(err, integrations.ErrInactive):
		return httpapi.Conflict("integration_inactive", "the integration is not active; re-authorize it")
	case errors.Is(err, integrations.ErrAmbiguous):
		return httpapi.Conflict("ambiguous", "more than one match")
	case errors.Is(err, integrations.ErrNotConfigured):
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: "not_configured",
			Message: "this provider is not configured on this deployment"}
	case errors.As(err, &ue):
		return httpapi.Unavailable(upstreamMessage(ue))
	}
	return err
}

func upstreamMessage(ue *integrations.UpstreamError) string {
	p := ue.Provider
	switch {
	case errors.Is(ue, integrations.ErrUpstreamUnauthorized):
		return p + " rejected the credentials"
	case errors.Is(ue, integrations.ErrReauthRequired):
		return p + " could not refresh the connection; re-authorize the integration"
	case errors.Is(ue, integrations.ErrSuspended):
		return p + " reports the installation as suspended"
	case errors.Is(ue, integrations.ErrUpstreamNotFound):
		return p + " no longer has this connection"
	case errors.Is(ue, integrations.ErrUpstreamRejected):
		return p + " rejected the request"
	default:
		return p + " is unavailable"
	}
}
