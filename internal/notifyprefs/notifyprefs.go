// Package notifyprefs owns notification_preferences: what a member of an
// organization wants to hear about by email. Today that is runs: none
// (off, the default), the runs of the automations they created (mine), or
// every run of the organization (all), for the outcomes they pick
// (succeeded, failed, needs_human, timed_out). The notifier consumer reads
// it when a run reaches one of those statuses and queues one email per
// person who wants it; the API reads and writes it at /me/notifications.
package notifyprefs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/notifyprefs/notifyprefsdb"
)

// Scopes of run emails.
const (
	RunEmailsOff  = "off"
	RunEmailsMine = "mine"
	RunEmailsAll  = "all"
)

// Scopes lists the valid run email scopes.
var Scopes = []string{RunEmailsOff, RunEmailsMine, RunEmailsAll}

// Statuses lists the run statuses an email can be sent for, in display
// order.
var Statuses = []string{"succeeded", "failed", "needs_human", "timed_out"}

// Prefs are one member's email preferences in one organization.
type Prefs struct {
	// RunEmails is off, mine (runs of the automations I created) or all
	// (every run of the organization).
	RunEmails string `json:"run_emails"`
	// RunEmailStatuses are the outcomes that send an email.
	RunEmailStatuses []string `json:"run_email_statuses"`
	// UpdatedAt is when they were last set (null: never, the defaults).
	UpdatedAt *time.Time `json:"updated_at"`
}

// Default is what a member who never chose has: no run emails.
func Default() Prefs {
	return Prefs{RunEmails: RunEmailsOff, RunEmailStatuses: slices.Clone(Statuses)}
}

// Get returns the member's preferences (Default when never set).
func Get(ctx context.Context, db notifyprefsdb.DBTX, orgID, userID string) (Prefs, error) {
	r, err := notifyprefsdb.New(db).Get(ctx, notifyprefsdb.GetParams{OrgID: orgID, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Default(), nil
	}
	if err != nil {
		return Prefs{}, fmt.Errorf("notifyprefs: %w", err)
	}
	return Prefs{RunEmails: r.RunEmails, RunEmailStatuses: sorted(r.RunEmailStatuses), UpdatedAt: &r.UpdatedAt}, nil
}

// Set stores the member's preferences; p must be valid (Problems).
func Set(ctx context.Context, db notifyprefsdb.DBTX, orgID, userID string, p Prefs) (Prefs, error) {
	r, err := notifyprefsdb.New(db).Upsert(ctx, notifyprefsdb.UpsertParams{OrgID: orgID, UserID: userID,
		RunEmails: p.RunEmails, RunEmailStatuses: sorted(p.RunEmailStatuses)})
	if err != nil {
		return Prefs{}, fmt.Errorf("notifyprefs: %w", err)
	}
	return Prefs{RunEmails: r.RunEmails, RunEmailStatuses: sorted(r.RunEmailStatuses), UpdatedAt: &r.UpdatedAt}, nil
}

// Problem is one invalid field.
type Problem struct{ Field, Problem string }

// Problems checks p: a known scope and known statuses, each once.
func (p Prefs) Problems() []Problem {
	var ps []Problem
	if !slices.Contains(Scopes, p.RunEmails) {
		ps = append(ps, Problem{"run_emails", "must be one of off, mine, all"})
	}
	if p.RunEmailStatuses == nil {
		ps = append(ps, Problem{"run_email_statuses", "is required (a list of succeeded, failed, needs_human, timed_out; may be empty)"})
	}
	seen := map[string]bool{}
	for _, s := range p.RunEmailStatuses {
		if !slices.Contains(Statuses, s) {
			ps = append(ps, Problem{"run_email_statuses", fmt.Sprintf("%q is not a run status an email is sent for (succeeded, failed, needs_human, timed_out)", s)})
			break
		}
		if seen[s] {
			ps = append(ps, Problem{"run_email_statuses", fmt.Sprintf("%q is listed twice", s)})
			break
		}
		seen[s] = true
	}
	return ps
}

// Recipient is a member who wants an email about a run.
type Recipient struct {
	UserID, Email, Scope, OrgName string
}

// RunRecipients lists the members of orgID who want an email when a run of
// automationID reaches status: verified addresses only.
func RunRecipients(ctx context.Context, db notifyprefsdb.DBTX, orgID, automationID, status string) ([]Recipient, error) {
	rows, err := notifyprefsdb.New(db).RunEmailRecipients(ctx, notifyprefsdb.RunEmailRecipientsParams{
		AutomationID: automationID, OrgID: orgID, Status: status})
	if err != nil {
		return nil, fmt.Errorf("notifyprefs: run email recipients: %w", err)
	}
	out := make([]Recipient, len(rows))
	for i, r := range rows {
		out[i] = Recipient{UserID: r.UserID, Email: r.Email, Scope: r.RunEmails, OrgName: r.OrgName}
	}
	return out, nil
}

// sorted orders statuses as Statuses does.
func sorted(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range Statuses {
		if slices.Contains(ss, s) {
			out = append(out, s)
		}
	}
	return out
}
