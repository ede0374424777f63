// Package schedule parses cron expressions of schedules and computes their
// ticks, DST-correct, in the schedule's IANA timezone.
//
// Expressions are standard 5-field cron (minute hour day-of-month month
// day-of-week, with names like "mon" and "jan", lists, ranges and steps) or
// one of the descriptors @yearly, @annually, @monthly, @weekly, @daily,
// @midnight, @hourly. Seconds fields, "@every" and TZ= prefixes are rejected.
//
// Daylight saving time follows Vixie cron: schedules whose hour field is a
// wildcard ("*", "*/2", @hourly) run in elapsed time, so they fire in both
// copies of a repeated hour and not at all in a skipped one; schedules at a
// fixed hour fire once per wall-clock time: a time repeated when clocks go
// back fires at its first occurrence only, and a time skipped when clocks go
// forward fires at the moment the clocks jump (02:30 on a spring-forward day
// in New York fires at 03:00 EDT).
package schedule

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Field names of errors: the schedule columns they are about.
const (
	FieldExpression = "cron_expression"
	FieldTimezone   = "timezone"
)

// Error is a precise problem with a cron expression or a timezone.
type Error struct {
	Field   string // FieldExpression or FieldTimezone
	Problem string
}

func (e *Error) Error() string { return e.Field + ": " + e.Problem }

// Spec is a parsed schedule.
type Spec struct {
	expr     string
	loc      *time.Location
	sched    *cron.SpecSchedule
	hourStar bool // hour field is a wildcard: elapsed-time semantics across DST
	domStar  bool
	dowStar  bool
}

// Expression is the cron expression as given (trimmed).
func (s *Spec) Expression() string { return s.expr }

// Location is the schedule's timezone.
func (s *Spec) Location() *time.Location { return s.loc }

var descriptors = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

var fieldNames = [5]string{"minute", "hour", "day-of-month", "month", "day-of-week"}

var allowed = [5]string{
	"0-59, lists (1,15), ranges (1-5), steps (*/15)",
	"0-23, lists, ranges, steps",
	"1-31, lists, ranges, steps",
	"1-12 or jan-dec, lists, ranges, steps",
	"0-6 (0 is Sunday) or sun-sat, lists, ranges, steps",
}

// fieldProblem turns a robfig/cron field error into a short statement.
func fieldProblem(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "failed to parse int from "); ok {
		if i := strings.Index(rest, ":"); i >= 0 {
			rest = rest[:i]
		}
		return fmt.Sprintf("%q is not a number or a name", rest)
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// MaxExpressionLength bounds the expression (longer ones are rejected).
const MaxExpressionLength = 200

// Parse validates a cron expression (5 fields, plus @hourly-style
// descriptors) in an IANA timezone ("" means UTC). Errors are *Error values
// naming the field and the problem precisely.
func Parse(expr, timezone string) (*Spec, error) {
	loc, err := LoadLocation(timezone)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	bad := func(format string, args ...any) error {
		return &Error{Field: FieldExpression, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case expr == "":
		return nil, bad("is empty; want 5 fields (minute hour day-of-month month day-of-week) or a descriptor such as @hourly")
	case len(expr) > MaxExpressionLength:
		return nil, bad("is longer than %d characters", MaxExpressionLength)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, bad("must not carry a TZ= prefix; set the timezone field instead")
	}
	std := expr
	if strings.HasPrefix(expr, "@") {
		word := strings.Fields(expr)[0]
		if word == "@every" {
			return nil, bad("@every is not supported; use a 5-field expression such as \"*/5 * * * *\"")
		}
		d, ok := descriptors[strings.ToLower(expr)]
		if !ok {
			return nil, bad("unknown descriptor %q; want one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly", word)
		}
		std = d
	}
	fields := strings.Fields(std)
	switch n := len(fields); {
	case n == 6 || n == 7:
		return nil, bad("has %d fields; seconds (and years) are not supported: want 5 fields (minute hour day-of-month month day-of-week)", n)
	case n != 5:
		return nil, bad("has %d field(s); want 5 (minute hour day-of-month month day-of-week)", n)
	}
	for i, f := range fields {
		probe := []string{"0", "0", "1", "1", "*"}
		probe[i] = f
		if _, err := parser.Parse(strings.Join(probe, " ")); err != nil {
			return nil, bad("%s field %q: %s; allowed: %s", fieldNames[i], f, fieldProblem(err), allowed[i])
		}
	}
	parsed, err := parser.Parse(std)
	if err != nil { // every field parsed alone, so this is unexpected
		return nil, bad("%s", err.Error())
	}
	ss, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, bad("is not a cron schedule")
	}
	star := func(f string) bool { return strings.HasPrefix(f, "*") || strings.HasPrefix(f, "?") }
	s := &Spec{expr: expr, loc: loc, sched: ss, hourStar: star(fields[1]), domStar: star(fields[2]), dowStar: star(fields[4])}
	// A day that never exists ("0 0 30 2 *") would never fire.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, bad("never matches a date (day-of-month %q does not exist in month %q)", fields[2], fields[3])
	}
	return s, nil
}

// LoadLocation resolves an IANA timezone name ("" means UTC; "Local" is
// refused: it would depend on the machine).
func LoadLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, &Error{Field: FieldTimezone, Problem: `"Local" is not allowed; use an IANA name such as "America/New_York"`}
	}
	if len(name) > 64 {
		return nil, &Error{Field: FieldTimezone, Problem: "is longer than 64 characters"}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, &Error{Field: FieldTimezone, Problem: fmt.Sprintf("unknown timezone %q; use an IANA name such as \"America/New_York\" or \"Europe/Berlin\"", name)}
	}
	return loc, nil
}

