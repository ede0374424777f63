package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

var (
	errEmailTaken = httpapi.Conflict("email_taken", "an account with this email already exists")
	// errBadCredentials is the one answer for an unknown email, a wrong
	// password and an account without a password alike.
	errBadCredentials = &httpapi.Error{Status: http.StatusUnauthorized, Code: "invalid_credentials", Message: "email or password is incorrect"}
)

// queryer is a pool or a transaction.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const userColumns = `id::text, email, name, image, email_verified, active_org_id::text, created_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.Name, &u.Image, &u.EmailVerified, &u.ActiveOrgID, &u.CreatedAt)
	return u, err
}

func loadUser(ctx context.Context, q queryer, id string) (User, error) {
	return scanUser(q.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
}

// --- signup ------------------------------------------------------------------

func (h *handler) signup(c *api.Ctx) error {
	var req SignupRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := allow(c, h.signupIP, c.ClientIP()); err != nil {
		return err
	}
	ctx := c.Request.Context()
	// Hash before the transaction: argon2 takes tens of milliseconds.
	hash, err := identity.HashPassword(ctx, req.Password)
	if err != nil {
		return err
	}
	name := strings.TrimSpace(req.Name)
	verifyToken := identity.NewSecret(identity.VerifyTokenPrefix)
	refresh := identity.NewSecret(identity.RefreshTokenPrefix)
	now := h.s.Now()
	var userID, orgID, sessionID string
	err = pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		// ON CONFLICT on the lower(email) index: a concurrent signup with the
		// same address waits for the other transaction, then finds the row.
		err := tx.QueryRow(ctx, `INSERT INTO users (email, name, password_hash) VALUES ($1, $2, $3)
			ON CONFLICT ((lower(email))) DO NOTHING RETURNING id::text`, req.Email, name, hash).Scan(&userID)
		if errors.Is(err, pgx.ErrNoRows) {
			return errEmailTaken
		}
		if err != nil {
			return err
		}
		if orgID, err = createPersonalOrg(ctx, tx, name, req.Email); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO members (org_id, user_id, role) VALUES ($1, $2, 'owner')`, orgID, userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE users SET active_org_id = $1 WHERE id = $2`, orgID, userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO verification_tokens (user_id, email, token_hash, expires_at)
			VALUES ($1, $2, $3, $4)`, userID, req.Email, identity.HashSecret(verifyToken), now.Add(h.verifyTTL)); err != nil {
			return err
		}
		if err := h.queueVerification(ctx, tx, userID, req.Email, verifyToken); err != nil {
			return err
		}
		sessionID, err = h.insertSession(ctx, tx, c, userID, refresh, now)
		return err
	})
	if err != nil {
		return err
	}
	resp, err := h.authResponse(ctx, userID, sessionID, "", refresh, now)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusCreated, resp)
}

// createPersonalOrg inserts the personal organization with a slug derived
// from the name (or the email's local part), retrying with a random suffix
// while the slug is taken. ON CONFLICT DO NOTHING keeps the transaction
// usable after a collision; the original silently gave up there.
func createPersonalOrg(ctx context.Context, tx pgx.Tx, name, email string) (string, error) {
	base := identity.Slugify(name)
	if base == "" {
		local, _, _ := strings.Cut(email, "@")
		base = identity.Slugify(local)
	}
	if base == "" {
		base = "workspace"
	}
	slug := base
	for attempt := range 10 {
		if attempt > 0 {
			slug = base + "-" + identity.RandomSuffix()
		}
		id, err := orgsdb.New(tx).CreatePersonalOrg(ctx, orgsdb.CreatePersonalOrgParams{Name: name + "'s Workspace", Slug: slug})
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", err
		}
	}
	return "", fmt.Errorf("identity: no free slug for personal organization %q after 10 attempts", base)
}

// --- login, refresh, logout ------------------------------------------------

func (h *handler) login(c *api.Ctx) error {
	var req LoginRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	ip := c.ClientIP()
	account := identity.HashSecret(strings.ToLower(strings.TrimSpace(req.Email)))
	source := account + ":" + ip
	if err := allowAll(c, limitCheck{h.loginIP, ip}, limitCheck{h.loginSource, source}); err != nil {
		return err
	}
	var userID string
	var hash *string
	familiar := false
	err := h.s.Pool.QueryRow(ctx, `SELECT u.id::text, u.password_hash, EXISTS (SELECT 1 FROM auth_sessions s
			WHERE s.user_id = u.id AND s.ip_address = $2 AND s.impersonator_id IS NULL AND s.created_at > $3)
		FROM users u WHERE lower(u.email) = lower($1)`,
		strings.TrimSpace(req.Email), ip, h.s.Now().Add(-FamiliarSourceAge)).Scan(&userID, &hash, &familiar)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	// The account-wide budget is spent by unfamiliar sources only, and
	// checked before the password so a guess over it learns nothing.
	if !familiar {
		if err := allow(c, h.loginAccount, account); err != nil {
			return err
		}
	}
	if errors.Is(err, pgx.ErrNoRows) || hash == nil {
		// Same work as a wrong password, so timing does not reveal accounts.
		if err := identity.DummyVerify(ctx, req.Password); err != nil {
			return err
		}
		return errBadCredentials
	}
	ok, rehash, err := identity.VerifyPassword(ctx, req.Password, *hash)
	if err != nil {
		return fmt.Errorf("user %s: %w", userID, err)
	}
	if !ok {
		return errBadCredentials
	}
	// Only failures count against the account: take this attempt back.
	if err := h.loginSource.Reset(ctx, source); err != nil {
		c.Log().Warn("identity: clearing login failures failed", "user_id", userID, "error", err)
	}
	if !familiar {
		if err := h.loginAccount.Undo(ctx, account); err != nil {
			c.Log().Warn("identity: clearing login failures failed", "user_id", userID, "error", err)
		}
	}
	if rehash {
		h.rehash(c, userID, req.Password)
	}
	now := h.s.Now()
	refresh := identity.NewSecret(identity.RefreshTokenPrefix)
	sessionID, err := h.insertSession(ctx, h.s.Pool, c, userID, refresh, now)
	if err != nil {
		return err
	}
	// Housekeeping: drop this person's long-dead sessions.
	if _, err := h.s.Pool.Exec(ctx, `DELETE FROM auth_sessions WHERE user_id = $1
		AND (expires_at < $2 OR revoked_at < $2)`, userID, now.Add(-24*time.Hour)); err != nil {
		c.Log().Warn("identity: pruning old sessions failed", "user_id", userID, "error", err)
	}
	resp, err := h.authResponse(ctx, userID, sessionID, "", refresh, now)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, resp)
}

// rehash replaces a hash made with old parameters (best effort).
func (h *handler) rehash(c *api.Ctx, userID, password string) {
	ctx := c.Request.Context()
	hash, err := identity.HashPassword(ctx, password)
	if err == nil {
		_, err = h.s.Pool.Exec(ctx, `UPDATE users SET password_hash = $1, updated_at = now() WHERE id = $2`, hash, userID)
	}
	if err != nil {
		c.Log().Warn("identity: password rehash failed", "user_id", userID, "error", err)
	}
}

// insertSession creates a login session holding the refresh token's hash.
func (h *handler) insertSession(ctx context.Context, q queryer, c *api.Ctx, userID, refresh string, now time.Time) (string, error) {
	var id string
	err := q.QueryRow(ctx, `INSERT INTO auth_sessions (user_id, refresh_token_hash, ip_address, user_agent, expires_at, last_used_at)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text`,
		userID, identity.HashSecret(refresh), c.ClientIP(), truncate(c.Request.UserAgent(), 512), now.Add(h.sessionTTL), now).Scan(&id)
	return id, err
}

func (h *handler) authResponse(ctx context.Context, userID, sessionID, impersonatorID, refresh string, now time.Time) (AuthResponse, error) {
	u, err := loadUser(ctx, h.s.Pool, userID)
	if err != nil {
		return AuthResponse{}, err
	}
	access, exp, err := h.s.Tokens.Issue(userID, sessionID, impersonatorID)
	if err != nil {
		return AuthResponse{}, err
	}
	var sessionExp time.Time
	if err := h.s.Pool.QueryRow(ctx, `SELECT expires_at FROM auth_sessions WHERE id = $1`, sessionID).Scan(&sessionExp); err != nil {
		return AuthResponse{}, err
	}
	return AuthResponse{User: u, TokenType: "Bearer", AccessToken: access, AccessTokenExpiresAt: exp.UTC(),
		RefreshToken: refresh, RefreshTokenExpiresAt: sessionExp.UTC()}, nil
}

func (h *handler) refresh(c *api.Ctx) error {
	var req RefreshRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := allow(c, h.refreshIP, c.ClientIP()); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if !strings.HasPrefix(req.RefreshToken, identity.RefreshTokenPrefix) {
		return httpapi.Unauthenticated()
	}
	old := identity.HashSecret(req.RefreshToken)
	next := identity.NewSecret(identity.RefreshTokenPrefix)
	now := h.s.Now()
	var sessionID, userID string
	var impersonator *string
	reused := false
	err := pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		// The UPDATE is the compare-and-swap: of two concurrent exchanges of
		// one token exactly one matches; the other is treated as reuse.
		// Impersonation sessions keep their original expiry.
		err := tx.QueryRow(ctx, `UPDATE auth_sessions SET refresh_token_hash = $2, last_used_at = $3,
				expires_at = CASE WHEN impersonator_id IS NULL THEN $4 ELSE expires_at END
			WHERE refresh_token_hash = $1 AND revoked_at IS NULL AND expires_at > $3
			RETURNING id::text, user_id::text, impersonator_id::text`,
			old, identity.HashSecret(next), now, now.Add(h.sessionTTL)).Scan(&sessionID, &userID, &impersonator)
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO auth_rotated_refresh_tokens (token_hash, session_id, rotated_at)
				VALUES ($1, $2, $3)`, old, sessionID, now)
			return err
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Not current: was it rotated away? Then it leaked or was replayed;
		// revoke the whole session so the thief's copy dies too.
		err = tx.QueryRow(ctx, `UPDATE auth_sessions s SET revoked_at = COALESCE(s.revoked_at, $2)
			FROM auth_rotated_refresh_tokens r WHERE r.token_hash = $1 AND r.session_id = s.id
			RETURNING s.id::text, s.user_id::text`, old, now).Scan(&sessionID, &userID)
		if errors.Is(err, pgx.ErrNoRows) {
			return httpapi.Unauthenticated()
		}
		if err != nil {
			return err
		}
		reused = true
		_, err = tx.Exec(ctx, `INSERT INTO audit_log (actor_id, action, target_type, target_id, request_id)
			VALUES ($1, 'auth.refresh_token_reused', 'auth_session', $2, $3)`, userID, sessionID, c.RequestID())
		if err != nil {
			return err
		}
		// The person's own trail (no organization: GET /me/audit); the
		// actor is the person whose credential was presented.
		return audit.Emit(ctx, tx, audit.Event{Action: "auth.refresh_token_reused", TargetType: "auth_session", TargetID: sessionID,
			Details: map[string]any{"session_revoked": true}, Actor: audit.Actor{UserID: userID, RequestID: c.RequestID()}})
	})
	if err != nil {
		return err
	}
	if reused {
		c.Log().Warn("identity: rotated refresh token presented again; session revoked", "user_id", userID, "session_id", sessionID)
		return httpapi.Unauthenticated()
	}
	imp := ""
	if impersonator != nil {
		imp = *impersonator
	}
	resp, err := h.authResponse(ctx, userID, sessionID, imp, next, now)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, resp)
}

