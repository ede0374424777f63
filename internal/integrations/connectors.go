package integrations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
)

// Connector modes (per tool, and the connector's default).
const (
	ModeAllow           = "allow"
	ModeRequireApproval = "require_approval"
	ModeDeny            = "deny"
)

// Connector auth types. Credentials are never stored on the connector: auth
// names an org-wide secret by key, resolved when Actions calls the server.
const (
	AuthNone   = "none"
	AuthBearer = "bearer" // Authorization: Bearer <secret>
	AuthHeader = "header" // <header_name>: <secret>
)

// Connector transports.
const (
	TransportRemoteHTTP = "remote_http" // MCP streamable HTTP
	TransportSSE        = "sse"         // legacy HTTP+SSE
)

// Limits of a connector definition.
const (
	MaxToolOverrides = 500
)

// ConnectorAuth is how the platform authenticates to the MCP server.
type ConnectorAuth struct {
	Type       string `json:"type"`
	SecretKey  string `json:"secret_key,omitempty"`
	HeaderName string `json:"header_name,omitempty"`
}

// RiskPolicy is the mode of tools without an override.
type RiskPolicy struct {
	DefaultMode string `json:"default_mode"`
}

// ToolOverride is one tool's mode and the hash of the tool definition the
// admin confirmed it for (drift detection is Actions' job).
type ToolOverride struct {
	Mode string `json:"mode"`
	Hash string `json:"hash,omitempty"`
}

// Connector is an org-scoped MCP server definition. Integrations owns the
// catalog (storage, validation, enable/disable, tool modes and definition
// hashes); Actions connects to the server and enforces the modes. Checking a
// definition live (connect, tools/list, hash the tools, resolve the secret)
// is built with the MCP client in the actions work; until then validation is
// static plus the secret-key existence check.
type Connector struct {
	ID            string                  `json:"id"`
	OrgID         string                  `json:"org_id"`
	Name          string                  `json:"name"`
	Transport     string                  `json:"transport"`
	URL           string                  `json:"url"`
	Auth          ConnectorAuth           `json:"auth"`
	RiskPolicy    RiskPolicy              `json:"risk_policy"`
	ToolOverrides map[string]ToolOverride `json:"tool_overrides"`
	Enabled       bool                    `json:"enabled"`
	CreatedBy     *string                 `json:"created_by"`
	CreatedAt     time.Time               `json:"created_at"`
	UpdatedAt     time.Time               `json:"updated_at"`
}

// ConnectorPatch changes a connector; nil fields stay. ToolOverrides, when
// given, replaces the whole map.
type ConnectorPatch struct {
	Name          *string
	Transport     *string
	URL           *string
	Auth          *ConnectorAuth
	RiskPolicy    *RiskPolicy
	ToolOverrides *map[string]ToolOverride
	Enabled       *bool
}

var (
	toolNameRE   = regexp.MustCompile(`^[A-Za-z0-9_.\-/]{1,128}$`)
	toolHashRE   = regexp.MustCompile(`^[A-Za-z0-9:+/=_\-]{1,128}$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
	secretKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`) // as secrets.key
)

// Headers the platform sets itself or that change the request framing.
var reservedHeaders = map[string]bool{
	"host": true, "content-length": true, "content-type": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "te": true, "trailer": true, "keep-alive": true, "proxy-authorization": true,
	"accept": true, "mcp-session-id": true, "mcp-protocol-version": true, "cookie": true,
}

func validMode(m string) bool { return m == ModeAllow || m == ModeRequireApproval || m == ModeDeny }

