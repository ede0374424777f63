// Package sessionnotify stores who asked to be told (by Slack DM) when a
// session completes: session_notification_subscriptions, one row per
// (session, person). The sessions API subscribes and unsubscribes; the
// notifier consumer group lists a session's subscriptions when it stops.
//
// Every function is org-scoped: a session or installation of another org is
// ErrNotFound, never a write into that org.
package sessionnotify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/sessionnotify/sessionnotifydb"
)

// EventCompleted is the event type a subscription to session completion has.
const EventCompleted = "completed"

// Subscription is one person's subscription to a session.
type Subscription struct {
	ID, OrgID, SessionID, UserID string
	SlackInstallationID          string
	SlackUserID                  string
	DestinationType              string
	EventTypes                   []string
	CreatedAt, UpdatedAt         time.Time
}

// ErrNotFound is returned for a subscription, session or installation that
// does not exist in the org.
var ErrNotFound = errors.New("sessionnotify: not found")

// DB is a pool, a connection or a transaction.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func subscription(r sessionnotifydb.SessionNotificationSubscription) Subscription {
	return Subscription{ID: r.ID, OrgID: r.OrgID, SessionID: r.SessionID, UserID: r.UserID,
		SlackInstallationID: r.SlackInstallationID, SlackUserID: r.SlackUserID, DestinationType: r.DestinationType,
		EventTypes: r.EventTypes, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// Subscribe subscribes userID to the completion of sessionID, by DM to
// slackUserID through the org's Slack installation (upsert: subscribing again
// updates the installation and Slack user). An installation that is not the
// org's is ErrNotFound.
func Subscribe(ctx context.Context, db DB, orgID, sessionID, userID, slackInstallationID, slackUserID string) (Subscription, error) {
	if !uuids(orgID, sessionID, userID, slackInstallationID) {
		return Subscription{}, ErrNotFound
	}
	row, err := sessionnotifydb.New(db).Subscribe(ctx, sessionnotifydb.SubscribeParams{
		OrgID: orgID, SessionID: sessionID, UserID: userID, SlackInstallationID: slackInstallationID, SlackUserID: slackUserID,
	})
	s := subscription(row)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// The (session, user) row exists in another org.
		return s, ErrNotFound
	case errors.As(err, &pgErr) && pgErr.Code == "23503":
		// Foreign key: an installation of another org, an unknown user.
		return s, fmt.Errorf("%w: %s", ErrNotFound, pgErr.ConstraintName)
	case err != nil:
		return s, fmt.Errorf("subscribe to session %s: %w", sessionID, err)
	}
	return s, nil
}

// Unsubscribe removes userID's subscription to sessionID; it reports
// whether there was one.
func Unsubscribe(ctx context.Context, db DB, orgID, sessionID, userID string) (bool, error) {
	if !uuids(orgID, sessionID, userID) {
		return false, nil
	}
	n, err := sessionnotifydb.New(db).Unsubscribe(ctx, sessionnotifydb.UnsubscribeParams{OrgID: orgID, SessionID: sessionID, UserID: userID})
	if err != nil {
		return false, fmt.Errorf("unsubscribe from session %s: %w", sessionID, err)
	}
	return n > 0, nil
}

// ListSubscriptions lists the subscriptions to sessionID, oldest first.
func ListSubscriptions(ctx context.Context, db DB, orgID, sessionID string) ([]Subscription, error) {
	if !uuids(orgID, sessionID) {
		return nil, nil
	}
	rows, err := sessionnotifydb.New(db).ListSubscriptions(ctx, sessionnotifydb.ListSubscriptionsParams{OrgID: orgID, SessionID: sessionID})
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of session %s: %w", sessionID, err)
	}
	subs := make([]Subscription, len(rows))
	for i, r := range rows {
		subs[i] = subscription(r)
	}
	return subs, nil
}

// Wants reports whether the subscription asked for eventType.
func (s Subscription) Wants(eventType string) bool {
	for _, e := range s.EventTypes {
		if e == eventType {
			return true
		}
	}
	return false
}

// uuids reports whether every id is a well-formed uuid (a malformed id is
// simply not found, never a database error).
func uuids(ids ...string) bool {
	for _, id := range ids {
		if uuid.Validate(id) != nil {
			return false
		}
	}
	return true
}
