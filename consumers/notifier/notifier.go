// Package notifier is the `notifier` consumer group: it tells people in Slack
// and by email when something they care about finished.
//
//   - runs.lifecycle, email: a run reaching succeeded, failed, needs_human or
//     timed_out (from a live status) queues an email to every member who
//     opted in (notification_preferences, internal/notifyprefs: runs of the
//     automations they created, or every run, for the statuses they chose;
//     verified addresses only). The emails are queued in mail_queue in one
//     transaction, one per person with the key
//     run:{id}:email:{to_status}:{user_id}, so a redelivered record queues
//     nothing new; the mail queue's sender delivers them with retries.
//
//   - runs.lifecycle: a run that reaches succeeded, failed, needs_human or
//     timed_out from a live status is announced (with the links of its
//     session's pull requests) to its automation's
//     notification destination: a channel (chat.postMessage) or a person's DM
//     (conversations.open + chat.postMessage); destination none posts
//     nothing. A person resolving an already-ended run (terminal → terminal)
//     is not announced again.
//
//   - sessions.events: a session that stopped (completed) is announced by DM
//     to every person subscribed to its completion
//     (session_notification_subscriptions, see internal/sessionnotify).
//
// Exactly once: every Slack call goes through internal/sideeffects with a
// deterministic effect id (run:{id}:notify:{to_status}:open|post,
// session:{id}:notify:{user_id}:open|post). A retry after a Slack 5xx, a
// duplicate delivery or a replay of the whole topic finds the recorded
// response and posts nothing new. The one window left is the one sideeffects
// documents: a crash after Slack accepted a post but before it was recorded
// posts again on retry.
//
// Failures: Slack errors that retrying cannot fix (channel_not_found,
// not_in_channel, invalid_auth, token_revoked, account_inactive, …) and a
// missing or revoked Slack installation are logged at warn and the record is
// done — a notification that can never be delivered must not be retried into
// the dead-letter topic. Retryable errors (5xx, 429, network, database) are
// returned, so the runner retries the record with backoff.
//
// The bot token is decrypted at send time only (through SlackTokens, which
// opens slack_installations.encrypted_bot_token), only when a call is
// actually made (a replay decrypts nothing), and never logged.
package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue"
	"github.com/proliferate/proliferate/internal/notifyprefs"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/sessionnotify"
	"github.com/proliferate/proliferate/internal/sideeffects"
	"github.com/proliferate/proliferate/internal/slack"
	"github.com/proliferate/proliferate/schemas"
)

// SlackTokens opens an org's Slack bot token at the moment of use;
// *integrations.Service implements it. A missing or revoked installation is
// integrations.ErrNotFound.
type SlackTokens interface {
	SlackInstallationToken(ctx context.Context, orgID, installationID string) (integrations.Token, error)
}

// Deps are what the handler needs.
type Deps struct {
	Pool   *pgxpool.Pool
	Slack  *slack.Client
	Tokens SlackTokens
	// WebAppURL is the web app's base URL, for links to runs and sessions
	// (WEB_APP_URL). Empty leaves the links out.
	WebAppURL string
	Log       *slog.Logger
	// Box seals the run emails queued in mail_queue; nil sends no run
	// emails.
	Box *secretbox.Box
}

// Destination types (automations.notification_destination_type).
const (
	DestinationNone    = "none"
	DestinationChannel = "slack_channel"
	DestinationDM      = "slack_dm_user"
)

// MaxSummary bounds the agent summary quoted in a message (runes).
const MaxSummary = 1500

// Handler returns the notifier group's handler.
func Handler(d Deps) consumers.Handler {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	n := &notifier{Deps: d, web: strings.TrimRight(d.WebAppURL, "/")}
	return func(ctx context.Context, m *consumers.Message) error {
		if m.Event == nil {
			return consumers.Permanent(errors.New("notifier: record was not decoded"))
		}
		switch p := m.Event.Payload.(type) {
		case *schemas.RunLifecycle:
			return n.run(ctx, m.Event.OrgID, p)
		case *schemas.SessionEvent:
			return n.session(ctx, m.Event.OrgID, p)
		default:
			return nil // other event types on these topics are not ours
		}
	}
}

