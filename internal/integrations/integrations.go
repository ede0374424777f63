// Package integrations is the external connectivity control plane: which
// services an organization can talk to (GitHub App installations, Nango OAuth
// connections, Slack workspaces, MCP connectors), how those records live and
// bind to repos, automations and sessions, and the one boundary that turns a
// record into a live credential (Service.GetToken). Nothing else in the
// platform reads or mints provider tokens.
//
// The HTTP surface is api/integrations; everything here also works without it
// (workers, the gateway and trigger services call Service directly).
package integrations

import (
	"errors"
	"fmt"
	"time"
)

// Provider is how an integration's credentials are obtained.
type Provider string

const (
	// ProviderGitHubApp is a GitHub App installation: tokens are minted with
	// the app's private key.
	ProviderGitHubApp Provider = "github-app"
	// ProviderNango is an OAuth connection held by the Nango broker.
	ProviderNango Provider = "nango"
)

// Status is an integration's lifecycle state.
type Status string

const (
	StatusActive    Status = "active"
	StatusExpired   Status = "expired"   // credentials no longer refresh; re-authorize
	StatusRevoked   Status = "revoked"   // the user or provider revoked access
	StatusDeleted   Status = "deleted"   // the installation was removed upstream
	StatusSuspended Status = "suspended" // the installation is suspended upstream
)

// transitions lists the statuses each status may move to. Re-authorizing
// (registering the same connection again after verifying it upstream) is the
// way back to active.
var transitions = map[Status][]Status{
	StatusActive:    {StatusExpired, StatusRevoked, StatusDeleted, StatusSuspended},
	StatusExpired:   {StatusActive, StatusRevoked, StatusDeleted},
	StatusSuspended: {StatusActive, StatusRevoked, StatusDeleted},
	StatusRevoked:   {StatusActive, StatusDeleted},
	StatusDeleted:   {StatusActive},
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool { _, ok := transitions[s]; return ok }

// CanBecome reports whether the lifecycle allows moving from s to to.
func (s Status) CanBecome(to Status) bool {
	for _, t := range transitions[s] {
		if t == to {
			return true
		}
	}
	return false
}

// sourcesOf lists the statuses from which to is reachable.
func sourcesOf(to Status) []string {
	var out []string
	for from, tos := range transitions {
		for _, t := range tos {
			if t == to {
				out = append(out, string(from))
			}
		}
	}
	return out
}

// Visibility says who in the organization sees an integration.
type Visibility string

const (
	VisibilityOrg     Visibility = "org"     // every member
	VisibilityPrivate Visibility = "private" // only its creator
)

// Creator is who connected an integration.
type Creator struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
}

// Integration is an org-scoped reference to an external connection. It never
// holds a token.
type Integration struct {
	ID       string   `json:"id"`
	OrgID    string   `json:"org_id"`
	Provider Provider `json:"provider"`
	// IntegrationID is what it connects to: the preset key (github, sentry,
	// linear). The name follows the original schema.
	IntegrationID        string         `json:"integration_id"`
	ConnectionID         string         `json:"connection_id"`
	ProviderConfigKey    string         `json:"provider_config_key,omitempty"`
	GitHubInstallationID int64          `json:"github_installation_id,omitempty"`
	DisplayName          *string        `json:"display_name"`
	Scopes               []string       `json:"scopes"`
	Status               Status         `json:"status"`
	StatusReason         string         `json:"status_reason,omitempty"`
	Visibility           Visibility     `json:"visibility"`
	Metadata             map[string]any `json:"metadata"`
	CreatedBy            *string        `json:"created_by"`
	Creator              *Creator       `json:"creator"`
	CreatedAt            time.Time      `json:"created_at"`
	UpdatedAt            time.Time      `json:"updated_at"`
}

// Domain outcomes callers branch on.
var (
	// ErrNotFound: no such row in the caller's organization (or not visible
	// to the caller).
	ErrNotFound = errors.New("integrations: not found")
	// ErrForbidden: the row is visible but the caller may not change it.
	ErrForbidden = errors.New("integrations: not allowed")
	// ErrInvalidTransition: the lifecycle forbids the requested status change.
	ErrInvalidTransition = errors.New("integrations: invalid status transition")
	// ErrInactive: the integration is not active, so it yields no token.
	ErrInactive = errors.New("integrations: integration is not active")
	// ErrNotConfigured: the platform lacks the settings for this provider
	// (GITHUB_APP_ID, NANGO_SECRET_KEY, Slack client…).
	ErrNotConfigured = errors.New("integrations: provider is not configured")
	// ErrAmbiguous: more than one row matches where exactly one is needed.
	ErrAmbiguous = errors.New("integrations: more than one match")
	// ErrConflict: a unique name or binding already exists.
	ErrConflict = errors.New("integrations: already exists")
)

// Upstream failure kinds, wrapped in *UpstreamError.
var (
	// ErrUpstreamUnavailable: network failure, 5xx, 429 or a malformed answer.
	ErrUpstreamUnavailable = errors.New("upstream unavailable")
	// ErrUpstreamUnauthorized: the provider rejected the credential we sent
	// (app JWT, Nango secret key, connection token).
	ErrUpstreamUnauthorized = errors.New("upstream rejected the credentials")
	// ErrUpstreamNotFound: the installation, connection or object is gone.
	ErrUpstreamNotFound = errors.New("upstream object not found")
	// ErrUpstreamRejected: any other 4xx (bad request, forbidden).
	ErrUpstreamRejected = errors.New("upstream rejected the request")
	// ErrSuspended: the GitHub App installation is suspended.
	ErrSuspended = errors.New("installation suspended")
	// ErrReauthRequired: the broker could not refresh the connection; a
	// person must authorize it again.
	ErrReauthRequired = errors.New("connection must be re-authorized")
)

// UpstreamError is a failed call to a third party. It names the provider and
// the HTTP status, never a credential or a response body.
type UpstreamError struct {
	Provider string // github, nango, slack, sentry, linear
	Op       string // what was being done
	Status   int    // HTTP status, 0 for transport failures
	Code     string // the provider's machine-readable error code, if any
	Err      error  // one of the ErrUpstream… kinds
}

func (e *UpstreamError) Error() string {
	s := fmt.Sprintf("%s: %s: %v", e.Provider, e.Op, e.Err)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d", e.Status)
		if e.Code != "" {
			s += ", " + e.Code
		}
		s += ")"
	}
	return s
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// UpstreamProvider returns the provider named by an upstream error in err's
// chain, or "".
func UpstreamProvider(err error) string {
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return ue.Provider
	}
	return ""
}

// FieldError is one invalid input field (mapped to the API's 422 details).
type FieldError struct {
	Field   string
	Problem string
}

// ValidationError lists invalid fields of a domain request.
type ValidationError struct{ Fields []FieldError }

func (e *ValidationError) Error() string {
	if len(e.Fields) == 0 {
		return "integrations: invalid input"
	}
	return "integrations: " + e.Fields[0].Field + ": " + e.Fields[0].Problem
}

func invalid(field, problem string) error {
	return &ValidationError{Fields: []FieldError{{field, problem}}}
}
