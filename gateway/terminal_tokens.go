package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Terminal tokens: the credential of `proliferate actions` in a terminal a
// person opened in a session's sandbox.
//
// When a person opens the terminal WebSocket the gateway mints a random
// token (ptt_ and 32 random bytes), gives it to the shell as
// PROLIFERATE_TERMINAL_TOKEN and keeps only its SHA-256 in Redis, with the
// person, the session's organization and the session, for
// TerminalTokenTTL. The terminal's keepalive writes the grant again every
// termPingEvery, so it lives while the terminal is open; it is deleted
// when the terminal closes (and expires on its own within
// TerminalTokenTTL when a gateway dies with it open).
//
// A terminal token authenticates on the action routes of its own session
// only (another session: 404, like a sandbox token) as a KindTerminal
// principal: the person, re-read from the database on every request (a
// removed member loses it at once). It can list, read the guide, invoke
// (the invocation records the person in invoked_by, under the same
// policy, rate limit and pending cap as the agent) and read invocations;
// it can never approve or deny: whatever runs in the sandbox (the agent
// included, which shares the terminal's home and workspace) must not
// approve what the agent asks for. It is not the person's access token or
// API key and is refused everywhere else (401), so a sandbox that
// captures it reaches no more than that session's action routes, as the
// person, while the terminal is open.

// TerminalTokenPrefix starts every terminal token.
const TerminalTokenPrefix = "ptt_"

// TerminalTokenTTL is how long a terminal token outlives its last refresh.
const TerminalTokenTTL = 5 * time.Minute

// terminalGrant is what Redis holds for a terminal token.
type terminalGrant struct {
	UserID    string `json:"user_id"`
	OrgID     string `json:"org_id"`
	SessionID string `json:"session_id"`
}

func terminalTokenKey(token string) string { return tokenKey("terminal_token", token) }

// terminalToken is one minted token and its grant.
type terminalToken struct {
	value string
	key   string
	grant []byte
}

// mintTerminalToken stores a new token for the person p in session sess.
func (s *Server) mintTerminalToken(ctx context.Context, p *auth.Principal, sess sessions.Session) (*terminalToken, error) {
	value := newToken(TerminalTokenPrefix)
	grant, err := json.Marshal(terminalGrant{UserID: p.UserID, OrgID: sess.OrgID, SessionID: sess.ID})
	if err != nil {
		return nil, err
	}
	t := &terminalToken{value: value, key: terminalTokenKey(value), grant: grant}
	if err := t.refresh(ctx, s.d.Redis); err != nil {
		return nil, err
	}
	return t, nil
}

// refresh writes the grant again with a full TTL (SET, not EXPIRE: a
// grant lost with Redis comes back at the next refresh).
func (t *terminalToken) refresh(ctx context.Context, rdb *redis.Client) error {
	if err := rdb.Set(ctx, t.key, t.grant, TerminalTokenTTL).Err(); err != nil {
		return fmt.Errorf("store terminal token: %w", err)
	}
	return nil
}

// revoke deletes the grant: the token authenticates nothing more.
func (t *terminalToken) revoke(rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rdb.Del(ctx, t.key).Err()
}

// verifyTerminalToken returns the principal of a live terminal token, or
// auth.ErrUnauthenticated (unknown, revoked, expired, or the person is no
// longer a member of the session's organization).
func (s *Server) verifyTerminalToken(ctx context.Context, token string) (*auth.Principal, error) {
	if !wellFormedToken(token, TerminalTokenPrefix) {
		return nil, auth.ErrUnauthenticated
	}
	raw, err := s.d.Redis.Get(ctx, terminalTokenKey(token)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, auth.ErrUnauthenticated
	}
	if err != nil {
		return nil, fmt.Errorf("verify terminal token: %w", err)
	}
	var g terminalGrant
	if err := json.Unmarshal(raw, &g); err != nil || g.UserID == "" || g.OrgID == "" || g.SessionID == "" {
		return nil, auth.ErrUnauthenticated
	}
	p := &auth.Principal{Kind: auth.KindTerminal, UserID: g.UserID, OrgID: g.OrgID, SessionID: g.SessionID}
	m, err := orgsdb.New(s.d.Pool).MembershipPerson(ctx, orgsdb.MembershipPersonParams{OrgID: g.OrgID, UserID: g.UserID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, auth.ErrUnauthenticated
	}
	if err != nil {
		return nil, fmt.Errorf("verify terminal token: %w", err)
	}
	p.Email, p.Role = m.Email, auth.Role(m.Role)
	return p, nil
}

// actionPrincipal authenticates a caller of the action routes: every
// credential principal accepts, and terminal tokens.
func (s *Server) actionPrincipal(r *http.Request) (*auth.Principal, error) {
	tok := ""
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		tok = strings.TrimSpace(t)
	}
	if !strings.HasPrefix(tok, TerminalTokenPrefix) {
		return s.principal(r, false)
	}
	p, err := s.verifyTerminalToken(r.Context(), tok)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			return nil, httpapi.Unauthenticated()
		}
		return nil, err
	}
	return p, nil
}
