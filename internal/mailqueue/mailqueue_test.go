package mailqueue_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailer/smtpfake"
	"github.com/proliferate/proliferate/internal/mailqueue"
	"github.com/proliferate/proliferate/internal/mailqueue/mailqueuedb"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const smtpPassword = "queue-smtp-canary-7781"

// clock is a sender's clock the test moves (retries come due when it says).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type rig struct {
	pool   *pgxpool.Pool
	box    *secretbox.Box
	srv    *smtpfake.Server
	sender *mailqueue.Sender
	clock  *clock
	domain string
}

// newRig starts an SMTP server speaking the real protocol (STARTTLS, AUTH)
// and a sender delivering through the real SMTP mailer to it. Recipients
// are unique per test (the package's tests share one database).
func newRig(t *testing.T, o smtpfake.Options, opt mailqueue.Options) *rig {
	t.Helper()
	pool := testenv.Postgres(t)
	box, err := secretbox.New([]string{"test:ZGV2LW9ubHktMzItYnl0ZS1lbmNyeXB0aW9uLWtleSE="})
	if err != nil {
		t.Fatal(err)
	}
	o.Username, o.Password = "mailer", smtpPassword
	srv := smtpfake.New(t, o)
	m := &mailer.SMTP{Host: srv.Host, Port: srv.Port, Username: "mailer", Password: smtpPassword,
		From: "Proliferate <noreply@mail.example.com>", TLS: mailer.TLSStartTLS, Timeout: 10 * time.Second,
		TLSConfig: &tls.Config{RootCAs: srv.RootCAs, MinVersion: tls.VersionTLS12}}
	s := mailqueue.NewSender(pool, box, m, opt, nil)
	// The clock starts an hour ahead of the database's, so every email
	// queued from now on is due at once.
	c := &clock{t: time.Now().Add(time.Hour)}
	s.Now = c.now
	s.Jitter = func() float64 { return 0.5 }
	// Emails other tests left queued are not this test's: send them first
	// to a mailer that drops them.
	drop := mailqueue.NewSender(pool, box, &mailer.Memory{}, mailqueue.Options{MaxAttempts: 1}, nil)
	drop.Now = func() time.Time { return c.now().Add(1000 * time.Hour) }
	if _, err := drop.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &rig{pool: pool, box: box, srv: srv, sender: s, clock: c, domain: "mail.example.com"}
}

var seq struct {
	sync.Mutex
	n int
}

func addr(name string) string {
	seq.Lock()
	defer seq.Unlock()
	seq.n++
	return fmt.Sprintf("%s-%d-%d@example.com", name, time.Now().UnixNano(), seq.n)
}

