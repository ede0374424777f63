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

const cols = `id::text, org_id::text, session_id::text, user_id::text, slack_installation_id::text, slack_user_id,
	destination_type, event_types, created_at, updated_at`

func scan(row pgx.Row) (Subscription, error) {
	var s Subscription
	err := row.Scan(&s.ID, &s.OrgID, &s.SessionID, &s.UserID, &s.SlackInstallationID, &s.SlackUserID,
		&s.DestinationType, &s.EventTypes, &s.CreatedAt, &s.UpdatedAt)
	return s, err
}

// Subscribe subscribes userID to the completion of sessionID, by DM to
// slackUserID through the org's Slack installation (upsert: subscribing again
// updates the installation and Slack user). An installation that is not the
// org's is ErrNotFound.
func Subscribe(ctx context.Context, db DB, orgID, sessionID, userID, slackInstallationID, slackUserID string) (Subscription, error) {
	if !uuids(orgID, sessionID, userID, slackInstallationID) {
		return Subscription{}, ErrNotFound
	}
	s, err := scan(db.QueryRow(ctx, `INSERT INTO session_notification_subscriptions
			(org_id, session_id, user_id, slack_installation_id, slack_user_id)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (session_id, user_id) DO UPDATE SET slack_installation_id = EXCLUDED.slack_installation_id,
			slack_user_id = EXCLUDED.slack_user_id, updated_at = now()
		WHERE session_notification_subscriptions.org_id = EXCLUDED.org_id
		RETURNING `+cols, orgID, sessionID, userID, slackInstallationID, slackUserID))
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
	tag, err := db.Exec(ctx, `DELETE FROM session_notification_subscriptions
		WHERE org_id = $1 AND session_id = $2 AND user_id = $3`, orgID, sessionID, userID)
	if err != nil {
		return false, fmt.Errorf("unsubscribe from session %s: %w", sessionID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// ListSubscriptions lists the subscriptions to sessionID, oldest first.
func ListSubscriptions(ctx context.Context, db DB, orgID, sessionID string) ([]Subscription, error) {
	if !uuids(orgID, sessionID) {
		return nil, nil
	}
	rows, err := db.Query(ctx, `SELECT `+cols+` FROM session_notification_subscriptions
		WHERE org_id = $1 AND session_id = $2 ORDER BY created_at, id`, orgID, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of session %s: %w", sessionID, err)
	}
	subs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subscription, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of session %s: %w", sessionID, err)
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
