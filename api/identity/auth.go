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
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

var (
	errEmailTaken = httpapi.Conflict("email_taken", "an account with this email already exists")
	// errBadCredentials is the one answer for an unknown email, a wrong
	// password and an account without a password alike.
	errBadCredentials = &httpapi.Error{Status: http.StatusUnauthorized, Code: "invalid_credentials", Message: "email or password is incorrect"}
)

func loadUser(ctx context.Context, q identitydb.DBTX, id string) (User, error) {
	u, err := identitydb.New(q).UserProfile(ctx, id)
	return User(u), err
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
		q := identitydb.New(tx)
		// ON CONFLICT on the lower(email) index: a concurrent signup with the
		// same address waits for the other transaction, then finds the row.
		var err error
		userID, err = q.InsertPasswordUser(ctx, identitydb.InsertPasswordUserParams{Email: req.Email, Name: name, PasswordHash: &hash})
		if errors.Is(err, pgx.ErrNoRows) {
			return errEmailTaken
		}
		if err != nil {
			return err
		}
		if orgID, err = createPersonalOrg(ctx, tx, name, req.Email); err != nil {
			return err
		}
		if err := orgsdb.New(tx).InsertOwnerMembership(ctx, orgsdb.InsertOwnerMembershipParams{OrgID: orgID, UserID: userID}); err != nil {
			return err
		}
		if err := q.SetActiveOrg(ctx, identitydb.SetActiveOrgParams{ID: userID, ActiveOrgID: &orgID}); err != nil {
			return err
		}
		if err := q.InsertVerificationToken(ctx, identitydb.InsertVerificationTokenParams{UserID: userID, Email: req.Email,
			TokenHash: identity.HashSecret(verifyToken), ExpiresAt: now.Add(h.verifyTTL)}); err != nil {
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
	cand, err := identitydb.New(h.s.Pool).LoginCandidate(ctx, identitydb.LoginCandidateParams{Email: strings.TrimSpace(req.Email),
		Ip: ip, FamiliarSince: h.s.Now().Add(-FamiliarSourceAge)})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	// The account-wide budget is spent by unfamiliar sources only, and
	// checked before the password so a guess over it learns nothing.
	userID, hash, familiar := cand.ID, cand.PasswordHash, cand.Familiar
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
	if err := identitydb.New(h.s.Pool).PruneAuthSessions(ctx, identitydb.PruneAuthSessionsParams{UserID: userID,
		Before: now.Add(-24 * time.Hour)}); err != nil {
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
		err = identitydb.New(h.s.Pool).SetPasswordHash(ctx, identitydb.SetPasswordHashParams{ID: userID, PasswordHash: hash})
	}
	if err != nil {
		c.Log().Warn("identity: password rehash failed", "user_id", userID, "error", err)
	}
}

// insertSession creates a login session holding the refresh token's hash.
func (h *handler) insertSession(ctx context.Context, q identitydb.DBTX, c *api.Ctx, userID, refresh string, now time.Time) (string, error) {
	return identitydb.New(q).InsertAuthSession(ctx, identitydb.InsertAuthSessionParams{UserID: userID, RefreshTokenHash: identity.HashSecret(refresh),
		IpAddress: c.ClientIP(), UserAgent: truncate(c.Request.UserAgent(), 512), ExpiresAt: now.Add(h.sessionTTL), Now: now})
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
	sessionExp, err := identitydb.New(h.s.Pool).AuthSessionExpiry(ctx, sessionID)
	if err != nil {
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
	next := identity.NewSecret(identity.RefreshTokenPrefix)
	now := h.s.Now()
	r, err := identity.RotateRefreshToken(ctx, h.s.Pool, req.RefreshToken, next, now, h.sessionTTL, c.RequestID())
	if errors.Is(err, identity.ErrRefreshUnknown) {
		return httpapi.Unauthenticated()
	}
	if err != nil {
		return err
	}
	if r.Reused {
		c.Log().Warn("identity: rotated refresh token presented again; session revoked", "user_id", r.UserID, "session_id", r.SessionID)
		return httpapi.Unauthenticated()
	}
	resp, err := h.authResponse(ctx, r.UserID, r.SessionID, r.ImpersonatorID, next, now)
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
	err := identitydb.New(h.s.Pool).RevokeAuthSession(c.Request.Context(), identitydb.RevokeAuthSessionParams{ID: p.SessionID,
		UserID: p.UserID, Now: h.s.Now()})
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
