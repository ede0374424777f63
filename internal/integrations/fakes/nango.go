package fakes

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// NangoConnection is a connection held by the fake broker.
type NangoConnection struct {
	ConnectionID string
	ConfigKey    string // provider_config_key (the Nango integration)
	Provider     string // e.g. sentry
	AccessToken  string
	ExpiresAt    time.Time // zero: no expiry reported
	EndUserID    string    // from the connect session; "" for none
	EndUserOrgID string
	// RefreshFails makes every read fail the way Nango does when the
	// provider refuses the refresh token.
	RefreshFails bool
	// StaleUntilForced hands back the stored (expired) token unless the
	// caller asks force_refresh=true, which then mints a fresh one.
	StaleUntilForced bool
}

// NangoSession is a recorded POST /connect/sessions body.
type NangoSession struct {
	EndUserID           string
	EndUserEmail        string
	OrganizationID      string
	AllowedIntegrations []string
	Token               string
}

// Nango fakes Nango's HTTP API: GET and DELETE /connection/{id}
// (?provider_config_key=…) and POST /connect/sessions, authenticated with
// "Authorization: Bearer <secret key>".
type Nango struct {
	URL    string
	secret string
	now    func() time.Time

	mu           sync.Mutex
	integrations map[string]string // config key → provider
	conns        map[string]*NangoConnection
	gets         int
	forced       int
	fail         int
	sessions     []NangoSession
	deleted      []string
	// connectTokens: SetConnectToken (browserpages.go)
	connectTokens map[string]string
}

// NewNango starts the fake with the given secret key and known integration
// keys (config key → provider name).
func NewNango(t fakekit.TB, secret string, integrations map[string]string, now func() time.Time) *Nango {
	if now == nil {
		now = time.Now
	}
	n := &Nango{secret: secret, now: now, integrations: integrations, conns: map[string]*NangoConnection{}}
	srv := httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(srv.Close)
	n.URL = srv.URL
	return n
}

func nangoKey(connID, cfgKey string) string { return cfgKey + "\x00" + connID }

// AddConnection stores a connection, as a finished OAuth flow would.
func (n *Nango) AddConnection(c NangoConnection) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c.Provider == "" {
		c.Provider = n.integrations[c.ConfigKey]
	}
	n.conns[nangoKey(c.ConnectionID, c.ConfigKey)] = &c
}

// Update changes a stored connection.
func (n *Nango) Update(connID, cfgKey string, f func(*NangoConnection)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.conns[nangoKey(connID, cfgKey)]; c != nil {
		f(c)
	}
}

// Fail makes every call answer status (0: normal again).
func (n *Nango) Fail(status int) { n.mu.Lock(); n.fail = status; n.mu.Unlock() }

// Gets counts authenticated GET /connection calls; Forced those with
// force_refresh=true.
func (n *Nango) Gets() int   { n.mu.Lock(); defer n.mu.Unlock(); return n.gets }
func (n *Nango) Forced() int { n.mu.Lock(); defer n.mu.Unlock(); return n.forced }

// Sessions returns the connect sessions created.
func (n *Nango) Sessions() []NangoSession {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NangoSession(nil), n.sessions...)
}

// Deleted returns the connection ids deleted.
func (n *Nango) Deleted() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.deleted...)
}

