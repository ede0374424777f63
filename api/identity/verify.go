package identity

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/mailer"
)

var errBadVerifyToken = &httpapi.Error{Status: http.StatusBadRequest, Code: "invalid_token",
	Message: "this verification link is invalid, expired or already used; request a new one"}

// sendVerification emails the link. A delivery failure does not fail the
// request (the account exists; the person can ask for another email); it is
// logged without the link.
func (h *handler) sendVerification(c *api.Ctx, userID, email, token string) {
	link := strings.TrimRight(h.s.Cfg.PublicURL, "/") + "/verify-email?token=" + url.QueryEscape(token)
	err := h.s.Mailer.Send(c.Request.Context(), mailer.Message{
		To: email, Subject: "Verify your email address for Proliferate", Kind: "verify_email",
		Text: "Confirm that this is your email address by opening this link within 24 hours:\n\n" + link +
			"\n\nIf you did not create a Proliferate account, ignore this email.\n",
	})
	if err != nil {
		c.Log().Error("identity: sending the verification email failed", "user_id", userID, "error", err)
	}
}

func (h *handler) verifyEmail(c *api.Ctx) error {
	var req VerifyEmailRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := allow(c, h.verifyIP, c.ClientIP()); err != nil {
		return err
	}
	if !strings.HasPrefix(req.Token, identity.VerifyTokenPrefix) {
		return errBadVerifyToken
	}
	ctx := c.Request.Context()
	now := h.s.Now()
	var email string
	err := pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		var userID string
		err := tx.QueryRow(ctx, `UPDATE verification_tokens SET used_at = $2
			WHERE token_hash = $1 AND purpose = 'verify_email' AND used_at IS NULL AND expires_at > $2
			RETURNING user_id::text, email`, identity.HashSecret(req.Token), now).Scan(&userID, &email)
		if errors.Is(err, pgx.ErrNoRows) {
			return errBadVerifyToken
		}
		if err != nil {
			return err
		}
		// The token proves control of the address it was sent to; if the
		// account's email changed since, it proves nothing about the new one.
		tag, err := tx.Exec(ctx, `UPDATE users SET email_verified = true, updated_at = now()
			WHERE id = $1 AND lower(email) = lower($2)`, userID, email)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errBadVerifyToken
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, VerifyEmailResponse{Email: email, EmailVerified: true})
}

func (h *handler) resendVerification(c *api.Ctx) error {
	p := c.Principal()
	ctx := c.Request.Context()
	var email string
	var verified bool
	err := h.s.Pool.QueryRow(ctx, `SELECT email, email_verified FROM users WHERE id = $1`, p.UserID).Scan(&email, &verified)
	if err != nil {
		return err
	}
	if verified {
		return httpapi.Conflict("already_verified", "this email address is already verified")
	}
	if err := allow(c, h.resendUser, p.UserID); err != nil {
		return err
	}
	token := identity.NewSecret(identity.VerifyTokenPrefix)
	err = pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		// Only the newest link works: earlier unused ones are withdrawn.
		if _, err := tx.Exec(ctx, `DELETE FROM verification_tokens WHERE user_id = $1 AND purpose = 'verify_email'
			AND used_at IS NULL`, p.UserID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO verification_tokens (user_id, email, token_hash, expires_at)
			VALUES ($1, $2, $3, $4)`, p.UserID, email, identity.HashSecret(token), h.s.Now().Add(h.verifyTTL))
		return err
	})
	if err != nil {
		return err
	}
	h.sendVerification(c, p.UserID, email, token)
	return c.Reply(http.StatusNoContent, nil)
}
