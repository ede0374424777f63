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

	"github.com/proliferate/proliferate/internal/triggers/pollgroups/pollgroupsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
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
	tq := triggersdb.New(tx)
	t, err := tq.LockTriggerForPollGroup(ctx, triggerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("pollgroups: load trigger: %w", err)
	}
	if t.TriggerType != "polling" {
		if err := tq.ClearTriggerPollGroup(ctx, triggerID); err != nil {
			return fmt.Errorf("pollgroups: detach trigger: %w", err)
		}
		return nil
	}
	q := pollgroupsdb.New(tx)
	groupID, err := q.UpsertPollGroup(ctx, pollgroupsdb.UpsertPollGroupParams{OrgID: t.OrgID, Provider: t.Provider, IntegrationID: t.IntegrationID})
	if err != nil {
		return fmt.Errorf("pollgroups: find or create group: %w", err)
	}
	if err := tq.SetTriggerPollGroup(ctx, triggersdb.SetTriggerPollGroupParams{ID: triggerID, PollGroupID: groupID}); err != nil {
		return fmt.Errorf("pollgroups: attach trigger: %w", err)
	}
	// The group polls at the smallest interval its triggers ask for; a valid
	// integer config value is used, anything else means the default.
	err = q.SetPollGroupInterval(ctx, pollgroupsdb.SetPollGroupIntervalParams{ID: groupID, OrgID: t.OrgID, ConfigKey: IntervalConfigKey,
		DefaultSeconds: DefaultIntervalSeconds, MinSeconds: MinIntervalSeconds, MaxSeconds: MaxIntervalSeconds})
	if err != nil {
		return fmt.Errorf("pollgroups: group interval: %w", err)
	}
	return nil
}

// DetachEmpty deletes the org's poll groups that have no enabled polling
// trigger left (their cursor goes with them; disabled triggers still in such
// a group lose their group, and Attach puts them back when re-enabled).
func DetachEmpty(ctx context.Context, tx pgx.Tx, orgID string) error {
	if err := pollgroupsdb.New(tx).DeleteEmptyPollGroups(ctx, orgID); err != nil {
		return fmt.Errorf("pollgroups: delete empty groups: %w", err)
	}
	return nil
}
