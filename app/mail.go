package app

import (
	"context"
	"time"

	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue"
)

// MailRole sends the emails queued in mail_queue (verification,
// invitations, password reset, run notifications) through the configured
// mailer (MAILER), retrying with backoff through mail server outages. It
// runs beside the API (`proliferate api` and `dev`); any number of
// replicas share the queue (each email is claimed by one).
func (a *App) MailRole(ctx context.Context) (Role, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return Role{}, err
	}
	box, err := a.SecretBox()
	if err != nil {
		return Role{}, err
	}
	s := mailqueue.NewSender(a.Pool, box, mailer.FromConfig(a.Cfg, a.Log), mailqueue.Options{
		MaxAttempts:    a.Cfg.MailMaxAttempts,
		InitialBackoff: a.Cfg.MailBackoffInitial,
		MaxBackoff:     a.Cfg.MailBackoffMax,
		// Longer than one SMTP exchange can take, so a slow send is never
		// claimed by a second sender.
		Lease:        2*a.Cfg.SMTPTimeout + 30*time.Second,
		PollInterval: a.Cfg.MailPollInterval,
	}, a.Log.With("role", "mail-sender"))
	return Role{"mail-sender", s.Run}, nil
}
