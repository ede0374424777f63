// Package pollgroups keeps polling triggers in their poll groups: one group
// per (org, provider, integration), polled once per interval for all of its
// triggers (see producers/poller). The API calls Attach when it creates or
// updates a trigger and DetachEmpty after it updates or deletes one, in the
// same transaction.
package pollgroups

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Interval bounds of a group, in seconds (trigger_poll_groups.interval_seconds).
const (
	DefaultIntervalSeconds = 60
	MinIntervalSeconds     = 10
	MaxIntervalSeconds     = 86400
)

// IntervalConfigKey is the optional trigger config key ("poll_interval_seconds",
// an integer) asking for a poll interval; a group polls at the smallest
// interval its polling triggers ask for (default 60 s, clamped to 10..86400).
const IntervalConfigKey = "poll_interval_seconds"

// ErrNotFound is returned by Attach for an unknown trigger id.
var ErrNotFound = errors.New("pollgroups: trigger not found")

// Attach puts a polling trigger into the poll group of its (org, provider,
// integration), creating the group, and recomputes the group's interval. A
// trigger that is not of type 'polling' (e.g. changed to another type) is
// taken out of any group instead; call DetachEmpty afterwards to drop groups
// left without triggers. Attaching is idempotent.
//
// A new group starts its cursor at its creation time: the first poll reports
// what changed since the trigger was created, never the provider's history.
func Attach(ctx context.Context, tx pgx.Tx, triggerID string) error {
	var orgID, provider, triggerType string
	var integrationID *string
	err := tx.QueryRow(ctx, `SELECT org_id::text, provider, trigger_type, integration_id::text
		FROM triggers WHERE id = $1 FOR UPDATE`, triggerID).Scan(&orgID, &provider, &triggerType, &integrationID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("pollgroups: load trigger: %w", err)
	}
	if triggerType != "polling" {
		if _, err := tx.Exec(ctx, `UPDATE triggers SET poll_group_id = NULL WHERE id = $1 AND poll_group_id IS NOT NULL`, triggerID); err != nil {
			return fmt.Errorf("pollgroups: detach trigger: %w", err)
		}
		return nil
	}
	var groupID string
	err = tx.QueryRow(ctx, `INSERT INTO trigger_poll_groups (org_id, provider, integration_id)
		VALUES ($1, $2, $3)
		ON CONFLICT (org_id, provider, integration_id) DO UPDATE SET updated_at = now()
		RETURNING id::text`, orgID, provider, integrationID).Scan(&groupID)
	if err != nil {
		return fmt.Errorf("pollgroups: find or create group: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE triggers SET poll_group_id = $2 WHERE id = $1 AND poll_group_id IS DISTINCT FROM $2`,
		triggerID, groupID); err != nil {
		return fmt.Errorf("pollgroups: attach trigger: %w", err)
	}
	// The group polls at the smallest interval its triggers ask for; a valid
	// integer config value is used, anything else means the default.
	_, err = tx.Exec(ctx, `UPDATE trigger_poll_groups g SET interval_seconds = sub.iv, updated_at = now()
		FROM (SELECT least(greatest(coalesce(min(CASE WHEN jsonb_typeof(t.config->$3) = 'number'
				AND (t.config->>$3) ~ '^[0-9]{1,9}$' THEN (t.config->>$3)::int END), $4), $5), $6) AS iv
			FROM triggers t WHERE t.poll_group_id = $1 AND t.trigger_type = 'polling') sub
		WHERE g.id = $1 AND g.org_id = $2 AND g.interval_seconds IS DISTINCT FROM sub.iv`,
		groupID, orgID, IntervalConfigKey, DefaultIntervalSeconds, MinIntervalSeconds, MaxIntervalSeconds)
	if err != nil {
		return fmt.Errorf("pollgroups: group interval: %w", err)
	}
	return nil
}

// DetachEmpty deletes the org's poll groups that have no enabled polling
// trigger left (their cursor goes with them; disabled triggers still in such
// a group lose their group, and Attach puts them back when re-enabled).
func DetachEmpty(ctx context.Context, tx pgx.Tx, orgID string) error {
	_, err := tx.Exec(ctx, `DELETE FROM trigger_poll_groups g WHERE g.org_id = $1 AND NOT EXISTS (
			SELECT 1 FROM triggers t WHERE t.poll_group_id = g.id AND t.trigger_type = 'polling' AND t.enabled)`, orgID)
	if err != nil {
		return fmt.Errorf("pollgroups: delete empty groups: %w", err)
	}
	return nil
}
