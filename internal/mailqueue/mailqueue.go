// Package mailqueue is the platform's durable mail queue (table mail_queue):
// an email is queued in the same transaction as the change that causes it,
// and a Sender delivers it through the configured mailer.Mailer, retrying
// until the mail server takes it. A mail outage loses nothing.
//
// # Why a table and not a Kafka topic
//
// Most emails carry a one-time link (verification, invitation, password
// reset) whose token exists in clear only in the transaction that creates
// it (the database keeps its hash). Such a body may not travel on a topic,
// so a topic record could only point at a row holding it; and a consumer
// group retries a record a bounded number of times in partition order, so
// an hour-long SMTP outage would either stall a partition or push every
// email of the outage to the dead-letter topic. A row per email, claimed
// with FOR UPDATE SKIP LOCKED, gives each email its own retry schedule
// (exponential backoff with jitter, next_attempt_at), lets any number of
// senders drain in parallel, and sets aside one undeliverable email (status
// 'failed' with its error) without holding up the others. It is the same
// shape as the outbox relay (a table drained by a worker, woken by
// LISTEN/NOTIFY), with SMTP instead of Kafka at the end. Run notifications
// start on runs.lifecycle: the notifier consumer queues them here (one row
// per recipient, deduplicated by a key, so a redelivered record queues
// nothing new).
//
// # Secrets
//
// The template data (with the link) is sealed with the platform's
// encryption keys (secretbox, AES-256-GCM) and bound to the row's id, kind
// and recipient, so a copied or edited row does not open. The sender
// renders the email from its template at send time (internal/mailer), and
// drops the sealed data once the email is out. Logs name the row, kind and
// error, never the data.
//
// # Delivery guarantee
//
// At least once. A row is sent only while its sender holds its lease
// (longer than the SMTP timeout) and marked sent right after the server
// accepted it; a sent row is never sent again, and two senders never hold
// the same row. A sender that dies between the server's 250 and the mark
// leaves the row to be sent again after the lease: the second copy has the
// same Message-ID (<row id@sender domain>), which mail clients and
// providers use to drop duplicates.
package mailqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue/mailqueuedb"
	"github.com/proliferate/proliferate/internal/secretbox"
)

// Channel is the LISTEN/NOTIFY channel that wakes the senders.
const Channel = "proliferate_mail"

// Statuses of a queued email.
const (
	StatusPending = "pending"
	StatusSent    = "sent"
	StatusFailed  = "failed"
)

// Mail is one email to queue.
type Mail struct {
	// Kind is a mailer kind (mailer.KindVerifyEmail…); Data its data type
	// (mailer.VerifyEmail…).
	Kind string
	To   string
	Data any
	// DedupKey, when set, makes queuing idempotent: a second Enqueue with
	// the same key (a redelivered record) queues nothing.
	DedupKey string
	// OrgID and UserID tie the row to an organization and a person (it goes
	// when they are deleted); optional.
	OrgID, UserID string
}

// Enqueue queues m in tx; it is sent once tx commits (and vanishes with a
// rollback). It reports whether a row was added (false: DedupKey was
// already queued). The template is rendered once here so that bad data
// fails the caller's transaction instead of the send.
func Enqueue(ctx context.Context, tx pgx.Tx, box *secretbox.Box, m Mail) (bool, error) {
	if box == nil {
		return false, errors.New("mailqueue: no encryption keys to seal the mail with")
	}
	if err := mailer.DataFor(m.Kind, m.Data); err != nil {
		return false, fmt.Errorf("mailqueue: %w", err)
	}
	data, err := json.Marshal(m.Data)
	if err != nil {
		return false, fmt.Errorf("mailqueue: %s data: %w", m.Kind, err)
	}
	if _, err := mailer.Render(m.Kind, m.To, data); err != nil {
		return false, fmt.Errorf("mailqueue: %w", err)
	}
	id := uuid.NewString()
	sealed, err := box.Seal(data, aad(id, m.Kind, m.To))
	if err != nil {
		return false, fmt.Errorf("mailqueue: seal: %w", err)
	}
	q := mailqueuedb.New(tx)
	n, err := q.Enqueue(ctx, mailqueuedb.EnqueueParams{ID: id, DedupKey: opt(m.DedupKey), Kind: m.Kind, Recipient: m.To,
		OrgID: opt(m.OrgID), UserID: opt(m.UserID), SealedData: sealed})
	if err != nil {
		return false, fmt.Errorf("mailqueue: queue %s email: %w", m.Kind, err)
	}
	if n == 0 {
		return false, nil
	}
	// Delivered at commit, once per transaction.
	if err := q.NotifySender(ctx); err != nil {
		return false, fmt.Errorf("mailqueue: notify: %w", err)
	}
	return true, nil
}

