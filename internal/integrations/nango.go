package integrations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Nango is the OAuth broker client (NANGO_URL, NANGO_SECRET_KEY). Nango keeps
// and refreshes the OAuth tokens; the platform only stores connection ids.
type Nango struct {
	baseURL string
	secret  string
	up      upstream
	now     func() time.Time
}

// NewNango builds the client.
func NewNango(baseURL, secretKey string, client *http.Client, now func() time.Time) *Nango {
	if client == nil {
		client = http.DefaultClient
	}
	if now == nil {
		now = time.Now
	}
	return &Nango{baseURL: strings.TrimRight(baseURL, "/"), secret: secretKey, up: upstream{provider: "nango", client: client}, now: now}
}

// NangoConnection is the part of Nango's GET /connection/{id} answer the
// platform uses.
type NangoConnection struct {
	ConnectionID      string           `json:"connection_id"`
	ProviderConfigKey string           `json:"provider_config_key"`
	Provider          string           `json:"provider"`
	EndUser           *NangoEndUser    `json:"end_user"`
	Credentials       NangoCredentials `json:"credentials"`
}

// NangoEndUser is who created the connection through a connect session.
type NangoEndUser struct {
	ID           string `json:"id"`
	Email        string `json:"email"`
	Organization *struct {
		ID string `json:"id"`
	} `json:"organization"`
}

// NangoCredentials depend on the auth mode: OAUTH2 and APP carry
// access_token (+ expires_at), API_KEY carries apiKey.
type NangoCredentials struct {
	Type        string     `json:"type"`
	AccessToken string     `json:"access_token"`
	APIKey      string     `json:"apiKey"`
	ExpiresAt   *time.Time `json:"expires_at"`
}

// token extracts the bearer credential.
func (c NangoCredentials) token() (Token, bool) {
	var t Token
	switch c.Type {
	case "OAUTH2", "APP", "OAUTH2_CC", "TWO_STEP":
		t.Value = c.AccessToken
	case "API_KEY":
		t.Value = c.APIKey
	}
	if c.ExpiresAt != nil {
		t.ExpiresAt = *c.ExpiresAt
	}
	return t, t.Value != ""
}

// Connection fetches a connection with its credentials. forceRefresh asks
// Nango to refresh the OAuth token even if it believes it is still valid.
func (n *Nango) Connection(ctx context.Context, connectionID, providerConfigKey string, forceRefresh bool) (NangoConnection, error) {
	q := url.Values{"provider_config_key": {providerConfigKey}}
	if forceRefresh {
		q.Set("force_refresh", "true")
	}
	req, err := n.newRequest(http.MethodGet, "/connection/"+url.PathEscape(connectionID)+"?"+q.Encode(), nil)
	if err != nil {
		return NangoConnection{}, err
	}
	var out NangoConnection
	if _, err := n.up.do(ctx, "get connection", req, &out, nangoErrorCode); err != nil {
		return NangoConnection{}, refineNangoError(err)
	}
	return out, nil
}

// Token returns the live access token of a connection. Nango refreshes
// expired OAuth tokens on read; should it still hand back one whose
// expires_at has passed, the read is retried once with force_refresh, and a
// refresh Nango cannot perform is ErrReauthRequired (the original propagated
// a dead token to the caller).
func (n *Nango) Token(ctx context.Context, connectionID, providerConfigKey string) (Token, error) {
	c, err := n.Connection(ctx, connectionID, providerConfigKey, false)
	if err != nil {
		return Token{}, err
	}
	tok, ok := c.Credentials.token()
	if ok && (tok.ExpiresAt.IsZero() || n.now().Before(tok.ExpiresAt)) {
		return tok, nil
	}
	c, err = n.Connection(ctx, connectionID, providerConfigKey, true)
	if err != nil {
		return Token{}, err
	}
	tok, ok = c.Credentials.token()
	if !ok {
		return Token{}, &UpstreamError{Provider: "nango", Op: "get connection", Status: http.StatusOK,
			Code: "unsupported_credentials_" + sanitizeCode(strings.ToLower(c.Credentials.Type)), Err: ErrUpstreamRejected}
	}
	if !tok.ExpiresAt.IsZero() && !n.now().Before(tok.ExpiresAt) {
		return Token{}, &UpstreamError{Provider: "nango", Op: "refresh connection", Status: http.StatusOK, Code: "token_expired", Err: ErrReauthRequired}
	}
	return tok, nil
}

// DeleteConnection removes a connection at Nango (revoking its tokens there).
// A connection Nango does not know is already gone: no error.
func (n *Nango) DeleteConnection(ctx context.Context, connectionID, providerConfigKey string) error {
	q := url.Values{"provider_config_key": {providerConfigKey}}
	req, err := n.newRequest(http.MethodDelete, "/connection/"+url.PathEscape(connectionID)+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	_, err = n.up.do(ctx, "delete connection", req, nil, nangoErrorCode)
	var ue *UpstreamError
	if errors.As(err, &ue) && (ue.Status == http.StatusNotFound || ue.Code == "unknown_connection") {
		return nil
	}
	return err
}

// ConnectSession is a short-lived token the frontend hands to Nango's
// connect UI.
type ConnectSession struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CreateConnectSession starts an OAuth flow limited to one Nango integration
// and tagged with the platform user and organization, which the callback
// later checks on the resulting connection.
func (n *Nango) CreateConnectSession(ctx context.Context, userID, email, orgID, providerConfigKey string) (ConnectSession, error) {
	body := map[string]any{
		"end_user":             map[string]any{"id": userID, "email": email},
		"organization":         map[string]any{"id": orgID},
		"allowed_integrations": []string{providerConfigKey},
	}
	raw, _ := json.Marshal(body)
	req, err := n.newRequest(http.MethodPost, "/connect/sessions", raw)
	if err != nil {
		return ConnectSession{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	var out struct {
		Data ConnectSession `json:"data"`
	}
	if _, err := n.up.do(ctx, "create connect session", req, &out, nangoErrorCode); err != nil {
		return ConnectSession{}, err
	}
	if out.Data.Token == "" {
		return ConnectSession{}, &UpstreamError{Provider: "nango", Op: "create connect session", Code: "malformed_response", Err: ErrUpstreamUnavailable}
	}
	return out.Data, nil
}

func (n *Nango) newRequest(method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, n.baseURL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+n.secret)
	return req, nil
}

// nangoErrorCode reads {"error": {"code": "…"}} (current API) or
// {"error": "…", "type": "…"} (older servers).
func nangoErrorCode(body []byte) string {
	var cur struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &cur) == nil && cur.Error.Code != "" {
		return sanitizeCode(cur.Error.Code)
	}
	var old struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &old) == nil {
		return sanitizeCode(old.Type)
	}
	return ""
}

// refineNangoError: a 4xx on reading a connection that is neither 401 (our
// secret key) nor 404 (no such connection) means Nango failed to refresh or
// test the credentials, which only a new authorization fixes. An unknown
// provider_config_key counts as not found.
func refineNangoError(err error) error {
	var ue *UpstreamError
	if !errors.As(err, &ue) {
		return err
	}
	switch {
	case ue.Code == "unknown_provider_config" || ue.Code == "unknown_connection":
		ue.Err = ErrUpstreamNotFound
	case errors.Is(ue.Err, ErrUpstreamRejected):
		ue.Err = ErrReauthRequired
	}
	return ue
}