// searchYears bounds Next's search (a schedule that matches a date at all
// matches one within 8 years: Feb 29 of a leap year).
const searchYears = 9

// dstSlack is more than any UTC offset change: wall times further than this
// from a found tick cannot map to an earlier instant.
const dstSlack = 3 * time.Hour

// Next returns the next tick strictly after `after`, in UTC, or the zero
// time if there is none (never for a Spec returned by Parse).
func (s *Spec) Next(after time.Time) time.Time {
	local := after.In(s.loc)
	// Calendar arithmetic on days is done in UTC (no DST); the previous day
	// is included for zones whose clocks go back across midnight.
	day := time.Date(local.Year(), local.Month(), local.Day()-1, 12, 0, 0, 0, time.UTC)
	limit := day.AddDate(searchYears, 0, 0)
	// Wall times before `lowest` cannot map to an instant after `after`:
	// without an offset change near `after`, that is after's own wall time.
	lowest := wallOf(local).Add(-dstSlack)
	_, off := local.Zone()
	_, o1 := after.Add(-dstSlack).In(s.loc).Zone()
	_, o2 := after.Add(dstSlack).In(s.loc).Zone()
	if o1 == off && o2 == off {
		lowest = wallOf(local).Truncate(time.Minute)
	}
	var best, bestWall time.Time
	for ; day.Before(limit); day = day.AddDate(0, 0, 1) {
		if !best.IsZero() && day.Add(-12*time.Hour).After(bestWall.Add(dstSlack)) {
			break
		}
		if s.sched.Month&(1<<uint(day.Month())) == 0 {
			// Jump to the last day of this month (the loop adds one).
			day = time.Date(day.Year(), day.Month()+1, 0, 12, 0, 0, 0, time.UTC)
			continue
		}
		if !s.dayMatches(day) {
			continue
		}
		midnight := day.Add(-12 * time.Hour)
		for h := 0; h < 24; h++ {
			hour := midnight.Add(time.Duration(h) * time.Hour)
			if s.sched.Hour&(1<<uint(h)) == 0 || hour.Add(time.Hour).Before(lowest) {
				continue
			}
			for m := 0; m < 60; m++ {
				if s.sched.Minute&(1<<uint(m)) == 0 {
					continue
				}
				wall := hour.Add(time.Duration(m) * time.Minute)
				if wall.Before(lowest) {
					continue
				}
				if !best.IsZero() && wall.After(bestWall.Add(dstSlack)) {
					return best.UTC()
				}
				insts, simple := s.ticksAt(wall)
				for _, t := range insts {
					if t.After(after) && (best.IsZero() || t.Before(best)) {
						best, bestWall = t, wall
					}
				}
				// Without an offset change near it, later wall times map to
				// later instants: nothing can beat this one.
				if simple && !best.IsZero() && best.Equal(insts[0]) {
					return best.UTC()
				}
			}
		}
	}
	if best.IsZero() {
		return best
	}
	return best.UTC()
}

// ticksAt returns the instants a wall-clock time of the schedule fires at,
// following the DST rules in the package comment; simple is true when no
// offset change is near (one instant, in step with the wall clock).
func (s *Spec) ticksAt(wall time.Time) (ticks []time.Time, simple bool) {
	insts, simple := s.instants(wall)
	switch {
	case len(insts) == 0: // skipped by a forward jump
		if s.hourStar {
			return nil, false
		}
		return []time.Time{s.gapEnd(wall)}, false
	case len(insts) == 2 && !s.hourStar: // repeated: the first occurrence only
		return insts[:1], false
	}
	return insts, simple
}

// dayMatches applies cron's day rule: when both day-of-month and day-of-week
// are restricted, either may match; otherwise both must.
func (s *Spec) dayMatches(day time.Time) bool {
	dom := s.sched.Dom&(1<<uint(day.Day())) != 0
	dow := s.sched.Dow&(1<<uint(day.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// wallOf expresses t's wall clock as a UTC time (for comparing wall times).
func wallOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instants returns the instants (ascending) at which the wall clock of loc
// reads wall: none in a gap, two in an overlap, one otherwise.
func (s *Spec) instants(wall time.Time) (out []time.Time, simple bool) {
	// Fast path: no offset change within dstSlack of the instant.
	t := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, s.loc)
	if s.loc == time.UTC {
		return []time.Time{t}, true
	}
	_, off := t.Zone()
	_, o1 := t.Add(-dstSlack).Zone()
	_, o2 := t.Add(dstSlack).Zone()
	if o1 == off && o2 == off && wallOf(t.In(s.loc)).Equal(wall) {
		return []time.Time{t}, true
	}
	seen := map[int]bool{}
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := wall.Add(probe).In(s.loc).Zone()
		if seen[off] {
			continue
		}
		seen[off] = true
		t := wall.Add(-time.Duration(off) * time.Second)
		lt := t.In(s.loc)
		if lt.Year() == wall.Year() && lt.Month() == wall.Month() && lt.Day() == wall.Day() &&
			lt.Hour() == wall.Hour() && lt.Minute() == wall.Minute() {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	if len(out) == 2 && out[0].Equal(out[1]) {
		out = out[:1]
	}
	return out, false
}

// gapEnd returns the instant the clocks jumped over wall (which does not
// exist in loc): the start of the zone period in effect just after the gap.
func (s *Spec) gapEnd(wall time.Time) time.Time {
	_, before := wall.Add(-26 * time.Hour).In(s.loc).Zone()
	// Under the old offset, wall maps to an instant already past the jump.
	t := wall.Add(-time.Duration(before) * time.Second).In(s.loc)
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return t
	}
	return start
}