func aad(id, kind, to string) []byte { return []byte("mail_queue:" + id + ":" + kind + ":" + to) }

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Options tune a Sender.
type Options struct {
	// MaxAttempts bounds the tries of one email before it is set aside as
	// failed [12].
	MaxAttempts int
	// InitialBackoff is the wait after the first failure, doubled after
	// each next one up to MaxBackoff, with jitter (a random 50–100 % of
	// it) [30s, 1h].
	InitialBackoff, MaxBackoff time.Duration
	// Lease is how long a sender holds a claimed email; it must exceed the
	// SMTP timeout [SMTP timeout × 2 + 30s, or 1m].
	Lease time.Duration
	// BatchSize is how many emails one claim takes [20].
	BatchSize int
	// PollInterval is how often Run looks for due emails without a
	// notification (retries come due without one) [5s].
	PollInterval time.Duration
	// SentRetention is how long sent rows are kept (for support questions:
	// was it sent, when) [7 days].
	SentRetention time.Duration
}

func (o *Options) defaults() {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 12
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = 30 * time.Second
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = max(time.Hour, o.InitialBackoff)
	}
	if o.Lease <= 0 {
		o.Lease = time.Minute
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 20
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 5 * time.Second
	}
	if o.SentRetention <= 0 {
		o.SentRetention = 7 * 24 * time.Hour
	}
}

// Sender delivers queued emails.
type Sender struct {
	pool   *pgxpool.Pool
	box    *secretbox.Box
	mailer mailer.Mailer
	opt    Options
	log    *slog.Logger
	// Now is the sender's clock [time.Now]; tests move it to make retries
	// due.
	Now func() time.Time
	// Jitter returns a number in [0, 1) [math/rand/v2].
	Jitter func() float64
}

// NewSender returns a sender that delivers through m.
func NewSender(pool *pgxpool.Pool, box *secretbox.Box, m mailer.Mailer, o Options, log *slog.Logger) *Sender {
	o.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sender{pool: pool, box: box, mailer: m, opt: o, log: log, Now: time.Now, Jitter: rand.Float64}
}

// Result counts what a Drain did.
type Result struct {
	// Sent were accepted by the mail server; Retry failed for a passing
	// reason and wait for their next attempt; Failed were set aside.
	Sent, Retry, Failed int
}

// Drain sends every email due now, batch after batch, and returns what it
// did. Emails another sender holds are skipped.
func (s *Sender) Drain(ctx context.Context) (Result, error) {
	var res Result
	for ctx.Err() == nil {
		now := s.Now()
		rows, err := mailqueuedb.New(s.pool).ClaimDue(ctx, mailqueuedb.ClaimDueParams{
			LeaseUntil: now.Add(s.opt.Lease), Now: now, Max: int32(s.opt.BatchSize)})
		if err != nil {
			return res, fmt.Errorf("mailqueue: claim: %w", err)
		}
		for _, r := range rows {
			outcome, err := s.send(ctx, r)
			if err != nil {
				return res, err
			}
			switch outcome {
			case StatusSent:
				res.Sent++
			case StatusFailed:
				res.Failed++
			default:
				res.Retry++
			}
		}
		if len(rows) < s.opt.BatchSize {
			break
		}
	}
	return res, ctx.Err()
}