type notifier struct {
	Deps
	web string
}

// notifyStatuses are the terminal statuses announced (canceled is a person's
// own decision and is not).
var notifyStatuses = map[string]bool{
	runs.StatusSucceeded: true, runs.StatusFailed: true, runs.StatusNeedsHuman: true, runs.StatusTimedOut: true,
}

// runInfo is what a run notification says.
type runInfo struct {
	AutomationName, Destination             string
	ChannelID, SlackUserID, InstallationID  *string
	CompletionSummary, ErrorMessage, Reason *string
	TriggerTitle                            string
	TriggerURL                              *string
	// PRURLs are the pull requests of the run's session.
	PRURLs []string
	// Evidence counts the verification files the run's agent uploaded
	// (verify).
	Evidence int
}

func (n *notifier) run(ctx context.Context, orgID string, ev *schemas.RunLifecycle) error {
	if !notifyStatuses[ev.ToStatus] || ev.FromStatus == nil || runs.Terminal(*ev.FromStatus) {
		return nil
	}
	log := n.Log.With("run_id", ev.RunID, "org_id", orgID, "to_status", ev.ToStatus)
	r, err := runsdb.New(n.Pool).RunNotification(ctx, runsdb.RunNotificationParams{ID: ev.RunID, OrgID: orgID})
	ri := runInfo{AutomationName: r.AutomationName, Destination: r.NotificationDestinationType, ChannelID: r.NotificationChannelID,
		SlackUserID: r.NotificationSlackUserID, InstallationID: r.NotificationSlackInstallationID, ErrorMessage: r.ErrorMessage,
		Reason: r.StatusReason, TriggerTitle: r.TriggerTitle, TriggerURL: r.TriggerUrl, PRURLs: r.PrUrls, Evidence: int(r.Evidence)}
	if r.HasCompletionSummary {
		ri.CompletionSummary = &r.CompletionSummary
	}
	if errors.Is(err, pgx.ErrNoRows) {
		log.Warn("run notification skipped: run not found (deleted?)")
		return nil
	}
	if err != nil {
		return fmt.Errorf("notifier: load run %s: %w", ev.RunID, err)
	}
	if err := n.queueRunEmails(ctx, orgID, ev, ri); err != nil {
		return err
	}
	if ri.Destination == DestinationNone || ri.Destination == "" {
		return nil
	}
	if ri.InstallationID == nil {
		log.Warn("run notification skipped: no Slack installation (uninstalled?)", "destination", ri.Destination)
		return nil
	}
	text, blocks := n.runMessage(ev, ri)
	prefix := "run:" + ev.RunID + ":notify:" + ev.ToStatus
	tok := n.tokenOnce(orgID, *ri.InstallationID)

	var channel string
	switch ri.Destination {
	case DestinationChannel:
		if ri.ChannelID == nil || *ri.ChannelID == "" {
			log.Warn("run notification skipped: no channel configured")
			return nil
		}
		channel = *ri.ChannelID
	case DestinationDM:
		if ri.SlackUserID == nil || *ri.SlackUserID == "" {
			log.Warn("run notification skipped: no Slack user configured")
			return nil
		}
		channel, err = n.open(ctx, tok, sideeffects.Effect{OrgID: orgID, RunID: ev.RunID, EffectID: prefix + ":open",
			Request: map[string]any{"installation_id": *ri.InstallationID, "user": *ri.SlackUserID}}, *ri.SlackUserID)
		if err != nil {
			return n.outcome(log, err)
		}
	default:
		log.Warn("run notification skipped: unknown destination", "destination", ri.Destination)
		return nil
	}
	// The request names the intent (this run's announcement of this status to
	// this channel), not the wording: a replay after the automation was
	// renamed is still the same announcement.
	err = n.post(ctx, tok, sideeffects.Effect{OrgID: orgID, RunID: ev.RunID, EffectID: prefix + ":post",
		Request: map[string]any{"installation_id": *ri.InstallationID, "channel": channel, "run_id": ev.RunID, "to_status": ev.ToStatus}},
		slack.Message{Channel: channel, Text: text, Blocks: blocks, UnfurlLinks: new(false)})
	return n.outcome(log.With("channel", channel), err)
}

