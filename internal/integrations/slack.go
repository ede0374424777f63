package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
)

// SlackBotScopes are the bot scopes the platform requests.
var SlackBotScopes = []string{
	"app_mentions:read", "channels:history", "channels:join", "channels:read", "chat:write",
	"groups:history", "groups:read", "im:history", "im:read", "im:write", "users:read", "users:read.email",
}

// Slack is the Slack Web API client for the app's OAuth exchange and token
// revocation (SLACK_API_URL).
type Slack struct {
	baseURL                string
	clientID, clientSecret string
	up                     upstream
}

// NewSlack builds the client.
func NewSlack(baseURL, clientID, clientSecret string, client *http.Client) *Slack {
	if client == nil {
		client = http.DefaultClient
	}
	return &Slack{baseURL: strings.TrimRight(baseURL, "/"), clientID: clientID, clientSecret: clientSecret,
		up: upstream{provider: "slack", client: client}}
}

// SlackOAuthResult is the part of oauth.v2.access's answer that is kept.
type SlackOAuthResult struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	Scope       string `json:"scope"`
	BotUserID   string `json:"bot_user_id"`
	AppID       string `json:"app_id"`
	Team        struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"team"`
	Enterprise *struct {
		ID string `json:"id"`
	} `json:"enterprise"`
}

// ErrSlackCodeRejected: Slack refused the OAuth code (invalid, used,
// expired, or a redirect_uri mismatch).
var ErrSlackCodeRejected = errors.New("slack rejected the authorization code")

// slackResponse is every Web API answer's envelope: HTTP 200 with ok=false
// on errors.
type slackResponse struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

func (s *Slack) post(ctx context.Context, op, method string, form url.Values, bearer string, out any) error {
	req, err := http.NewRequest(http.MethodPost, s.baseURL+"/"+method, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	} else {
		req.SetBasicAuth(s.clientID, s.clientSecret)
	}
	var raw json.RawMessage
	if _, err := s.up.do(ctx, op, req, &raw, nil); err != nil {
		return err
	}
	var env slackResponse
	if err := json.Unmarshal(raw, &env); err != nil {
		return &UpstreamError{Provider: "slack", Op: op, Status: http.StatusOK, Code: "malformed_response", Err: ErrUpstreamUnavailable}
	}
	if !env.OK {
		ue := &UpstreamError{Provider: "slack", Op: op, Status: http.StatusOK, Code: sanitizeCode(env.Error), Err: ErrUpstreamRejected}
		switch env.Error {
		case "invalid_code", "code_already_used", "code_expired", "bad_redirect_uri", "invalid_grant_type":
			ue.Err = ErrSlackCodeRejected
		case "invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive":
			ue.Err = ErrUpstreamUnauthorized
		case "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout":
			ue.Err = ErrUpstreamUnavailable
		}
		return ue
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return &UpstreamError{Provider: "slack", Op: op, Status: http.StatusOK, Code: "malformed_response", Err: ErrUpstreamUnavailable}
		}
	}
	return nil
}

// OAuthAccess exchanges an authorization code for a bot token
// (oauth.v2.access, client credentials in HTTP Basic auth).
func (s *Slack) OAuthAccess(ctx context.Context, code, redirectURI string) (SlackOAuthResult, error) {
	form := url.Values{"code": {code}}
	if redirectURI != "" {
		form.Set("redirect_uri", redirectURI)
	}
	var out SlackOAuthResult
	if err := s.post(ctx, "oauth.v2.access", "oauth.v2.access", form, "", &out); err != nil {
		return out, err
	}
	if out.AccessToken == "" || out.Team.ID == "" || out.BotUserID == "" {
		return out, &UpstreamError{Provider: "slack", Op: "oauth.v2.access", Status: http.StatusOK, Code: "not_a_bot_install", Err: ErrUpstreamRejected}
	}
	return out, nil
}

// Revoke revokes a token (auth.revoke).
func (s *Slack) Revoke(ctx context.Context, token string) error {
	return s.post(ctx, "auth.revoke", "auth.revoke", url.Values{}, token, nil)
}

// authorizeBase is Slack's OAuth authorize page on the Web API's host
// (https://slack.com/api → https://slack.com/oauth/v2/authorize), so a
// SLACK_API_URL pointing elsewhere (a fake) moves the page with it.
func (s *Slack) authorizeBase() string {
	return strings.TrimSuffix(s.baseURL, "/api") + "/oauth/v2/authorize"
}

// AuthorizeURL is where the browser starts a Slack install.
func (s *Slack) AuthorizeURL(state, redirectURI string) string {
	q := url.Values{"client_id": {s.clientID}, "scope": {strings.Join(SlackBotScopes, ",")}, "state": {state}}
	if redirectURI != "" {
		q.Set("redirect_uri", redirectURI)
	}
	return s.authorizeBase() + "?" + q.Encode()
}

// --- installations ------------------------------------------------------------

// SlackInstallation is a workspace installation. It has no token field: the
// bot token only leaves the database through SlackBotToken.
type SlackInstallation struct {
	ID                 string     `json:"id"`
	OrgID              string     `json:"org_id"`
	TeamID             string     `json:"team_id"`
	TeamName           string     `json:"team_name"`
	EnterpriseID       *string    `json:"enterprise_id"`
	AppID              string     `json:"app_id"`
	BotUserID          string     `json:"bot_user_id"`
	Scopes             []string   `json:"scopes"`
	InstalledBy        *string    `json:"installed_by"`
	Status             string     `json:"status"`
	SupportChannelID   *string    `json:"support_channel_id"`
	SupportChannelName *string    `json:"support_channel_name"`
	SupportInviteURL   *string    `json:"support_invite_url"`
	RevokedAt          *time.Time `json:"revoked_at"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
}

