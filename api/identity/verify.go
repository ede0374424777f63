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
	"github.com/proliferate/proliferate/internal/identity/identitydb"
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
	email, err := identity.VerifyEmail(c.Request.Context(), h.s.Pool, req.Token, h.s.Now())
	if errors.Is(err, identity.ErrTokenUnusable) {
		return errBadVerifyToken
	}
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, VerifyEmailResponse{Email: email, EmailVerified: true})
}

func (h *handler) resendVerification(c *api.Ctx) error {
	p := c.Principal()
	ctx := c.Request.Context()
	u, err := identitydb.New(h.s.Pool).UserVerification(ctx, p.UserID)
	if err != nil {
		return err
	}
	if u.EmailVerified {
		return httpapi.Conflict("already_verified", "this email address is already verified")
	}
	if err := allow(c, h.resendUser, p.UserID); err != nil {
		return err
	}
	token := identity.NewSecret(identity.VerifyTokenPrefix)
	err = pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		q := identitydb.New(tx)
		// Only the newest link works: earlier unused ones are withdrawn.
		if err := q.WithdrawVerificationTokens(ctx, p.UserID); err != nil {
			return err
		}
		if err := q.InsertVerificationToken(ctx, identitydb.InsertVerificationTokenParams{UserID: p.UserID, Email: u.Email,
			TokenHash: identity.HashSecret(token), ExpiresAt: h.s.Now().Add(h.verifyTTL)}); err != nil {
			return err
		}
		return h.queueVerification(ctx, tx, p.UserID, u.Email, token)
	})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}