func (n *notifier) session(ctx context.Context, orgID string, ev *schemas.SessionEvent) error {
	if ev.Kind != schemas.SessionKindStopped {
		return nil
	}
	subs, err := sessionnotify.ListSubscriptions(ctx, n.Pool, orgID, ev.SessionID)
	if err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	var retry error
	for _, s := range subs {
		if !s.Wants(sessionnotify.EventCompleted) {
			continue
		}
		log := n.Log.With("session_id", ev.SessionID, "org_id", orgID, "user_id", s.UserID)
		prefix := "session:" + ev.SessionID + ":notify:" + s.UserID
		tok := n.tokenOnce(orgID, s.SlackInstallationID)
		channel, err := n.open(ctx, tok, sideeffects.Effect{OrgID: orgID, EffectID: prefix + ":open",
			Request: map[string]any{"installation_id": s.SlackInstallationID, "user": s.SlackUserID}}, s.SlackUserID)
		if err == nil {
			text, blocks := n.sessionMessage(ev)
			err = n.post(ctx, tok, sideeffects.Effect{OrgID: orgID, EffectID: prefix + ":post",
				Request: map[string]any{"installation_id": s.SlackInstallationID, "channel": channel, "session_id": ev.SessionID, "event": sessionnotify.EventCompleted}},
				slack.Message{Channel: channel, Text: text, Blocks: blocks, UnfurlLinks: new(false)})
		}
		// One subscriber's failure does not hold back the others; the ones
		// already told are recorded, so the retry only tells the rest.
		if err := n.outcome(log, err); err != nil {
			retry = err
		}
	}
	return retry
}

// queueRunEmails queues the run's email to every member who wants it, in
// one transaction; the dedup key makes a redelivery queue nothing.
func (n *notifier) queueRunEmails(ctx context.Context, orgID string, ev *schemas.RunLifecycle, ri runInfo) error {
	if n.Box == nil {
		return nil
	}
	recipients, err := notifyprefs.RunRecipients(ctx, n.Pool, orgID, ev.AutomationID, ev.ToStatus)
	if err != nil || len(recipients) == 0 {
		return err
	}
	summary := deref(ev.Summary)
	if summary == "" {
		summary = deref(ri.CompletionSummary)
	}
	if summary == "" && ev.ToStatus != runs.StatusSucceeded {
		summary = firstNonEmpty(deref(ev.ErrorMessage), deref(ri.ErrorMessage), deref(ev.StatusReason), deref(ri.Reason))
	}
	data := mailer.RunNotification{AutomationName: ri.AutomationName, Status: ev.ToStatus,
		Summary: truncate(summary, MaxSummary), TriggerTitle: truncate(strings.TrimSpace(ri.TriggerTitle), 150)}
	if u := deref(ri.TriggerURL); isHTTP(u) {
		data.TriggerURL = u
	}
	for _, u := range ri.PRURLs {
		if isHTTP(u) && len(data.PRURLs) < MaxPRLinks {
			data.PRURLs = append(data.PRURLs, u)
		}
	}
	if n.web != "" {
		data.RunURL = fmt.Sprintf("%s/automations/%s/runs/%s", n.web, ev.AutomationID, ev.RunID)
	}
	queued := 0
	err = pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
		queued = 0
		for _, r := range recipients {
			d := data
			d.Scope, d.OrgName = r.Scope, r.OrgName
			added, err := mailqueue.Enqueue(ctx, tx, n.Box, mailqueue.Mail{Kind: mailer.KindRunNotification, To: r.Email,
				OrgID: orgID, UserID: r.UserID, Data: d, DedupKey: "run:" + ev.RunID + ":email:" + ev.ToStatus + ":" + r.UserID})
			if err != nil {
				return err
			}
			if added {
				queued++
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("notifier: queue run emails: %w", err)
	}
	if queued > 0 {
		n.Log.Info("run emails queued", "run_id", ev.RunID, "to_status", ev.ToStatus, "emails", queued)
	}
	return nil
}

// tokenOnce returns a function that opens the bot token the first time it
// is needed and remembers it for the record being handled.
func (n *notifier) tokenOnce(orgID, installationID string) func(context.Context) (string, error) {
	var tok string
	return func(ctx context.Context) (string, error) {
		if tok != "" {
			return tok, nil
		}
		t, err := n.Tokens.SlackInstallationToken(ctx, orgID, installationID)
		if err != nil {
			return "", fmt.Errorf("slack token of installation %s: %w", installationID, err)
		}
		tok = t.Value
		return tok, nil
	}
}

func (n *notifier) open(ctx context.Context, tok func(context.Context) (string, error), e sideeffects.Effect, user string) (string, error) {
	e.Kind, e.Provider = "slack.conversations.open", "slack"
	resp, _, err := sideeffects.Do(ctx, n.Pool, e, func(ctx context.Context) (json.RawMessage, error) {
		t, err := tok(ctx)
		if err != nil {
			return nil, err
		}
		ch, err := n.Slack.ConversationsOpen(ctx, t, user)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"channel": ch})
	})
	if err != nil {
		return "", err
	}
	var out struct {
		Channel string `json:"channel"`
	}
	if err := json.Unmarshal(resp, &out); err != nil || out.Channel == "" {
		return "", fmt.Errorf("notifier: recorded %s has no channel", e.EffectID)
	}
	return out.Channel, nil
}