func nangoError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func (n *Nango) serve(w http.ResponseWriter, r *http.Request) {
	if n.serveConnectUI(w, r) { // the browser's pages carry no secret key
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+n.secret {
		nangoError(w, http.StatusUnauthorized, "unknown_account", "Authentication failed. The provided secret key is invalid.")
		return
	}
	n.mu.Lock()
	fail := n.fail
	n.mu.Unlock()
	if fail != 0 {
		nangoError(w, fail, "server_error", http.StatusText(fail))
		return
	}
	switch {
	case r.URL.Path == "/connect/sessions" && r.Method == http.MethodPost:
		n.createSession(w, r)
	case strings.HasPrefix(r.URL.Path, "/connection/") && (r.Method == http.MethodGet || r.Method == http.MethodDelete):
		n.connection(w, r, strings.TrimPrefix(r.URL.Path, "/connection/"))
	default:
		nangoError(w, http.StatusNotFound, "not_found", "Not found")
	}
}

func (n *Nango) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct {
		EndUser *struct {
			ID          string `json:"id"`
			Email       string `json:"email"`
			DisplayName string `json:"display_name"`
		} `json:"end_user"`
		Organization *struct {
			ID string `json:"id"`
		} `json:"organization"`
		AllowedIntegrations []string `json:"allowed_integrations"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.EndUser == nil || body.EndUser.ID == "" {
		nangoError(w, http.StatusBadRequest, "invalid_body", "end_user.id is required")
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range body.AllowedIntegrations {
		if _, ok := n.integrations[k]; !ok {
			nangoError(w, http.StatusBadRequest, "invalid_body", "unknown integration "+k)
			return
		}
	}
	s := NangoSession{EndUserID: body.EndUser.ID, EndUserEmail: body.EndUser.Email,
		AllowedIntegrations: body.AllowedIntegrations, Token: "nango_connect_session_" + randomHex(16)}
	if body.Organization != nil {
		s.OrganizationID = body.Organization.ID
	}
	n.sessions = append(n.sessions, s)
	writeJSON(w, http.StatusCreated, map[string]any{"data": map[string]any{
		"token": s.Token, "connect_link": n.ConnectUIURL() + "?session_token=" + s.Token,
		"expires_at": n.now().Add(30 * time.Minute).UTC().Format(time.RFC3339Nano),
	}})
}

func (n *Nango) connection(w http.ResponseWriter, r *http.Request, connID string) {
	q := r.URL.Query()
	cfgKey := q.Get("provider_config_key")
	if cfgKey == "" || connID == "" {
		nangoError(w, http.StatusBadRequest, "invalid_query_params", "provider_config_key is required")
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.integrations[cfgKey]; !ok {
		nangoError(w, http.StatusBadRequest, "unknown_provider_config", "Provider does not exists")
		return
	}
	c := n.conns[nangoKey(connID, cfgKey)]
	if r.Method == http.MethodDelete {
		if c == nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "unknown_connection"}})
			return
		}
		delete(n.conns, nangoKey(connID, cfgKey))
		n.deleted = append(n.deleted, connID)
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
		return
	}
	if c == nil {
		nangoError(w, http.StatusNotFound, "not_found", "Failed to find connection")
		return
	}
	n.gets++
	force := q.Get("force_refresh") == "true"
	if force {
		n.forced++
	}
	if c.RefreshFails {
		nangoError(w, http.StatusBadRequest, "server_error", "Failed to refresh or test credentials")
		return
	}
	if c.StaleUntilForced && force {
		c.AccessToken = "nango_fresh_" + randomHex(12)
		c.ExpiresAt = n.now().Add(time.Hour)
		c.StaleUntilForced = false
	}
	creds := map[string]any{"type": "OAUTH2", "access_token": c.AccessToken, "raw": map[string]any{"access_token": c.AccessToken, "token_type": "bearer"}}
	if !c.ExpiresAt.IsZero() {
		creds["expires_at"] = c.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	var endUser any
	if c.EndUserID != "" {
		var org any
		if c.EndUserOrgID != "" {
			org = map[string]any{"id": c.EndUserOrgID, "display_name": nil}
		}
		endUser = map[string]any{"id": c.EndUserID, "display_name": nil, "email": "user@example.com", "tags": map[string]any{}, "organization": org}
	}
	now := n.now().UTC().Format(time.RFC3339Nano)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": 1, "connection_id": c.ConnectionID, "provider_config_key": c.ConfigKey, "provider": c.Provider,
		"errors": []any{}, "end_user": endUser, "tags": map[string]any{}, "metadata": nil, "connection_config": map[string]any{},
		"created_at": now, "updated_at": now, "last_fetched_at": now, "credentials": creds,
	})
}
