package notifier_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/notifications"
	"github.com/proliferate/proliferate/consumers/notifier"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailer/smtpfake"
	"github.com/proliferate/proliferate/internal/mailqueue"
	"github.com/proliferate/proliferate/internal/notifyprefs"
	"github.com/proliferate/proliferate/internal/runs"
)

// Run emails end to end: a member sets the preference through the real
// HTTP API; run lifecycle records go through Kafka to the notifier group,
// which queues the emails; the mail queue's sender delivers them over SMTP
// to a local server. Off (the default) sends nothing; mine sends the runs
// of the automations the member created for the chosen statuses, once
// even when the records are delivered twice; all sends every run's.
func TestRunEmailsFollowThePreference(t *testing.T) {
	e := newEnv(t)
	e.destination(notifier.DestinationNone, "", "") // no Slack; names the automation "Triage <bugs> & more"
	apiEnv := apitest.New(t, []func(*api.Server) error{notifications.Register})
	creator, watcher := apiEnv.NewUser(t), apiEnv.NewUser(t)
	apiEnv.AddMember(t, creator, e.org, auth.RoleMember)
	apiEnv.AddMember(t, watcher, e.org, auth.RoleAdmin)
	e.exec(`UPDATE automations SET created_by = $2 WHERE id = $1`, e.auto, creator.ID)

	srv := smtpfake.New(t, smtpfake.Options{Username: "mailer", Password: "notifier-smtp-pw", ListenHost: "127.0.0.2"})
	sender := mailqueue.NewSender(e.pool, e.box, &mailer.SMTP{Host: srv.Host, Port: srv.Port, Username: "mailer", Password: "notifier-smtp-pw",
		From: "Proliferate <noreply@example.com>", Timeout: 10 * time.Second,
		TLSConfig: &tls.Config{RootCAs: srv.RootCAs, MinVersion: tls.VersionTLS12}}, mailqueue.Options{}, nil)
	deliver := func() {
		t.Helper()
		if _, err := sender.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	received := func(to string) []smtpfake.Message {
		var out []smtpfake.Message
		for _, m := range srv.Messages() {
			if len(m.To) == 1 && m.To[0] == to {
				out = append(out, m)
			}
		}
		return out
	}

	// The default: off, every status listed.
	var got notifyprefs.Prefs
	apiEnv.Do(t, "GET", "/me/notifications", creator.Token, nil).Expect(t, http.StatusOK, &got)
	if got.RunEmails != notifyprefs.RunEmailsOff || len(got.RunEmailStatuses) != 4 || got.UpdatedAt != nil {
		t.Fatalf("default %+v", got)
	}

	e.start(notifier.Group.Name)
	var processed int64
	run := func(to string, times int) string {
		t.Helper()
		id := e.runTo(to, "Fixed <it> & shipped")
		recs := e.lifecycle(id)
		for range times {
			e.produce(recs...)
			processed += int64(len(recs))
			e.await(processed)
		}
		return id
	}

	// Off: a run ends, no email.
	run(runs.StatusSucceeded, 1)
	deliver()
	if n := len(received(creator.Email)); n != 0 {
		t.Fatalf("%d emails with the preference off", n)
	}

	// Bad preferences are refused, precisely, and change nothing.
	body := apiEnv.Do(t, "PUT", "/me/notifications", creator.Token, map[string]any{"run_emails": "sometimes", "run_email_statuses": []string{"exploded"}}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	if d, _ := body.Error.Details.([]any); len(d) != 2 {
		t.Fatalf("problems %+v", body.Error)
	}
	apiEnv.Do(t, "PUT", "/me/notifications", creator.Token, map[string]any{"run_emails": "mine"}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	apiEnv.Do(t, "PUT", "/me/notifications", creator.Token, map[string]any{"run_emails": "all", "run_email_statuses": []string{}, "x": 1}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	apiEnv.Do(t, "GET", "/me/notifications", creator.Token, nil).Expect(t, http.StatusOK, &got)
	if got.RunEmails != notifyprefs.RunEmailsOff {
		t.Fatalf("after refused changes %+v", got)
	}

	// On: the creator wants their automations' successes and needs-human;
	// the watcher every run's failures.
	apiEnv.Do(t, "PUT", "/me/notifications", creator.Token, map[string]any{"run_emails": "mine", "run_email_statuses": []string{"needs_human", "succeeded"}}).
		Expect(t, http.StatusOK, &got)
	if got.RunEmails != "mine" || strings.Join(got.RunEmailStatuses, ",") != "succeeded,needs_human" || got.UpdatedAt == nil {
		t.Fatalf("set %+v", got)
	}
	apiEnv.Do(t, "PUT", "/me/notifications", watcher.Token, map[string]any{"run_emails": "all", "run_email_statuses": []string{"failed"}}).
		Expect(t, http.StatusOK, nil)

	// A success, delivered twice by Kafka: one email, to the creator.
	ok := run(runs.StatusSucceeded, 2)
	deliver()
	mails := received(creator.Email)
	if len(mails) != 1 || len(received(watcher.Email)) != 0 {
		t.Fatalf("creator %d emails, watcher %d", len(mails), len(received(watcher.Email)))
	}
	m := mails[0]
	if m.Subject != "Triage <bugs> & more succeeded" || m.Header.Get("X-Proliferate-Kind") != mailer.KindRunNotification ||
		!strings.Contains(m.Body, "Fixed <it> & shipped") || !strings.Contains(m.Body, webApp+"/automations/"+e.auto+"/runs/"+ok) ||
		!strings.Contains(m.HTML, "Triage &lt;bugs&gt; &amp; more succeeded") || strings.Contains(m.HTML, "<bugs>") ||
		!strings.Contains(m.HTML, `href="`+webApp+"/automations/"+e.auto+"/runs/"+ok+`"`) || len(m.Parts) != 2 {
		t.Fatalf("email: subject %q parts %v\ntext %s\nhtml %s", m.Subject, m.Parts, m.Body, m.HTML)
	}

	// A failure: not a status the creator chose; the watcher (all) gets it.
	run(runs.StatusFailed, 1)
	deliver()
	if len(received(creator.Email)) != 1 || len(received(watcher.Email)) != 1 ||
		!strings.Contains(received(watcher.Email)[0].Subject, "failed") {
		t.Fatalf("after the failure: creator %d, watcher %d", len(received(creator.Email)), len(received(watcher.Email)))
	}

	// Turned off again: nothing more.
	apiEnv.Do(t, "PUT", "/me/notifications", watcher.Token, map[string]any{"run_emails": "off", "run_email_statuses": []string{"failed"}}).
		Expect(t, http.StatusOK, nil)
	run(runs.StatusFailed, 1)
	deliver()
	if len(received(watcher.Email)) != 1 {
		t.Fatalf("watcher got %d emails after turning them off", len(received(watcher.Email)))
	}
	if strings.Contains(e.logs.String(), "Fixed <it>") {
		t.Fatal("an email body was logged")
	}
}
