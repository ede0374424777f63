package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/triggers/schedule"
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

const scheduleCols = `s.id::text, s.automation_id::text, s.trigger_id::text, s.name, s.cron_expression, s.timezone, s.enabled,
	s.last_run_at, s.next_run_at, s.created_by::text, s.created_at, s.updated_at`

func scanSchedule(row pgx.Row) (Schedule, error) {
	var sc Schedule
	err := row.Scan(&sc.ID, &sc.AutomationID, &sc.TriggerID, &sc.Name, &sc.CronExpression, &sc.Timezone, &sc.Enabled,
		&sc.LastRunAt, &sc.NextRunAt, &sc.CreatedBy, &sc.CreatedAt, &sc.UpdatedAt)
	return sc, err
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
		if _, err := tx.Exec(ctx, `INSERT INTO triggers (id, org_id, automation_id, trigger_type, provider, enabled, created_by)
			VALUES ($1, $2, $3, 'scheduled', 'scheduled', $4, $5)`, triggerID, orgID, automationID, in.Enabled, nullable(au.UserID)); err != nil {
			return fmt.Errorf("insert schedule trigger: %w", err)
		}
		out, err = scanSchedule(tx.QueryRow(ctx, `INSERT INTO schedules AS s (org_id, automation_id, trigger_id, name, cron_expression,
				timezone, enabled, next_run_at, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+scheduleCols,
			orgID, automationID, triggerID, in.Name, spec.Expression(), in.Timezone, in.Enabled, s.nextRun(spec, in.Enabled), nullable(au.UserID)))
		if err != nil {
			return fmt.Errorf("insert schedule: %w", err)
		}
		return audit(ctx, tx, orgID, au, "schedule.create", "schedule", out.ID, map[string]any{"automation_id": automationID})
	})
	return out, err
}

// ListSchedules lists the organization's schedules, newest first.
func (s *Store) ListSchedules(ctx context.Context, orgID string, f ScheduleFilter, p Page) ([]Schedule, error) {
	a := args{orgID}
	q := `SELECT ` + scheduleCols + ` FROM schedules s WHERE s.org_id = $1`
	if f.AutomationID != "" {
		q += ` AND s.automation_id = ` + a.add(f.AutomationID) + `::uuid`
	}
	q += ` AND (s.created_at, s.id) < (` + a.add(p.At) + `, ` + a.add(p.ID) + `::uuid)
		ORDER BY s.created_at DESC, s.id DESC LIMIT ` + a.add(p.Limit+1)
	rows, err := s.Pool.Query(ctx, q, a...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Schedule, error) { return scanSchedule(r) })
}

// GetSchedule returns one schedule.
func (s *Store) GetSchedule(ctx context.Context, orgID, id string) (Schedule, error) {
	sc, err := scanSchedule(s.Pool.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules s WHERE s.id = $1 AND s.org_id = $2`, id, orgID))
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
		cur, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules s WHERE s.id = $1 AND s.org_id = $2 FOR UPDATE`, id, orgID))
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
		out, err = scanSchedule(tx.QueryRow(ctx, `UPDATE schedules s SET name = $3, cron_expression = $4, timezone = $5, enabled = $6,
				next_run_at = $7, updated_at = now()
			WHERE s.id = $1 AND s.org_id = $2 RETURNING `+scheduleCols,
			id, orgID, cur.Name, spec.Expression(), cur.Timezone, cur.Enabled, s.nextRun(spec, cur.Enabled)))
		if err != nil {
			return fmt.Errorf("update schedule: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE triggers SET enabled = $3, updated_at = now() WHERE id = $1 AND org_id = $2 AND enabled <> $3`,
			cur.TriggerID, orgID, cur.Enabled); err != nil {
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
		var triggerID string
		err := tx.QueryRow(ctx, `SELECT trigger_id::text FROM schedules WHERE id = $1 AND org_id = $2 FOR UPDATE`, id, orgID).Scan(&triggerID)
		if isNoRows(err) {
			return notFound("schedule")
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM triggers WHERE id = $1 AND org_id = $2`, triggerID, orgID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM schedules WHERE id = $1 AND org_id = $2`, id, orgID); err != nil {
			return err
		}
		return audit(ctx, tx, orgID, au, "schedule.delete", "schedule", id, map[string]any{"trigger_id": triggerID})
	})
}