func (n *notifier) post(ctx context.Context, tok func(context.Context) (string, error), e sideeffects.Effect, m slack.Message) error {
	e.Kind, e.Provider = "slack.chat.postMessage", "slack"
	_, replayed, err := sideeffects.Do(ctx, n.Pool, e, func(ctx context.Context) (json.RawMessage, error) {
		t, err := tok(ctx)
		if err != nil {
			return nil, err
		}
		res, err := n.Slack.ChatPostMessage(ctx, t, m)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	})
	if err == nil && !replayed {
		n.Log.Info("slack notification posted", "effect_id", e.EffectID, "channel", m.Channel)
	}
	return err
}

// outcome turns a send error into the handler's answer: nil when done
// (delivered, or undeliverable for good), the error when worth retrying.
func (n *notifier) outcome(log *slog.Logger, err error) error {
	switch {
	case err == nil:
		return nil
	case slack.Permanent(err):
		log.Warn("slack notification not delivered (permanent Slack error; not retried)", "slack_error", slack.ErrorCode(err), "error", err)
		return nil
	case errors.Is(err, integrations.ErrNotFound):
		log.Warn("slack notification not delivered: Slack installation missing or revoked", "error", err)
		return nil
	case errors.Is(err, sideeffects.ErrKeyReused):
		// Already announced, with another destination since (the automation
		// was edited before a replay): announcing again would be a duplicate.
		log.Warn("slack notification already sent to another destination; not sent again", "error", err)
		return nil
	default:
		return fmt.Errorf("notifier: %w", err)
	}
}

var statusLabel = map[string]struct{ emoji, text string }{
	runs.StatusSucceeded:  {":white_check_mark:", "succeeded"},
	runs.StatusFailed:     {":x:", "failed"},
	runs.StatusNeedsHuman: {":raising_hand:", "needs a human"},
	runs.StatusTimedOut:   {":hourglass:", "timed out"},
}