// enqueue queues m in its own transaction and returns the row id.
func (r *rig) enqueue(t *testing.T, m mailqueue.Mail) string {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		_, err := mailqueue.Enqueue(ctx, tx, r.box, m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := mailqueuedb.New(r.pool).ListByRecipient(ctx, m.To)
	if err != nil || len(rows) == 0 {
		t.Fatalf("no row for %s: %v", m.To, err)
	}
	return rows[len(rows)-1].ID
}

func (r *rig) drain(t *testing.T) mailqueue.Result {
	t.Helper()
	res, err := r.sender.Drain(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (r *rig) row(t *testing.T, id string) mailqueuedb.GetRow {
	t.Helper()
	row, err := mailqueuedb.New(r.pool).Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// received is what the server accepted for to.
func (r *rig) received(to string) []smtpfake.Message {
	var out []smtpfake.Message
	for _, m := range r.srv.Messages() {
		if len(m.To) == 1 && m.To[0] == to {
			out = append(out, m)
		}
	}
	return out
}

func reset(to, token string) mailqueue.Mail {
	return mailqueue.Mail{Kind: mailer.KindPasswordReset, To: to,
		Data: mailer.PasswordReset{Link: "https://app.example.com/reset-password?token=" + token}}
}

// A queued email arrives over SMTP (STARTTLS, AUTH) as
// multipart/alternative with the same link in both parts, a Message-ID
// stable per queue row, and the row is marked sent with its sealed data
// dropped; the token was never stored in clear.
func TestQueuedEmailArrivesWithBothParts(t *testing.T) {
	r := newRig(t, smtpfake.Options{RequireTLS: true, ListenHost: "127.0.0.2"}, mailqueue.Options{})
	to := addr("ada")
	const token = "pr_queue-canary-token-31337"
	id := r.enqueue(t, reset(to, token))
	var sealed string
	if err := r.pool.QueryRow(context.Background(), `SELECT sealed_data FROM mail_queue WHERE id = $1`, id).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if sealed == "" || strings.Contains(sealed, token) || strings.Contains(sealed, "reset-password") {
		t.Fatalf("the queued data is not sealed: %q", sealed)
	}
	if res := r.drain(t); res.Sent != 1 || res.Retry != 0 || res.Failed != 0 {
		t.Fatalf("drain %+v", res)
	}
	got := r.received(to)
	if len(got) != 1 {
		t.Fatalf("%d messages to %s", len(got), to)
	}
	m := got[0]
	link := "https://app.example.com/reset-password?token=" + token
	if !m.TLS || m.AuthAs != "mailer" || m.Subject != "Reset your Proliferate password" ||
		!strings.Contains(m.Body, link) || !strings.Contains(m.HTML, `href="`+link+`"`) ||
		len(m.Parts) != 2 || !strings.HasPrefix(m.Parts[0], "text/plain") || !strings.HasPrefix(m.Parts[1], "text/html") ||
		!strings.HasPrefix(m.Header.Get("Content-Type"), "multipart/alternative") {
		t.Fatalf("message: tls=%v auth=%q subject=%q parts=%v\ntext %q\nhtml %q", m.TLS, m.AuthAs, m.Subject, m.Parts, m.Body, m.HTML)
	}
	if want := "<mail-" + id + "@" + r.domain + ">"; m.Header.Get("Message-Id") != want {
		t.Fatalf("Message-ID %q, want %q", m.Header.Get("Message-Id"), want)
	}
	row := r.row(t, id)
	if row.Status != mailqueue.StatusSent || row.Attempts != 1 || row.SentAt == nil {
		t.Fatalf("row %+v", row)
	}
	if err := r.pool.QueryRow(context.Background(), `SELECT sealed_data FROM mail_queue WHERE id = $1`, id).Scan(&sealed); err != nil || sealed != "" {
		t.Fatalf("sealed data kept after sending: %q %v", sealed, err)
	}
	// Nothing more to send, however often the queue is drained.
	r.clock.add(24 * time.Hour)
	if res := r.drain(t); res != (mailqueue.Result{}) || len(r.received(to)) != 1 {
		t.Fatalf("second drain %+v, %d messages", res, len(r.received(to)))
	}
}

// An SMTP outage (421 at the greeting), then a temporary 451 on one
// message: everything waits with backoff and is delivered exactly once
// after recovery, each email on its own schedule.
func TestOutageThenRecoveryDeliversEverythingOnce(t *testing.T) {
	r := newRig(t, smtpfake.Options{ListenHost: "127.0.0.2"}, mailqueue.Options{InitialBackoff: time.Minute, MaxBackoff: 10 * time.Minute})
	var tos, ids []string
	for i := range 3 {
		to := addr(fmt.Sprintf("outage%d", i))
		tos = append(tos, to)
		ids = append(ids, r.enqueue(t, reset(to, fmt.Sprintf("pr_outage%d", i))))
	}
	r.srv.SetDown(true)
	if res := r.drain(t); res.Retry != 3 || res.Sent != 0 {
		t.Fatalf("during the outage: %+v", res)
	}
	for _, id := range ids {
		row := r.row(t, id)
		// Jitter 0.5 of the first backoff (1m): 45s.
		if row.Status != mailqueue.StatusPending || row.Attempts != 1 || row.LastError == nil || !strings.Contains(*row.LastError, "421") ||
			!row.NextAttemptAt.Equal(r.clock.now().Add(45*time.Second).Truncate(time.Microsecond)) {
			t.Fatalf("row after the outage %+v (now %s)", row, r.clock.now())
		}
	}
	// Not due yet: nothing is tried.
	if res := r.drain(t); res != (mailqueue.Result{}) {
		t.Fatalf("before the retry is due: %+v", res)
	}
	// Still down at the second try: the wait doubles.
	r.clock.add(45 * time.Second)
	if res := r.drain(t); res.Retry != 3 {
		t.Fatalf("second try: %+v", res)
	}
	if row := r.row(t, ids[0]); row.Attempts != 2 || !row.NextAttemptAt.Equal(r.clock.now().Add(90*time.Second).Truncate(time.Microsecond)) {
		t.Fatalf("second backoff: %+v", row)
	}
	// Recovery, with one more temporary refusal (451 at the end of DATA).
	r.srv.SetDown(false)
	r.srv.FailNext(1)
	r.clock.add(90 * time.Second)
	if res := r.drain(t); res.Sent != 2 || res.Retry != 1 {
		t.Fatalf("recovery: %+v", res)
	}
	r.clock.add(10 * time.Minute)
	if res := r.drain(t); res.Sent != 1 {
		t.Fatalf("after the 451: %+v", res)
	}
	r.clock.add(time.Hour)
	r.drain(t)
	for i, to := range tos {
		if got := r.received(to); len(got) != 1 || !strings.Contains(got[0].Body, fmt.Sprintf("pr_outage%d", i)) {
			t.Fatalf("%s received %d messages", to, len(got))
		}
		if row := r.row(t, ids[i]); row.Status != mailqueue.StatusSent {
			t.Fatalf("row %+v", row)
		}
	}
}

// A permanent refusal (550 no such user) sets the email aside at once with
// its error, and the next email still goes out; it is never retried.
func TestPermanentFailureIsSetAsideAndOthersGoOut(t *testing.T) {
	r := newRig(t, smtpfake.Options{ListenHost: "127.0.0.2",
		RejectRecipient: func(a string) bool { return strings.HasPrefix(a, "nobody-") }}, mailqueue.Options{})
	bad, good := addr("nobody"), addr("somebody")
	badID := r.enqueue(t, reset(bad, "pr_bad"))
	goodID := r.enqueue(t, reset(good, "pr_good"))
	if res := r.drain(t); res.Failed != 1 || res.Sent != 1 {
		t.Fatalf("drain %+v", res)
	}
	row := r.row(t, badID)
	if row.Status != mailqueue.StatusFailed || row.Attempts != 1 || row.FailedAt == nil || row.LastError == nil ||
		!strings.Contains(*row.LastError, "550") || strings.Contains(*row.LastError, "pr_bad") || strings.Contains(*row.LastError, smtpPassword) {
		t.Fatalf("set-aside row %+v", row)
	}
	if r.row(t, goodID).Status != mailqueue.StatusSent || len(r.received(good)) != 1 || len(r.received(bad)) != 0 {
		t.Fatal("the good email did not go out")
	}
	r.clock.add(48 * time.Hour)
	if res := r.drain(t); res != (mailqueue.Result{}) {
		t.Fatalf("the failed email was retried: %+v", res)
	}
	// An operator can put it back (here it fails again, at once).
	if n, err := mailqueuedb.New(r.pool).Retry(context.Background(), []string{badID}); err != nil || n != 1 {
		t.Fatalf("retry: %d %v", n, err)
	}
	r.clock.add(time.Hour)
	if res := r.drain(t); res.Failed != 1 {
		t.Fatalf("retried: %+v", res)
	}
}

// A temporary failure that never ends stops after MaxAttempts, set aside
// with the last error.
func TestRetriesAreBounded(t *testing.T) {
	r := newRig(t, smtpfake.Options{ListenHost: "127.0.0.2"}, mailqueue.Options{MaxAttempts: 3, InitialBackoff: time.Minute, MaxBackoff: time.Minute})
	r.srv.SetDown(true)
	id := r.enqueue(t, reset(addr("bounded"), "pr_bounded"))
	for i := range 3 {
		res := r.drain(t)
		if i < 2 && res.Retry != 1 || i == 2 && res.Failed != 1 {
			t.Fatalf("attempt %d: %+v", i+1, res)
		}
		r.clock.add(time.Minute)
	}
	if row := r.row(t, id); row.Status != mailqueue.StatusFailed || row.Attempts != 3 || !strings.Contains(*row.LastError, "421") {
		t.Fatalf("row %+v", row)
	}
}

// Queuing with the same dedup key twice (a redelivered Kafka record) queues
// one email; senders draining at the same time send every email once.
func TestNoDoubleSend(t *testing.T) {
	r := newRig(t, smtpfake.Options{ListenHost: "127.0.0.2"}, mailqueue.Options{BatchSize: 3})
	ctx := context.Background()
	dup := addr("dup")
	key := "test:" + dup
	for range 2 {
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			m := reset(dup, "pr_dup")
			m.DedupKey = key
			_, err := mailqueue.Enqueue(ctx, tx, r.box, m)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var tos []string
	for i := range 12 {
		to := addr(fmt.Sprintf("many%d", i))
		tos = append(tos, to)
		r.enqueue(t, reset(to, "pr_many"))
	}
	// A second sender with its own connection pool, draining concurrently.
	other := mailqueue.NewSender(r.pool, r.box, &mailer.SMTP{Host: r.srv.Host, Port: r.srv.Port, Username: "mailer", Password: smtpPassword,
		From: "Proliferate <noreply@mail.example.com>", Timeout: 10 * time.Second,
		TLSConfig: &tls.Config{RootCAs: r.srv.RootCAs, MinVersion: tls.VersionTLS12}}, mailqueue.Options{BatchSize: 3}, nil)
	other.Now = r.clock.now
	var wg sync.WaitGroup
	results := make([]mailqueue.Result, 2)
	errs := make([]error, 2)
	for i, s := range []*mailqueue.Sender{r.sender, other} {
		wg.Go(func() { results[i], errs[i] = s.Drain(ctx) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || results[0].Sent+results[1].Sent != 13 {
		t.Fatalf("drains %+v %v", results, errs)
	}
	for _, to := range append(tos, dup) {
		if n := len(r.received(to)); n != 1 {
			t.Fatalf("%s received %d messages", to, n)
		}
	}
	// The sent rows are never claimed again.
	r.clock.add(time.Hour)
	if res := r.drain(t); res != (mailqueue.Result{}) {
		t.Fatalf("redrain %+v", res)
	}
}

// A claimed email whose sender died (lease not returned) is sent by
// another sender once the lease is over, with the same Message-ID.
func TestExpiredLeaseIsReclaimedWithTheSameMessageID(t *testing.T) {
	r := newRig(t, smtpfake.Options{ListenHost: "127.0.0.2"}, mailqueue.Options{Lease: time.Minute})
	to := addr("lease")
	id := r.enqueue(t, reset(to, "pr_lease"))
	// A sender claims it and dies before sending.
	rows, err := mailqueuedb.New(r.pool).ClaimDue(context.Background(), mailqueuedb.ClaimDueParams{
		LeaseUntil: r.clock.now().Add(time.Minute), Now: r.clock.now(), Max: 1000})
	if err != nil || len(rows) == 0 {
		t.Fatalf("claim %v", err)
	}
	if res := r.drain(t); res != (mailqueue.Result{}) {
		t.Fatalf("an email under lease was taken: %+v", res)
	}
	r.clock.add(time.Minute)
	if res := r.drain(t); res.Sent < 1 {
		t.Fatalf("after the lease: %+v", res)
	}
	got := r.received(to)
	if len(got) != 1 || got[0].Header.Get("Message-Id") != "<mail-"+id+"@"+r.domain+">" {
		t.Fatalf("messages %+v", got)
	}
	if row := r.row(t, id); row.Attempts != 2 || row.Status != mailqueue.StatusSent {
		t.Fatalf("row %+v", row)
	}
}

// Bad data fails the producer's transaction (nothing is queued), and
// a row tampered with in the database (recipient changed) does not open:
// it is set aside instead of sending a link to another address.
func TestBadDataAndTampering(t *testing.T) {
	r := newRig(t, smtpfake.Options{ListenHost: "127.0.0.2"}, mailqueue.Options{})
	ctx := context.Background()
	to := addr("tamper")
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		_, err := mailqueue.Enqueue(ctx, tx, r.box, mailqueue.Mail{Kind: "no_such_kind", To: to, Data: mailer.PasswordReset{}})
		return err
	})
	if err == nil {
		t.Fatal("an unknown kind was queued")
	}
	err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		_, err := mailqueue.Enqueue(ctx, tx, r.box, mailqueue.Mail{Kind: mailer.KindPasswordReset, To: to, Data: mailer.VerifyEmail{}})
		return err
	})
	if err == nil {
		t.Fatal("the wrong data type was queued")
	}
	id := r.enqueue(t, reset(to, "pr_tamper"))
	attacker := addr("attacker")
	if _, err := r.pool.Exec(ctx, `UPDATE mail_queue SET recipient = $2 WHERE id = $1`, id, attacker); err != nil {
		t.Fatal(err)
	}
	if res := r.drain(t); res.Failed != 1 || len(r.received(attacker)) != 0 {
		t.Fatalf("tampered row: %+v", res)
	}
}

// Backoff doubles from InitialBackoff up to MaxBackoff, and jitter takes
// 50–100 % of it.
func TestBackoff(t *testing.T) {
	s := mailqueue.NewSender(nil, nil, nil, mailqueue.Options{InitialBackoff: 30 * time.Second, MaxBackoff: 4 * time.Minute}, nil)
	for _, c := range []struct {
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{1, 0, 15 * time.Second}, {1, 0.999999999, 30 * time.Second}, {2, 0, 30 * time.Second}, {3, 0.5, 90 * time.Second},
		{4, 1, 4 * time.Minute}, {5, 0, 2 * time.Minute}, {50, 1, 4 * time.Minute},
	} {
		s.Jitter = func() float64 { return c.jitter }
		if got := s.Backoff(c.attempt); got.Round(time.Second) != c.want {
			t.Errorf("attempt %d jitter %v: %s, want %s", c.attempt, c.jitter, got, c.want)
		}
	}
}
