package identity

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue"
)

// Password reset:
//
//	POST /auth/password-reset/request {email}     always 202
//	POST /auth/password-reset         {token, password}
//
// The request answers 202 whether or not an account has the address, and
// does its work (finding the account, storing the token's hash, sending the
// email) after answering, so neither the answer nor its timing tells which
// addresses have accounts. It is rate limited per client address and per
// email address (hashed; the same for known and unknown addresses). The
// link carries a pr_ token (256 random bits) valid for PasswordResetTTL,
// stored hashed, single use; a newer link withdraws older ones. Resetting
// checks the password policy (identity.CheckPassword with the account's
// email and name), sets the new hash, uses up every outstanding link and
// revokes every login session of the person, so refresh and access tokens
// issued before stop working at once. API keys are separate credentials
// and stay (the person revokes them at /api-keys).

// PasswordResetTTL is how long a password reset link works.
const PasswordResetTTL = time.Hour

var errBadResetToken = &httpapi.Error{Status: http.StatusBadRequest, Code: "invalid_token",
	Message: "this password reset link is invalid, expired or already used; request a new one"}

func (h *handler) requestPasswordReset(c *api.Ctx) error {
	var req PasswordResetRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	email := strings.TrimSpace(req.Email)
	if err := allowAll(c, limitCheck{h.resetRequestIP, c.ClientIP()},
		limitCheck{h.resetRequestEmail, identity.HashSecret(strings.ToLower(email))}); err != nil {
		return err
	}
	// The work happens after the answer, detached from the request (bounded
	// on its own), so its duration does not depend on the account existing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 2*time.Minute)
	log := c.Log()
	h.background.Add(1)
	go func() {
		defer h.background.Done()
		defer cancel()
		sent, err := h.sendPasswordReset(ctx, email)
		if err != nil {
			log.Error("identity: password reset email failed", "error", err)
		}
		if h.resetHook != nil {
			h.resetHook(email, sent)
		}
	}()
	return c.Reply(http.StatusAccepted, PasswordResetRequested{Status: "accepted",
		Message: "if an account has this email address, a link to reset its password is on its way"})
}

// sendPasswordReset stores a new token for the account with email (if any)
// and emails the link; sent reports whether there was an account to mail.
func (h *handler) sendPasswordReset(ctx context.Context, email string) (sent bool, err error) {
	u, err := identitydb.New(h.s.Pool).ResetUserByEmail(ctx, email)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	token := identity.NewSecret(identity.ResetTokenPrefix)
	err = pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		q := identitydb.New(tx)
		// Only the newest link works.
		if err := q.WithdrawResetTokens(ctx, u.ID); err != nil {
			return err
		}
		if err := q.InsertResetToken(ctx, identitydb.InsertResetTokenParams{UserID: u.ID, Email: u.Email,
			TokenHash: identity.HashSecret(token), ExpiresAt: h.s.Now().Add(PasswordResetTTL)}); err != nil {
			return err
		}
		// Queued with the token: the mail queue delivers it through mail
		// server outages.
		link := strings.TrimRight(h.s.Cfg.PublicURL, "/") + "/reset-password?token=" + url.QueryEscape(token)
		_, err := mailqueue.Enqueue(ctx, tx, h.s.Box, mailqueue.Mail{Kind: mailer.KindPasswordReset, To: u.Email, UserID: u.ID,
			Data: mailer.PasswordReset{Link: link}})
		return err
	})
	if err != nil {
		return false, err
	}
	return true, nil
}

func (h *handler) resetPassword(c *api.Ctx) error {
	var req ResetPasswordRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := allow(c, h.resetIP, c.ClientIP()); err != nil {
		return err
	}
	if !strings.HasPrefix(req.Token, identity.ResetTokenPrefix) {
		return errBadResetToken
	}
	ctx := c.Request.Context()
	now := h.s.Now()
	// Check the token and the policy before hashing (argon2 is slow) and
	// without using the token up: a refused password leaves the link working.
	u, err := identity.ResetTokenAccount(ctx, h.s.Pool, req.Token, now)
	if errors.Is(err, identity.ErrTokenUnusable) {
		return errBadResetToken
	}
	if err != nil {
		return err
	}
	if problem := identity.CheckPassword(req.Password, u.Email, u.Name); problem != "" {
		return httpapi.Invalid(httpapi.FieldError{Field: "password", Problem: problem})
	}
	userID := u.UserID
	hash, err := identity.HashPassword(ctx, req.Password)
	if err != nil {
		return err
	}
	revoked, err := identity.ResetPassword(ctx, h.s.Pool, req.Token, userID, hash, c.RequestID(), now)
	if errors.Is(err, identity.ErrTokenUnusable) {
		return errBadResetToken
	}
	if err != nil {
		return err
	}
	// Earlier failed guesses no longer matter.
	if err := h.loginAccount.Reset(ctx, identity.HashSecret(strings.ToLower(u.Email))); err != nil {
		c.Log().Warn("identity: clearing login failures failed", "user_id", userID, "error", err)
	}
	c.Log().Info("identity: password reset", "user_id", userID, "sessions_revoked", revoked)
	return c.Reply(http.StatusOK, PasswordResetDone{Status: "password_reset", SessionsRevoked: int(revoked)})
}