// ValidateConnector checks a complete connector definition and returns every
// problem with its JSON path. prod refuses plain-HTTP loopback URLs and
// literal private addresses.
func ValidateConnector(c Connector, prod bool) []FieldError {
	var fe []FieldError
	add := func(f, p string) { fe = append(fe, FieldError{f, p}) }
	if n := strings.TrimSpace(c.Name); n == "" {
		add("name", "is required")
	} else if len([]rune(n)) > 100 {
		add("name", "must be at most 100 characters")
	}
	if c.Transport != TransportRemoteHTTP && c.Transport != TransportSSE {
		add("transport", "must be one of remote_http, sse")
	}
	if p := checkConnectorURL(c.URL, prod); p != "" {
		add("url", p)
	}
	switch c.Auth.Type {
	case AuthNone:
		if c.Auth.SecretKey != "" {
			add("auth.secret_key", "must be empty when auth.type is none")
		}
		if c.Auth.HeaderName != "" {
			add("auth.header_name", "must be empty unless auth.type is header")
		}
	case AuthBearer, AuthHeader:
		switch {
		case c.Auth.SecretKey == "":
			add("auth.secret_key", "is required for auth.type "+c.Auth.Type)
		case !secretKeyRE.MatchString(c.Auth.SecretKey):
			add("auth.secret_key", "is not a valid secret key name")
		}
		if c.Auth.Type == AuthHeader {
			switch {
			case c.Auth.HeaderName == "":
				add("auth.header_name", "is required for auth.type header")
			case !headerNameRE.MatchString(c.Auth.HeaderName):
				add("auth.header_name", "is not a valid HTTP header name")
			case reservedHeaders[strings.ToLower(c.Auth.HeaderName)]:
				add("auth.header_name", "is a header the platform sets itself")
			}
		} else if c.Auth.HeaderName != "" {
			add("auth.header_name", "must be empty unless auth.type is header")
		}
	default:
		add("auth.type", "must be one of none, bearer, header")
	}
	if !validMode(c.RiskPolicy.DefaultMode) {
		add("risk_policy.default_mode", "must be one of allow, require_approval, deny")
	}
	if len(c.ToolOverrides) > MaxToolOverrides {
		add("tool_overrides", fmt.Sprintf("must have at most %d items", MaxToolOverrides))
	} else {
		names := make([]string, 0, len(c.ToolOverrides))
		for n := range c.ToolOverrides {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			o := c.ToolOverrides[n]
			if !toolNameRE.MatchString(n) {
				add("tool_overrides."+truncate(n, 130), "is not a valid tool name (1–128 of A-Z a-z 0-9 _ . - /)")
				continue
			}
			if !validMode(o.Mode) {
				add("tool_overrides."+n+".mode", "must be one of allow, require_approval, deny")
			}
			if o.Hash != "" && !toolHashRE.MatchString(o.Hash) {
				add("tool_overrides."+n+".hash", "must be at most 128 characters of A-Z a-z 0-9 : + / = _ -")
			}
		}
	}
	return fe
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// checkConnectorURL returns a problem or "". HTTPS is required; plain HTTP
// only to a loopback host outside production (local MCP servers in
// development). Credentials, fragments and, in production, literal private
// or loopback addresses are refused. Hostnames that resolve to private
// addresses must be refused again when the platform connects (DNS can
// change): that check belongs to the MCP client built with Actions.
func checkConnectorURL(raw string, prod bool) string {
	if raw == "" {
		return "is required"
	}
	if len(raw) > 2048 {
		return "must be at most 2048 characters"
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return "must be an absolute http(s) URL"
	}
	if u.User != nil {
		return "must not contain credentials; use auth with an org secret"
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "must not contain a fragment"
	}
	host := u.Hostname()
	loopback := host == "localhost" || strings.HasSuffix(host, ".localhost")
	addr, ipErr := netip.ParseAddr(strings.Trim(host, "[]"))
	if ipErr == nil {
		loopback = addr.IsLoopback()
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopback || prod {
			return "must use https (http is allowed only for loopback hosts outside production)"
		}
	default:
		return "must use https"
	}
	if prod {
		if loopback {
			return "must not point at a loopback host in production"
		}
		if ipErr == nil && (addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsUnspecified() ||
			addr.IsMulticast() || addr.IsLinkLocalMulticast()) {
			return "must not point at a private or link-local address"
		}
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "has an invalid port"
		}
	}
	return ""
}