func (n *notifier) runMessage(ev *schemas.RunLifecycle, ri runInfo) (string, []slack.Block) {
	label := statusLabel[ev.ToStatus]
	name := slack.Escape(ri.AutomationName)
	head := fmt.Sprintf("%s *%s* %s", label.emoji, name, label.text)
	text := fmt.Sprintf("%s %s", ri.AutomationName, label.text)

	summary := deref(ev.Summary)
	if summary == "" {
		summary = deref(ri.CompletionSummary)
	}
	if summary == "" && ev.ToStatus != runs.StatusSucceeded {
		summary = firstNonEmpty(deref(ev.ErrorMessage), deref(ri.ErrorMessage), deref(ev.StatusReason), deref(ri.Reason))
	}
	blocks := []slack.Block{slack.Section(head)}
	if summary != "" {
		blocks = append(blocks, slack.Section(quote(slack.Escape(truncate(summary, MaxSummary)))))
		text += ": " + truncate(summary, 200)
	}
	var prs []string
	for _, u := range ri.PRURLs {
		if isHTTP(u) && len(prs) < MaxPRLinks {
			prs = append(prs, fmt.Sprintf("<%s|%s>", u, slack.Escape(prLabel(u))))
		}
	}
	if len(prs) > 0 {
		label := "Pull request: "
		if len(prs) > 1 {
			label = "Pull requests: "
		}
		blocks = append(blocks, slack.Section(":arrow_heading_up: "+label+strings.Join(prs, ", ")))
		text += " (" + strings.ToLower(strings.TrimSuffix(label, ": ")) + " " + strings.Join(ri.PRURLs[:min(len(ri.PRURLs), MaxPRLinks)], " ") + ")"
	}
	if ri.Evidence > 0 {
		files := fmt.Sprintf("%d verification file", ri.Evidence)
		if ri.Evidence > 1 {
			files += "s"
		}
		line := ":paperclip: " + files
		if n.web != "" {
			line = fmt.Sprintf(":paperclip: <%s/automations/%s/runs/%s|%s>", n.web, ev.AutomationID, ev.RunID, files)
		}
		blocks = append(blocks, slack.Section(line))
		text += " [" + files + "]"
	}
	var ctxParts []string
	if title := strings.TrimSpace(ri.TriggerTitle); title != "" || ri.TriggerURL != nil {
		if title == "" {
			title = "trigger event"
		}
		if u := deref(ri.TriggerURL); isHTTP(u) {
			ctxParts = append(ctxParts, fmt.Sprintf("Trigger: <%s|%s>", u, slack.Escape(truncate(title, 150))))
		} else {
			ctxParts = append(ctxParts, "Trigger: "+slack.Escape(truncate(title, 150)))
		}
	}
	if n.web != "" {
		ctxParts = append(ctxParts, fmt.Sprintf("<%s/automations/%s/runs/%s|View run>", n.web, ev.AutomationID, ev.RunID))
	}
	if len(ctxParts) > 0 {
		blocks = append(blocks, slack.Context(ctxParts...))
	}
	return text, blocks
}

func (n *notifier) sessionMessage(ev *schemas.SessionEvent) (string, []slack.Block) {
	title := strings.TrimSpace(deref(ev.Title))
	if title == "" {
		title = "Your session"
	}
	head := fmt.Sprintf(":checkered_flag: *%s* completed", slack.Escape(truncate(title, 150)))
	text := truncate(title, 150) + " completed"
	blocks := []slack.Block{slack.Section(head)}
	var parts []string
	if o := deref(ev.Outcome); o != "" {
		parts = append(parts, "Outcome: "+slack.Escape(o))
	}
	if n.web != "" {
		parts = append(parts, fmt.Sprintf("<%s/sessions/%s|Open session>", n.web, ev.SessionID))
	}
	if len(parts) > 0 {
		blocks = append(blocks, slack.Context(parts...))
	}
	return text, blocks
}

// MaxPRLinks bounds the pull-request links of a run message.
const MaxPRLinks = 5

// prLabel shows https://github.com/o/r/pull/12 as o/r#12.
func prLabel(u string) string {
	rest, ok := strings.CutPrefix(u, "https://github.com/")
	if parts := strings.Split(rest, "/"); ok && len(parts) == 4 && parts[2] == "pull" {
		return parts[0] + "/" + parts[1] + "#" + parts[3]
	}
	return u
}

func quote(s string) string { return "> " + strings.ReplaceAll(s, "\n", "\n> ") }

func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

func isHTTP(u string) bool {
	return (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) && !strings.ContainsAny(u, "|<> \n")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