// slackInstallation is an installation row (the queries returning one have
// the same columns, so their row types convert to this one).
func slackInstallation(r integrationsdb.GetSlackInstallationRow) SlackInstallation {
	si := SlackInstallation{ID: r.ID, OrgID: r.OrgID, TeamID: r.TeamID, TeamName: r.TeamName, EnterpriseID: r.EnterpriseID,
		AppID: r.AppID, BotUserID: r.BotUserID, Scopes: r.Scopes, InstalledBy: r.InstalledBy, Status: r.Status,
		SupportChannelID: r.SupportChannelID, SupportChannelName: r.SupportChannelName, SupportInviteURL: r.SupportInviteUrl,
		RevokedAt: r.RevokedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if si.Scopes == nil {
		si.Scopes = []string{}
	}
	return si
}

// slackAD binds a sealed bot token to its org and workspace.
func slackAD(orgID, teamID string) []byte { return []byte("slack:" + orgID + ":" + teamID) }

// StartSlackInstall issues the OAuth state for a Slack install and returns
// the URL to send the browser to.
func (s *Service) StartSlackInstall(ctx context.Context, orgID, userID, redirectURI string) (state, authorizeURL string, expires time.Time, err error) {
	if s.slack == nil {
		return "", "", time.Time{}, ErrNotConfigured
	}
	state, err = s.states.issue(ctx, oauthState{Kind: "slack", OrgID: orgID, UserID: userID, RedirectURI: redirectURI}, slackStateTTL)
	if err != nil {
		return "", "", time.Time{}, err
	}
	return state, s.slack.AuthorizeURL(state, redirectURI), s.now().Add(slackStateTTL), nil
}

// InstallSlack completes the Slack OAuth callback: checks the state, exchanges
// the code, seals the bot token and upserts the installation of that
// workspace (re-installing reactivates it).
func (s *Service) InstallSlack(ctx context.Context, orgID, userID, code, state string) (SlackInstallation, bool, error) {
	if s.slack == nil {
		return SlackInstallation{}, false, ErrNotConfigured
	}
	st, err := s.states.consume(ctx, "slack", state, orgID, userID)
	if errors.Is(err, ErrBadState) {
		return SlackInstallation{}, false, invalid("state", "is not a state this organization issued for this person, or it expired")
	}
	if err != nil {
		return SlackInstallation{}, false, err
	}
	res, err := s.slack.OAuthAccess(ctx, code, st.RedirectURI)
	if errors.Is(err, ErrSlackCodeRejected) {
		return SlackInstallation{}, false, invalid("code", "was rejected by Slack (invalid, expired or already used)")
	}
	if err != nil {
		return SlackInstallation{}, false, err
	}
	sealed, err := s.box.Seal([]byte(res.AccessToken), slackAD(orgID, res.Team.ID))
	if err != nil {
		return SlackInstallation{}, false, fmt.Errorf("seal slack token: %w", err)
	}
	scopes := []string{}
	for _, sc := range strings.Split(res.Scope, ",") {
		if sc = strings.TrimSpace(sc); sc != "" {
			scopes = append(scopes, sc)
		}
	}
	var enterprise *string
	if res.Enterprise != nil && res.Enterprise.ID != "" {
		enterprise = &res.Enterprise.ID
	}
	var si SlackInstallation
	var created bool
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := integrationsdb.New(tx).UpsertSlackInstallation(ctx, integrationsdb.UpsertSlackInstallationParams{
			OrgID: orgID, TeamID: res.Team.ID, TeamName: res.Team.Name, EnterpriseID: enterprise, AppID: res.AppID,
			BotUserID: res.BotUserID, EncryptedBotToken: &sealed, Scopes: scopes, InstalledBy: &userID})
		if err != nil {
			return err
		}
		created = r.Created
		si = slackInstallation(integrationsdb.GetSlackInstallationRow{ID: r.ID, OrgID: r.OrgID, TeamID: r.TeamID,
			TeamName: r.TeamName, EnterpriseID: r.EnterpriseID, AppID: r.AppID, BotUserID: r.BotUserID, Scopes: r.Scopes,
			InstalledBy: r.InstalledBy, Status: r.Status, SupportChannelID: r.SupportChannelID,
			SupportChannelName: r.SupportChannelName, SupportInviteUrl: r.SupportInviteUrl, RevokedAt: r.RevokedAt,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
		// The organization's audit trail: the workspace, never the token.
		a := audit.ActorFrom(ctx)
		if a.UserID == "" {
			a.UserID = userID
		}
		return audit.Emit(ctx, tx, audit.Event{OrgID: orgID, Action: "integration.connect", TargetType: "slack_installation", TargetID: si.ID,
			Details: map[string]any{"provider": "slack", "name": si.TeamName, "team_id": si.TeamID, "reinstalled": !created}, Actor: a})
	})
	if err != nil {
		return si, false, fmt.Errorf("save slack installation: %w", err)
	}
	s.log.Info("slack installed", "org_id", orgID, "team_id", si.TeamID, "installation_id", si.ID)
	return si, created, nil
}

// ListSlackInstallations lists an org's installations, newest first.
func (s *Service) ListSlackInstallations(ctx context.Context, orgID string, p Page) ([]SlackInstallation, error) {
	rows, err := integrationsdb.New(s.pool).ListSlackInstallations(ctx, integrationsdb.ListSlackInstallationsParams{
		OrgID: orgID, BeforeAt: p.At, BeforeID: p.ID, MaxRows: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("list slack installations: %w", err)
	}
	out := make([]SlackInstallation, len(rows))
	for i, r := range rows {
		out[i] = slackInstallation(integrationsdb.GetSlackInstallationRow(r))
	}
	return out, nil
}

// GetSlackInstallation returns one installation of org.
func (s *Service) GetSlackInstallation(ctx context.Context, orgID, id string) (SlackInstallation, error) {
	r, err := integrationsdb.New(s.pool).GetSlackInstallation(ctx, integrationsdb.GetSlackInstallationParams{ID: id, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return slackInstallation(r), ErrNotFound
	}
	return slackInstallation(r), err
}

// UninstallSlack marks an installation revoked and discards its sealed
// token, then revokes the token at Slack. A failed Slack revocation is
// logged and does not undo the local revocation. Uninstalling a revoked
// installation changes nothing.
func (s *Service) UninstallSlack(ctx context.Context, orgID, id string) (SlackInstallation, error) {
	var teamID string
	var sealed *string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		old, err := integrationsdb.New(tx).RevokeSlackInstallation(ctx, integrationsdb.RevokeSlackInstallationParams{ID: id, OrgID: orgID})
		if err != nil {
			return err
		}
		teamID, sealed = old.TeamID, old.EncryptedBotToken
		if old.WasRevoked {
			return nil
		}
		return audit.Emit(ctx, tx, audit.Event{OrgID: orgID, Action: "integration.disconnect", TargetType: "slack_installation", TargetID: id,
			Details: map[string]any{"provider": "slack", "team_id": teamID}, Actor: audit.ActorFrom(ctx)})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return SlackInstallation{}, ErrNotFound
	}
	if err != nil {
		return SlackInstallation{}, fmt.Errorf("revoke slack installation: %w", err)
	}
	log := s.log.With("org_id", orgID, "team_id", teamID, "installation_id", id)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultUpstreamTimeout)
	defer cancel()
	if sealed != nil {
		switch tok, err := s.box.Open(*sealed, slackAD(orgID, teamID)); {
		case err != nil:
			log.Error("slack token could not be decrypted for revocation", "error", err)
		case s.slack == nil:
			log.Warn("slack client not configured; token not revoked at Slack")
		default:
			if err := s.slack.Revoke(ctx, string(tok)); err != nil {
				log.Warn("revoking the slack token at Slack failed; revoked locally", "error", err)
			}
		}
	}
	log.Info("slack uninstalled")
	return s.GetSlackInstallation(ctx, orgID, id)
}

// SlackBotToken decrypts the bot token of the org's active Slack
// installation at the moment of use (notifications, messaging). With several
// active workspaces it refuses to guess (ErrAmbiguous); use
// SlackInstallationToken then.
func (s *Service) SlackBotToken(ctx context.Context, orgID string) (Token, error) {
	found, err := integrationsdb.New(s.pool).ActiveSlackTokens(ctx, orgID)
	if err != nil {
		return Token{}, fmt.Errorf("find slack installation: %w", err)
	}
	switch len(found) {
	case 0:
		return Token{}, ErrNotFound
	case 1:
		return s.openSlack(orgID, found[0].TeamID, found[0].EncryptedBotToken)
	default:
		return Token{}, ErrAmbiguous
	}
}

// SlackInstallationToken decrypts the bot token of one active installation.
func (s *Service) SlackInstallationToken(ctx context.Context, orgID, installationID string) (Token, error) {
	r, err := integrationsdb.New(s.pool).SlackInstallationSealedToken(ctx,
		integrationsdb.SlackInstallationSealedTokenParams{ID: installationID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("find slack installation: %w", err)
	}
	return s.openSlack(orgID, r.TeamID, r.EncryptedBotToken)
}

// openSlack opens the sealed token of an active installation (never NULL:
// the table's check constraint).
func (s *Service) openSlack(orgID, teamID string, sealed *string) (Token, error) {
	if sealed == nil {
		return Token{}, fmt.Errorf("open slack token of team %s: no token", teamID)
	}
	pt, err := s.box.Open(*sealed, slackAD(orgID, teamID))
	if err != nil {
		return Token{}, fmt.Errorf("open slack token of team %s: %w", teamID, err)
	}
	return Token{Value: string(pt)}, nil
}
