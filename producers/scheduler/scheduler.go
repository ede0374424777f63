// Package scheduler is the cron scheduler role: every SCHEDULER_TICK it
// finds the enabled schedules whose next_run_at has come and starts one run
// per tick through runs.Enqueue, exactly once across any number of replicas.
//
// Exactly once: each due schedule is handled in one transaction that first
// advances next_run_at with a compare-and-set (UPDATE … WHERE next_run_at =
// the tick it read); only the replica whose update hits the row goes on to
// enqueue, and the others see zero rows once the winner commits. The run's
// dedup key is cron:{schedule id}:{tick unix seconds}, so even a second
// writer could not queue a tick twice.
//
// Missed ticks (the scheduler was down, or the schedule was due many times
// over): only the latest tick that has passed runs, once; the older ones are
// skipped and logged (count, first and last), and the run's context carries
// skipped_ticks. A schedule with no next_run_at (just created, or re-enabled
// by an API that clears it) gets its next tick after now, so it does not
// fire at once.
//
// Disabled automations and disabled schedule triggers still consume the tick
// and record a skipped trigger event (automation_disabled, trigger_disabled).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/schedule"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
)

// Deps are what the scheduler needs.
type Deps struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	Log   *slog.Logger
	// Tick is how often due schedules are looked for (SCHEDULER_TICK; default 1 s).
	Tick time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Batch bounds the schedules handled per pass (default 200); a full
	// batch is followed by another pass at once.
	Batch int
	// Workers handle due schedules concurrently (default 4).
	Workers int
}

// Scheduler starts the runs of due cron schedules.
type Scheduler struct {
	d   Deps
	log *slog.Logger
}