// connector decodes a stored connector (its JSON columns into their types).
func connector(r integrationsdb.OrgConnector) (Connector, error) {
	c := Connector{ID: r.ID, OrgID: r.OrgID, Name: r.Name, Transport: r.Transport, URL: r.Url,
		Enabled: r.Enabled, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	err := errors.Join(json.Unmarshal(r.Auth, &c.Auth), json.Unmarshal(r.RiskPolicy, &c.RiskPolicy),
		json.Unmarshal(r.ToolRiskOverrides, &c.ToolOverrides))
	if c.ToolOverrides == nil {
		c.ToolOverrides = map[string]ToolOverride{}
	}
	return c, err
}

// connectorJSON encodes a connector's JSON columns.
func connectorJSON(c Connector) (auth, risk, overrides []byte, err error) {
	if auth, err = json.Marshal(c.Auth); err != nil {
		return nil, nil, nil, err
	}
	if risk, err = json.Marshal(c.RiskPolicy); err != nil {
		return nil, nil, nil, err
	}
	overrides, err = json.Marshal(c.ToolOverrides)
	return auth, risk, overrides, err
}

// ErrConnectorNameTaken: another connector of the org has the name.
var ErrConnectorNameTaken = fmt.Errorf("connector name %w", ErrConflict)

// checkSecret verifies that the auth secret exists as an org-wide secret
// (repo_id IS NULL) of org. Only the key is read, never the value.
func (s *Service) checkSecret(ctx context.Context, q secretsdb.DBTX, orgID string, a ConnectorAuth) error {
	if a.Type == AuthNone {
		return nil
	}
	ok, err := secretsdb.New(q).OrgWideSecretKeyExists(ctx, secretsdb.OrgWideSecretKeyExistsParams{OrgID: orgID, Key: a.SecretKey})
	if err != nil {
		return fmt.Errorf("check connector secret: %w", err)
	}
	if !ok {
		return invalid("auth.secret_key", "is not an org-wide secret of this organization")
	}
	return nil
}

func (s *Service) validateConnector(ctx context.Context, q secretsdb.DBTX, c Connector) error {
	if fe := ValidateConnector(c, s.prod); len(fe) > 0 {
		return &ValidationError{Fields: fe}
	}
	return s.checkSecret(ctx, q, c.OrgID, c.Auth)
}

// normalizeConnector fills defaults.
func normalizeConnector(c *Connector) {
	c.Name = strings.TrimSpace(c.Name)
	if c.Transport == "" {
		c.Transport = TransportRemoteHTTP
	}
	if c.Auth.Type == "" {
		c.Auth.Type = AuthNone
	}
	if c.RiskPolicy.DefaultMode == "" {
		c.RiskPolicy.DefaultMode = ModeRequireApproval
	}
	if c.ToolOverrides == nil {
		c.ToolOverrides = map[string]ToolOverride{}
	}
}

// CreateConnector validates and stores a connector. Defaults: transport
// remote_http, auth none, default mode require_approval, enabled.
func (s *Service) CreateConnector(ctx context.Context, orgID, userID string, c Connector) (Connector, error) {
	c.OrgID = orgID
	normalizeConnector(&c)
	if err := s.validateConnector(ctx, s.pool, c); err != nil {
		return Connector{}, err
	}
	auth, risk, overrides, err := connectorJSON(c)
	if err != nil {
		return Connector{}, fmt.Errorf("create connector: %w", err)
	}
	var out Connector
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := integrationsdb.New(tx).InsertConnector(ctx, integrationsdb.InsertConnectorParams{
			OrgID: orgID, Name: c.Name, Transport: c.Transport, Url: c.URL, Auth: auth, RiskPolicy: risk,
			ToolRiskOverrides: overrides, Enabled: c.Enabled, CreatedBy: &userID})
		if err != nil {
			return err
		}
		if out, err = connector(r); err != nil {
			return err
		}
		// The organization's audit trail: the connector's name and URL,
		// never its credentials (auth names a secret, not its value).
		a := audit.ActorFrom(ctx)
		if a.UserID == "" {
			a.UserID = userID
		}
		return audit.Emit(ctx, tx, audit.Event{OrgID: orgID, Action: "connector.create", TargetType: "connector", TargetID: out.ID,
			Details: map[string]any{"name": out.Name, "url": out.URL, "enabled": out.Enabled}, Actor: a})
	})
	if isUniqueViolation(err) {
		return Connector{}, ErrConnectorNameTaken
	}
	if err != nil {
		return Connector{}, fmt.Errorf("create connector: %w", err)
	}
	return out, nil
}

