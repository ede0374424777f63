package identity

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue"
)

var errBadVerifyToken = &httpapi.Error{Status: http.StatusBadRequest, Code: "invalid_token",
	Message: "this verification link is invalid, expired or already used; request a new one"}

// queueVerification queues the email with the link in tx (the token's
// transaction): the mail queue delivers it through mail server outages.
func (h *handler) queueVerification(ctx context.Context, tx pgx.Tx, userID, email, token string) error {
	link := strings.TrimRight(h.s.Cfg.PublicURL, "/") + "/verify-email?token=" + url.QueryEscape(token)
	_, err := mailqueue.Enqueue(ctx, tx, h.s.Box, mailqueue.Mail{Kind: mailer.KindVerifyEmail, To: email, UserID: userID,
		Data: mailer.VerifyEmail{Link: link}})
	return err
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
		if _, err := tx.Exec(ctx, `INSERT INTO verification_tokens (user_id, email, token_hash, expires_at)
			VALUES ($1, $2, $3, $4)`, p.UserID, email, identity.HashSecret(token), h.s.Now().Add(h.verifyTTL)); err != nil {
			return err
		}
		return h.queueVerification(ctx, tx, p.UserID, email, token)
	})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}