// New builds a scheduler.
func New(d Deps) *Scheduler {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Tick <= 0 {
		d.Tick = time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Batch <= 0 {
		d.Batch = 200
	}
	if d.Workers <= 0 {
		d.Workers = 4
	}
	return &Scheduler{d: d, log: d.Log.With("role", "scheduler")}
}

// Run handles due schedules every tick until ctx ends (then returns nil).
// Database errors are logged and retried on the next tick.
func (s *Scheduler) Run(ctx context.Context) error {
	s.log.Info("scheduler started", "tick", s.d.Tick.String())
	t := time.NewTicker(s.d.Tick)
	defer t.Stop()
	for {
		for {
			res, err := s.RunOnce(ctx, s.d.Now())
			if err != nil && ctx.Err() == nil {
				s.log.Error("scheduler pass failed", "error", err)
			}
			if err != nil || !res.More || res.Queued+res.Skipped == 0 || ctx.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Result counts what one pass did.
type Result struct {
	Initialized int // schedules that got their first next_run_at
	Queued      int // ticks that queued a run
	Skipped     int // ticks recorded as skipped (disabled automation/trigger)
	Lost        int // due ticks another replica handled first
	MissedTicks int // older missed ticks not run (see the package comment)
	More        bool
}

// RunOnce handles every schedule due at now (up to Batch) and returns what
// it did. Replicas may call it concurrently with the same now.
func (s *Scheduler) RunOnce(ctx context.Context, now time.Time) (Result, error) {
	var res Result
	n, err := s.initialize(ctx, now)
	res.Initialized = n
	if err != nil {
		return res, err
	}
	due, err := s.due(ctx, now)
	if err != nil {
		return res, err
	}
	res.More = len(due) == s.d.Batch
	var (
		mu    sync.Mutex
		errs  []error
		wg    sync.WaitGroup
		queue = make(chan dueSchedule)
	)
	for range min(s.d.Workers, max(len(due), 1)) {
		wg.Go(func() {
			for ds := range queue {
				out, err := s.fire(ctx, ds, now)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("schedule %s: %w", ds.id, err))
				}
				switch out.result {
				case fired:
					res.Queued++
				case skipped:
					res.Skipped++
				case lost:
					res.Lost++
				}
				res.MissedTicks += out.missed
				mu.Unlock()
			}
		})
	}
	for _, ds := range due {
		queue <- ds
	}
	close(queue)
	wg.Wait()
	return res, errors.Join(errs...)
}

// initialize gives schedules without a next_run_at their next tick after now.
func (s *Scheduler) initialize(ctx context.Context, now time.Time) (int, error) {
	todo, err := triggersdb.New(s.d.Pool).NewSchedules(ctx, int32(s.d.Batch))
	if err != nil {
		return 0, fmt.Errorf("find new schedules: %w", err)
	}
	n := 0
	for _, r := range todo {
		spec, err := schedule.Parse(r.CronExpression, r.Timezone)
		if err != nil {
			s.log.Error("schedule has an invalid cron expression or timezone; it cannot run", "schedule_id", r.ID, "error", err)
			continue
		}
		next := spec.Next(now)
		if next.IsZero() {
			continue // never fires (Parse rejects such expressions)
		}
		set, err := triggersdb.New(s.d.Pool).SetFirstScheduleTick(ctx, triggersdb.SetFirstScheduleTickParams{ID: r.ID, NextRunAt: next})
		if err != nil {
			return n, fmt.Errorf("set first next_run_at: %w", err)
		}
		n += int(set)
	}
	return n, nil
}

type dueSchedule struct {
	id, orgID, automationID, triggerID string
	name, expr, tz                     string
	tick                               time.Time
}

func (s *Scheduler) due(ctx context.Context, now time.Time) ([]dueSchedule, error) {
	rows, err := triggersdb.New(s.d.Pool).DueSchedules(ctx, triggersdb.DueSchedulesParams{Now: now, Max: int32(s.d.Batch)})
	if err != nil {
		return nil, fmt.Errorf("find due schedules: %w", err)
	}
	due := make([]dueSchedule, len(rows))
	for i, r := range rows {
		due[i] = dueSchedule{id: r.ID, orgID: r.OrgID, automationID: r.AutomationID, triggerID: r.TriggerID,
			name: r.Name, expr: r.CronExpression, tz: r.Timezone, tick: r.NextRunAt}
	}
	return due, nil
}

type outcome int

const (
	lost outcome = iota
	fired
	skipped
)

type fireResult struct {
	result outcome
	missed int
}

// maxCountMissed bounds the missed ticks counted one by one.
const maxCountMissed = 10_000

// latestTick returns the latest tick at or before now (the due tick when no
// later one has passed) and how many older ticks it passes over (at most
// maxCountMissed are counted; more sets approx).
func latestTick(spec *schedule.Spec, tick, now time.Time) (latest time.Time, missed int, approx bool) {
	latest = tick
	if n := spec.Next(tick); n.IsZero() || n.After(now) {
		return latest, 0, false
	}
	// Search growing windows back from now, so a long downtime of a
	// frequent schedule does not walk every tick.
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 9 * 367 * 24 * time.Hour} {
		from := now.Add(-w)
		if from.Before(tick) {
			from = tick
		}
		t := spec.Next(from.Add(-time.Nanosecond))
		if t.IsZero() || t.After(now) {
			continue
		}
		for ; !t.IsZero() && !t.After(now); t = spec.Next(t) {
			latest = t
		}
		break
	}
	for t := tick; t.Before(latest); t = spec.Next(t) {
		if missed == maxCountMissed {
			return latest, missed, true
		}
		missed++
	}
	return latest, missed, false
}

// fire handles one due schedule in one transaction.
func (s *Scheduler) fire(ctx context.Context, ds dueSchedule, now time.Time) (fireResult, error) {
	log := s.log.With("schedule_id", ds.id, "org_id", ds.orgID, "automation_id", ds.automationID)
	spec, err := schedule.Parse(ds.expr, ds.tz)
	if err != nil {
		log.Error("schedule has an invalid cron expression or timezone; it cannot run", "error", err)
		return fireResult{result: lost}, nil
	}
	latest, missed, approx := latestTick(spec, ds.tick, now)
	next := spec.Next(latest)
	var res fireResult
	err = pgx.BeginFunc(ctx, s.d.Pool, func(tx pgx.Tx) error {
		res = fireResult{result: lost}
		var nextArg *time.Time
		if !next.IsZero() {
			nextArg = &next
		}
		took, err := triggersdb.New(tx).AdvanceSchedule(ctx, triggersdb.AdvanceScheduleParams{ID: ds.id, Tick: ds.tick, NextRunAt: nextArg, LastRunAt: latest})
		if err != nil {
			return fmt.Errorf("advance next_run_at: %w", err)
		}
		if took == 0 {
			return nil // another replica took this tick
		}
		en, err := triggersdb.New(tx).TriggerEnabled(ctx, triggersdb.TriggerEnabledParams{ID: ds.triggerID, OrgID: ds.orgID})
		triggerEnabled, automationEnabled := en.TriggerEnabled, en.AutomationEnabled
		if err != nil {
			return fmt.Errorf("load trigger: %w", err)
		}
		src := runs.Source{OrgID: ds.orgID, TriggerID: ds.triggerID, AutomationID: ds.automationID, TriggerType: "scheduled"}
		ev := tickEvent(ds, spec, latest, missed)
		switch {
		case !automationEnabled:
			_, err = runs.RecordSkipped(ctx, tx, s.d.Codec, src, ev, runs.SkipAutomationDisabled)
			res.result = skipped
		case !triggerEnabled:
			_, err = runs.RecordSkipped(ctx, tx, s.d.Codec, src, ev, runs.SkipTriggerDisabled)
			res.result = skipped
		default:
			_, err = runs.Enqueue(ctx, tx, s.d.Codec, src, ev)
			res.result = fired
		}
		res.missed = missed
		return err
	})
	if err != nil {
		return fireResult{result: lost}, err
	}
	if res.result != lost {
		if missed > 0 {
			log.Warn("schedule missed ticks; ran the latest one only",
				"skipped_ticks", missed, "skipped_ticks_capped", approx, "first_skipped_tick", ds.tick.UTC().Format(time.RFC3339),
				"ran_tick", latest.UTC().Format(time.RFC3339))
		}
		log.Info("schedule tick handled", "tick", latest.UTC().Format(time.RFC3339),
			"queued", res.result == fired, "next_run_at", next.UTC().Format(time.RFC3339))
	}
	return res, nil
}

// tickEvent is the normalized event of one cron tick.
func tickEvent(ds dueSchedule, spec *schedule.Spec, tick time.Time, missed int) runs.Event {
	title := ds.name
	if title == "" {
		title = "Scheduled run (" + ds.expr + ")"
	}
	c := map[string]any{
		"schedule_id":         ds.id,
		"cron_expression":     ds.expr,
		"timezone":            ds.tz,
		"scheduled_for":       tick.UTC().Format(time.RFC3339),
		"scheduled_for_local": tick.In(spec.Location()).Format(time.RFC3339),
	}
	if missed > 0 {
		c["skipped_ticks"] = missed
	}
	return runs.Event{
		Provider: "scheduled", EventType: "schedule_tick", ProviderEventType: "cron",
		OccurredAt: tick, DedupKey: DedupKey(ds.id, tick), Title: title, ExternalID: ds.id, Context: c,
	}
}

// DedupKey is the dedup key of a schedule's tick: cron:{schedule id}:{unix seconds}.
func DedupKey(scheduleID string, tick time.Time) string {
	return fmt.Sprintf("cron:%s:%d", scheduleID, tick.Unix())
}