// GetConnector returns one connector of org.
func (s *Service) GetConnector(ctx context.Context, orgID, id string) (Connector, error) {
	r, err := integrationsdb.New(s.pool).GetConnector(ctx, integrationsdb.GetConnectorParams{ID: id, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Connector{ToolOverrides: map[string]ToolOverride{}}, ErrNotFound
	}
	if err == nil {
		var c Connector
		if c, err = connector(r); err == nil {
			return c, nil
		}
	}
	return Connector{ToolOverrides: map[string]ToolOverride{}}, fmt.Errorf("get connector: %w", err)
}

// ListConnectors lists an org's connectors, newest first.
func (s *Service) ListConnectors(ctx context.Context, orgID string, enabledOnly bool, p Page) ([]Connector, error) {
	rows, err := integrationsdb.New(s.pool).ListConnectors(ctx, integrationsdb.ListConnectorsParams{
		OrgID: orgID, EnabledOnly: enabledOnly, BeforeAt: p.At, BeforeID: p.ID, MaxRows: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("list connectors: %w", err)
	}
	return connectors(rows)
}

func connectors(rows []integrationsdb.OrgConnector) ([]Connector, error) {
	out := make([]Connector, len(rows))
	for i, r := range rows {
		c, err := connector(r)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// ListEnabledConnectors returns every enabled connector of an org (Actions
// discovery at session runtime).
func (s *Service) ListEnabledConnectors(ctx context.Context, orgID string) ([]Connector, error) {
	rows, err := integrationsdb.New(s.pool).ListEnabledConnectors(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("list enabled connectors: %w", err)
	}
	return connectors(rows)
}

// UpdateConnector applies a patch; the result is validated as a whole (so
// switching auth to bearer without a secret key is refused) before anything
// is written.
func (s *Service) UpdateConnector(ctx context.Context, orgID, id string, p ConnectorPatch) (Connector, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Connector{}, err
	}
	defer tx.Rollback(ctx)
	q := integrationsdb.New(tx)
	r, err := q.GetConnectorForUpdate(ctx, integrationsdb.GetConnectorForUpdateParams{ID: id, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Connector{ToolOverrides: map[string]ToolOverride{}}, ErrNotFound
	}
	var c Connector
	if err == nil {
		c, err = connector(r)
	}
	if err != nil {
		return c, fmt.Errorf("get connector: %w", err)
	}
	if p.Name != nil {
		c.Name = *p.Name
	}
	if p.Transport != nil {
		c.Transport = *p.Transport
	}
	if p.URL != nil {
		c.URL = *p.URL
	}
	if p.Auth != nil {
		c.Auth = *p.Auth
	}
	if p.RiskPolicy != nil {
		c.RiskPolicy = *p.RiskPolicy
	}
	if p.ToolOverrides != nil {
		c.ToolOverrides = *p.ToolOverrides
	}
	if p.Enabled != nil {
		c.Enabled = *p.Enabled
	}
	normalizeConnector(&c)
	if err := s.validateConnector(ctx, tx, c); err != nil {
		return Connector{}, err
	}
	auth, risk, overrides, err := connectorJSON(c)
	if err != nil {
		return Connector{}, fmt.Errorf("update connector: %w", err)
	}
	r, err = q.UpdateConnector(ctx, integrationsdb.UpdateConnectorParams{ID: id, OrgID: orgID, Name: c.Name,
		Transport: c.Transport, Url: c.URL, Auth: auth, RiskPolicy: risk, ToolRiskOverrides: overrides, Enabled: c.Enabled})
	var out Connector
	if err == nil {
		out, err = connector(r)
	}
	if isUniqueViolation(err) {
		return Connector{}, ErrConnectorNameTaken
	}
	if err != nil {
		return Connector{}, fmt.Errorf("update connector: %w", err)
	}
	return out, tx.Commit(ctx)
}

// DeleteConnector removes a connector of org.
func (s *Service) DeleteConnector(ctx context.Context, orgID, id string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		name, err := integrationsdb.New(tx).DeleteConnector(ctx, integrationsdb.DeleteConnectorParams{ID: id, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete connector: %w", err)
		}
		return audit.Emit(ctx, tx, audit.Event{OrgID: orgID, Action: "connector.delete", TargetType: "connector", TargetID: id,
			Details: map[string]any{"name": name}, Actor: audit.ActorFrom(ctx)})
	})
}

// ParseToolOverrides reads tool_overrides from JSON where each tool maps to
// either a mode string ("deny") or an object {"mode": …, "hash": …}, with a
// precise path for every problem (tool_overrides.<tool>…).
func ParseToolOverrides(raw map[string]json.RawMessage) (map[string]ToolOverride, []FieldError) {
	out := make(map[string]ToolOverride, len(raw))
	var fe []FieldError
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := "tool_overrides." + truncate(n, 130)
		v := bytes.TrimSpace(raw[n])
		var o ToolOverride
		switch {
		case len(v) > 0 && v[0] == '"':
			if err := json.Unmarshal(v, &o.Mode); err != nil {
				fe = append(fe, FieldError{path, "must be a mode or an object {mode, hash}"})
				continue
			}
		case len(v) > 0 && v[0] == '{':
			dec := json.NewDecoder(bytes.NewReader(v))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&o); err != nil {
				problem := "must be a mode or an object {mode, hash}"
				if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
					path += "." + strings.Trim(f, `"`)
					problem = "unknown field"
				}
				fe = append(fe, FieldError{path, problem})
				continue
			}
		default:
			fe = append(fe, FieldError{path, "must be a mode or an object {mode, hash}"})
			continue
		}
		out[n] = o
	}
	return out, fe
}