// send delivers one claimed row and records the outcome; the error is a
// database error (the row then stays claimed until its lease ends).
func (s *Sender) send(ctx context.Context, r mailqueuedb.ClaimDueRow) (string, error) {
	log := s.log.With("mail_id", r.ID, "kind", r.Kind, "attempt", r.Attempts)
	q := mailqueuedb.New(s.pool)
	sendErr := s.deliver(ctx, r)
	now := s.Now()
	switch {
	case sendErr == nil:
		if _, err := q.MarkSent(ctx, mailqueuedb.MarkSentParams{Now: now, ID: r.ID}); err != nil {
			return "", fmt.Errorf("mailqueue: mark %s sent: %w", r.ID, err)
		}
		log.Info("email sent")
		return StatusSent, nil
	case ctx.Err() != nil:
		// Shutting down: the lease runs out and another sender retries.
		return "", ctx.Err()
	case mailer.Permanent(sendErr) || int(r.Attempts) >= s.opt.MaxAttempts:
		msg := sendErr.Error()
		if _, err := q.MarkFailed(context.WithoutCancel(ctx), mailqueuedb.MarkFailedParams{Now: now, LastError: &msg, ID: r.ID}); err != nil {
			return "", fmt.Errorf("mailqueue: set %s aside: %w", r.ID, err)
		}
		log.Error("email set aside as undeliverable; not retried (`proliferate mail failed` lists it, `proliferate mail retry` puts it back)",
			"permanent", mailer.Permanent(sendErr), "error", msg)
		return StatusFailed, nil
	default:
		wait := s.Backoff(int(r.Attempts))
		msg := sendErr.Error()
		if _, err := q.Reschedule(context.WithoutCancel(ctx), mailqueuedb.RescheduleParams{NextAttemptAt: now.Add(wait), LastError: &msg, ID: r.ID}); err != nil {
			return "", fmt.Errorf("mailqueue: reschedule %s: %w", r.ID, err)
		}
		log.Warn("email not delivered; retrying later", "retry_in", wait.Round(time.Second), "error", msg)
		return StatusPending, nil
	}
}

// deliver opens, renders and sends one row.
func (s *Sender) deliver(ctx context.Context, r mailqueuedb.ClaimDueRow) error {
	data, err := s.box.Open(r.SealedData, aad(r.ID, r.Kind, r.Recipient))
	if err != nil {
		return &mailer.PermanentError{Err: fmt.Errorf("mailqueue: open the sealed data: %w", err)}
	}
	m, err := mailer.Render(r.Kind, r.Recipient, data)
	if err != nil {
		return &mailer.PermanentError{Err: err}
	}
	m.ID = "mail-" + r.ID
	return s.mailer.Send(ctx, m)
}

// Backoff is the wait after the attempt-th failure: InitialBackoff doubled
// per earlier failure, at most MaxBackoff, of which a random 50–100 %.
func (s *Sender) Backoff(attempt int) time.Duration {
	d := s.opt.InitialBackoff
	for i := 1; i < attempt && d < s.opt.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opt.MaxBackoff)
	return d/2 + time.Duration(s.Jitter()*float64(d/2))
}

// Run sends until ctx ends: it drains whatever is due, then waits for a
// notification (a new email) or the poll interval (retries coming due).
func (s *Sender) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	go db.Listen(ctx, s.pool, Channel, wake, s.log, nil)
	poll := time.NewTimer(0)
	defer poll.Stop()
	purge := time.NewTicker(time.Hour)
	defer purge.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-purge.C:
			if n, err := mailqueuedb.New(s.pool).PurgeSent(ctx, s.Now().Add(-s.opt.SentRetention)); err == nil && n > 0 {
				s.log.Info("purged sent emails", "rows", n)
			}
			continue
		case <-wake:
		case <-poll.C:
		}
		if _, err := s.Drain(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait := min(time.Duration(failures)*time.Second, 30*time.Second)
			s.log.Error("mail queue drain failed; emails stay queued", "error", err, "retry_in", wait)
			poll.Reset(wait)
			continue
		}
		failures = 0
		poll.Reset(s.opt.PollInterval)
	}
}