func (h *handler) logout(c *api.Ctx) error {
	p := c.Principal()
	if p.Kind != auth.KindUser || p.SessionID == "" {
		return httpapi.BadRequest("only a login session can log out; revoke an API key with DELETE /api/v1/api-keys/{id}")
	}
	_, err := h.s.Pool.Exec(c.Request.Context(), `UPDATE auth_sessions SET revoked_at = $3
		WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL`, p.SessionID, p.UserID, h.s.Now())
	if err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}

// --- me ------------------------------------------------------------------------

func (h *handler) me(c *api.Ctx) error {
	p := c.Principal()
	u, err := loadUser(c.Request.Context(), h.s.Pool, p.UserID)
	if errors.Is(err, pgx.ErrNoRows) {
		return httpapi.Unauthenticated()
	}
	if err != nil {
		return err
	}
	m := Me{User: u, IsSuperAdmin: p.SuperAdmin, AuthKind: string(p.Kind)}
	m.ActiveOrgID = nil
	if p.OrgID != "" {
		m.ActiveOrgID, m.Role = new(p.OrgID), new(string(p.Role))
	}
	if p.APIKeyID != "" {
		m.APIKeyID = new(p.APIKeyID)
	}
	if p.ImpersonatorID != "" {
		m.ImpersonatorID = new(p.ImpersonatorID)
	}
	return c.Reply(http.StatusOK, m)
}

// truncate makes s safe for a text column: valid UTF-8 without NUL, at most
// n bytes.
func truncate(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
