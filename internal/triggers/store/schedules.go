package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/triggers/schedule"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// Schedule runs an automation on a cron expression in a timezone, through
// its own trigger (type scheduled).
type Schedule struct {
	ID             string     `json:"id"`
	AutomationID   string     `json:"automation_id"`
	TriggerID      string     `json:"trigger_id"`
	Name           string     `json:"name"`
	CronExpression string     `json:"cron_expression"`
	Timezone       string     `json:"timezone"`
	Enabled        bool       `json:"enabled"`
	LastRunAt      *time.Time `json:"last_run_at"`
	// NextRunAt is the next tick (UTC) while enabled, null while disabled.
	NextRunAt *time.Time `json:"next_run_at"`
	CreatedBy *string    `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// ScheduleInput creates a schedule.
type ScheduleInput struct {
	Name, CronExpression, Timezone string
	Enabled                        bool
}

// SchedulePatch changes a schedule; nil fields are kept.
type SchedulePatch struct {
	Name, CronExpression, Timezone *string
	Enabled                        *bool
}

// ScheduleFilter narrows GET /schedules.
type ScheduleFilter struct{ AutomationID string }

// scheduleRow converts a stored row (err is the query's).
func scheduleRow(r triggersdb.Schedule, err error) (Schedule, error) {
	if err != nil {
		return Schedule{}, err
	}
	return Schedule{ID: r.ID, AutomationID: r.AutomationID, TriggerID: r.TriggerID, Name: r.Name, CronExpression: r.CronExpression,
		Timezone: r.Timezone, Enabled: r.Enabled, LastRunAt: r.LastRunAt, NextRunAt: r.NextRunAt, CreatedBy: r.CreatedBy,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}, nil
}

// ParseSchedule checks a cron expression and a timezone with schedule.Parse;
// its precise problem becomes a 422 on the field it names.
func ParseSchedule(expr, tz string) (*schedule.Spec, error) {
	spec, err := schedule.Parse(expr, tz)
	var se *schedule.Error
	switch {
	case errors.As(err, &se):
		return nil, invalid(se.Field, se.Problem)
	case err != nil:
		return nil, invalid(schedule.FieldExpression, err.Error())
	}
	return spec, nil
}

func (s *Store) nextRun(spec *schedule.Spec, enabled bool) *time.Time {
	if !enabled {
		return nil
	}
	n := spec.Next(s.now()).UTC()
	return &n
}

// CreateSchedule creates a schedule and its trigger, with next_run_at.
func (s *Store) CreateSchedule(ctx context.Context, orgID, automationID string, in ScheduleInput, au Audit) (Schedule, error) {
	var out Schedule
	if in.Timezone == "" {
		in.Timezone = "UTC"
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := lockAutomation(ctx, tx, orgID, automationID); err != nil {
			return err
		}
		spec, err := ParseSchedule(in.CronExpression, in.Timezone)
		if err != nil {
			return err
		}
		triggerID := uuid.NewString()
		q := triggersdb.New(tx)
		if err := q.InsertScheduleTrigger(ctx, triggersdb.InsertScheduleTriggerParams{ID: triggerID, OrgID: orgID, AutomationID: automationID,
			Enabled: in.Enabled, CreatedBy: nullable(au.UserID)}); err != nil {
			return fmt.Errorf("insert schedule trigger: %w", err)
		}
		out, err = scheduleRow(q.InsertSchedule(ctx, triggersdb.InsertScheduleParams{OrgID: orgID, AutomationID: automationID, TriggerID: triggerID,
			Name: in.Name, CronExpression: spec.Expression(), Timezone: in.Timezone, Enabled: in.Enabled,
			NextRunAt: s.nextRun(spec, in.Enabled), CreatedBy: nullable(au.UserID)}))
		if err != nil {
			return fmt.Errorf("insert schedule: %w", err)
		}
		return audit(ctx, tx, orgID, au, "schedule.create", "schedule", out.ID, map[string]any{"automation_id": automationID})
	})
	return out, err
}

// ListSchedules lists the organization's schedules, newest first.
func (s *Store) ListSchedules(ctx context.Context, orgID string, f ScheduleFilter, p Page) ([]Schedule, error) {
	rows, err := triggersdb.New(s.Pool).ListSchedules(ctx, triggersdb.ListSchedulesParams{OrgID: orgID, AutomationID: nullable(f.AutomationID),
		BeforeAt: p.At, BeforeID: p.ID, Max: int32(p.Limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		out[i], _ = scheduleRow(r, nil)
	}
	return out, nil
}

// GetSchedule returns one schedule.
func (s *Store) GetSchedule(ctx context.Context, orgID, id string) (Schedule, error) {
	sc, err := scheduleRow(triggersdb.New(s.Pool).GetSchedule(ctx, triggersdb.GetScheduleParams{ID: id, OrgID: orgID}))
	if isNoRows(err) {
		return sc, notFound("schedule")
	}
	return sc, err
}

// UpdateSchedule applies p, recomputes next_run_at from now and keeps the
// schedule's trigger enabled exactly when the schedule is.
func (s *Store) UpdateSchedule(ctx context.Context, orgID, id string, p SchedulePatch, au Audit) (Schedule, error) {
	var out Schedule
	err := s.tx(ctx, func(tx pgx.Tx) error {
		q := triggersdb.New(tx)
		cur, err := scheduleRow(q.LockSchedule(ctx, triggersdb.LockScheduleParams{ID: id, OrgID: orgID}))
		if isNoRows(err) {
			return notFound("schedule")
		}
		if err != nil {
			return err
		}
		before := cur
		if p.Name != nil {
			cur.Name = *p.Name
		}
		if p.CronExpression != nil {
			cur.CronExpression = *p.CronExpression
		}
		if p.Timezone != nil {
			cur.Timezone = *p.Timezone
			if cur.Timezone == "" {
				cur.Timezone = "UTC"
			}
		}
		if p.Enabled != nil {
			cur.Enabled = *p.Enabled
		}
		spec, err := ParseSchedule(cur.CronExpression, cur.Timezone)
		if err != nil {
			return err
		}
		out, err = scheduleRow(q.UpdateSchedule(ctx, triggersdb.UpdateScheduleParams{ID: id, OrgID: orgID, Name: cur.Name,
			CronExpression: spec.Expression(), Timezone: cur.Timezone, Enabled: cur.Enabled, NextRunAt: s.nextRun(spec, cur.Enabled)}))
		if err != nil {
			return fmt.Errorf("update schedule: %w", err)
		}
		if err := q.SetTriggerEnabled(ctx, triggersdb.SetTriggerEnabledParams{ID: cur.TriggerID, OrgID: orgID, Enabled: cur.Enabled}); err != nil {
			return err
		}
		fields, err := changedFields(before, out, "next_run_at")
		if err != nil {
			return err
		}
		return audit(ctx, tx, orgID, au, "schedule.update", "schedule", id, map[string]any{
			"automation_id": out.AutomationID, "fields": fields})
	})
	return out, err
}

// DeleteSchedule deletes a schedule by deleting its trigger (the schedule,
// the trigger's events and their runs cascade).
func (s *Store) DeleteSchedule(ctx context.Context, orgID, id string, au Audit) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		q := triggersdb.New(tx)
		triggerID, err := q.LockScheduleTrigger(ctx, triggersdb.LockScheduleTriggerParams{ID: id, OrgID: orgID})
		if isNoRows(err) {
			return notFound("schedule")
		}
		if err != nil {
			return err
		}
		if err := q.DeleteTrigger(ctx, triggersdb.DeleteTriggerParams{ID: triggerID, OrgID: orgID}); err != nil {
			return err
		}
		if err := q.DeleteSchedule(ctx, triggersdb.DeleteScheduleParams{ID: id, OrgID: orgID}); err != nil {
			return err
		}
		return audit(ctx, tx, orgID, au, "schedule.delete", "schedule", id, map[string]any{"trigger_id": triggerID})
	})
}
