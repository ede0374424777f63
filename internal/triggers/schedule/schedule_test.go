package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/triggers/schedule"
)

func at(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ticks returns the next n ticks after from, as RFC 3339 in the schedule's zone.
func ticks(t *testing.T, expr, tz, from string, n int) []string {
	t.Helper()
	s, err := schedule.Parse(expr, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, tz, err)
	}
	cur := at(t, from)
	var out []string
	for range n {
		next := s.Next(cur)
		if next.Location() != time.UTC {
			t.Fatalf("Next returned %v, not UTC", next.Location())
		}
		if !next.After(cur) {
			t.Fatalf("Next(%v) = %v, not after", cur, next)
		}
		out = append(out, next.In(s.Location()).Format(time.RFC3339))
		cur = next
	}
	return out
}

func expect(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ticks\n got %v\nwant %v", got, want)
	}
}

func TestNextBasics(t *testing.T) {
	expect(t, ticks(t, "*/15 * * * *", "UTC", "2025-01-01T00:07:00Z", 3),
		"2025-01-01T00:15:00Z", "2025-01-01T00:30:00Z", "2025-01-01T00:45:00Z")
	// Strictly after: a tick equal to `after` is not returned.
	expect(t, ticks(t, "0 * * * *", "", "2025-01-01T05:00:00Z", 1), "2025-01-01T06:00:00Z")
	expect(t, ticks(t, "@daily", "UTC", "2025-12-31T12:00:00Z", 2), "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")
	expect(t, ticks(t, "@weekly", "UTC", "2025-01-01T00:00:00Z", 1), "2025-01-05T00:00:00Z") // Sunday
	expect(t, ticks(t, "@monthly", "UTC", "2025-01-31T00:00:00Z", 2), "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z")
	expect(t, ticks(t, "@yearly", "UTC", "2025-06-01T00:00:00Z", 1), "2026-01-01T00:00:00Z")
	expect(t, ticks(t, "@hourly", "Asia/Kolkata", "2025-01-01T00:10:00Z", 1), "2025-01-01T06:00:00+05:30")
	// Names, ranges and lists; weekdays at 09:30 New York time.
	expect(t, ticks(t, "30 9 * * mon-fri", "America/New_York", "2025-01-03T15:00:00Z", 2),
		"2025-01-06T09:30:00-05:00", "2025-01-07T09:30:00-05:00")
	// Day-of-month and day-of-week both restricted: either matches.
	expect(t, ticks(t, "0 0 13 * 5", "UTC", "2025-06-01T00:00:00Z", 3),
		"2025-06-06T00:00:00Z", "2025-06-13T00:00:00Z", "2025-06-20T00:00:00Z")
	// A step in day-of-month counts as a wildcard (both must match), as in cron.
	expect(t, ticks(t, "0 0 */2 * 1", "UTC", "2025-06-01T00:00:00Z", 2), "2025-06-09T00:00:00Z", "2025-06-23T00:00:00Z")
	// Feb 29 comes every four years.
	expect(t, ticks(t, "0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", 2), "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z")
}

// Spring forward in New York (2025-03-09, 02:00 EST → 03:00 EDT) and Berlin
// (2025-03-30, 02:00 CET → 03:00 CEST): a daily job in the skipped hour runs
// once, when the clocks jump; jobs at other times keep their wall-clock time;
// hourly jobs simply have no 02:xx that day (one hour of elapsed time).
func TestSpringForward(t *testing.T) {
	expect(t, ticks(t, "30 2 * * *", "America/New_York", "2025-03-08T12:00:00Z", 2),
		"2025-03-09T03:00:00-04:00", "2025-03-10T02:30:00-04:00")
	expect(t, ticks(t, "0 9 * * *", "America/New_York", "2025-03-08T12:00:00Z", 3),
		"2025-03-08T09:00:00-05:00", "2025-03-09T09:00:00-04:00", "2025-03-10T09:00:00-04:00")
	expect(t, ticks(t, "0 * * * *", "America/New_York", "2025-03-09T05:30:00Z", 3),
		"2025-03-09T01:00:00-05:00", "2025-03-09T03:00:00-04:00", "2025-03-09T04:00:00-04:00")
	// Several skipped times collapse into the one jump instant.
	expect(t, ticks(t, "0,30 2 * * *", "America/New_York", "2025-03-09T05:00:00Z", 2),
		"2025-03-09T03:00:00-04:00", "2025-03-10T02:00:00-04:00")
	expect(t, ticks(t, "30 2 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z", 2),
		"2025-03-30T03:00:00+02:00", "2025-03-31T02:30:00+02:00")
	expect(t, ticks(t, "*/30 * * * *", "Europe/Berlin", "2025-03-30T00:20:00Z", 3),
		"2025-03-30T01:30:00+01:00", "2025-03-30T03:00:00+02:00", "2025-03-30T03:30:00+02:00")
	expect(t, ticks(t, "0 12 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z", 2),
		"2025-03-30T12:00:00+02:00", "2025-03-31T12:00:00+02:00")
}

// Fall back in New York (2025-11-02, 02:00 EDT → 01:00 EST) and Berlin
// (2025-10-26, 03:00 CEST → 02:00 CET): a daily job in the repeated hour runs
// once (its first occurrence); hourly jobs run in both copies of the hour.
func TestFallBack(t *testing.T) {
	expect(t, ticks(t, "30 1 * * *", "America/New_York", "2025-11-01T12:00:00Z", 2),
		"2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00")
	expect(t, ticks(t, "0 * * * *", "America/New_York", "2025-11-02T03:30:00Z", 4),
		"2025-11-02T00:00:00-04:00", "2025-11-02T01:00:00-04:00", "2025-11-02T01:00:00-05:00", "2025-11-02T02:00:00-05:00")
	expect(t, ticks(t, "30 2 * * *", "Europe/Berlin", "2025-10-25T12:00:00Z", 2),
		"2025-10-26T02:30:00+02:00", "2025-10-27T02:30:00+01:00")
	expect(t, ticks(t, "*/30 * * * *", "Europe/Berlin", "2025-10-25T23:40:00Z", 5),
		"2025-10-26T02:00:00+02:00", "2025-10-26T02:30:00+02:00", "2025-10-26T02:00:00+01:00",
		"2025-10-26T02:30:00+01:00", "2025-10-26T03:00:00+01:00")
	// Next from inside the repeated hour, after the first occurrence of a
	// daily job, goes to the next day.
	s, _ := schedule.Parse("30 1 * * *", "America/New_York")
	if got := s.Next(at(t, "2025-11-02T06:10:00Z")); !got.Equal(at(t, "2025-11-03T06:30:00Z")) { // from 01:10 EST
		t.Fatalf("from the second 01:10: %v", got)
	}
	// Every day of a year has exactly one 09:00 run across both changes.
	s, _ = schedule.Parse("0 9 * * *", "Europe/Berlin")
	cur := at(t, "2025-01-01T00:00:00Z")
	for i := range 365 {
		next := s.Next(cur)
		if l := next.In(s.Location()); l.Hour() != 9 || l.Minute() != 0 || l.YearDay() != i+1 {
			t.Fatalf("run %d at %v", i, l)
		}
		cur = next
	}
}

// A zone whose clocks go back across midnight (America/Santiago: at
// 2025-04-06 00:00 -03 the clocks showed 2025-04-05 23:00 -04 again) runs
// the repeated 23:30 once, and a midnight job once a day (Apr 6's midnight
// is the one after the repeated hour: the first one was never shown).
func TestFallBackAcrossMidnight(t *testing.T) {
	expect(t, ticks(t, "30 23 * * *", "America/Santiago", "2025-04-05T12:00:00Z", 2),
		"2025-04-05T23:30:00-03:00", "2025-04-06T23:30:00-04:00")
	expect(t, ticks(t, "0 0 * * *", "America/Santiago", "2025-04-04T12:00:00Z", 3),
		"2025-04-05T00:00:00-03:00", "2025-04-06T00:00:00-04:00", "2025-04-07T00:00:00-04:00")
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ expr, tz, field, want string }{
		{"", "UTC", schedule.FieldExpression, "is empty"},
		{"   ", "UTC", schedule.FieldExpression, "is empty"},
		{"0 * * * * *", "UTC", schedule.FieldExpression, "has 6 fields; seconds (and years) are not supported"},
		{"* * * *", "UTC", schedule.FieldExpression, "has 4 field(s); want 5"},
		{"61 * * * *", "UTC", schedule.FieldExpression, `minute field "61": end of range (61) above maximum (59)`},
		{"0 24 * * *", "UTC", schedule.FieldExpression, `hour field "24"`},
		{"0 0 0 * *", "UTC", schedule.FieldExpression, `day-of-month field "0": beginning of range (0) below minimum (1)`},
		{"0 0 * 13 *", "UTC", schedule.FieldExpression, `month field "13"`},
		{"0 0 * * 8", "UTC", schedule.FieldExpression, `day-of-week field "8"`},
		{"0 0 * * funday", "UTC", schedule.FieldExpression, `day-of-week field "funday": "funday" is not a number or a name`},
		{"x * * * *", "UTC", schedule.FieldExpression, `minute field "x": "x" is not a number or a name`},
		{"*/0 * * * *", "UTC", schedule.FieldExpression, `minute field "*/0"`},
		{"5-1 * * * *", "UTC", schedule.FieldExpression, `minute field "5-1"`},
		{"@every 5m", "UTC", schedule.FieldExpression, "@every is not supported"},
		{"@fortnightly", "UTC", schedule.FieldExpression, `unknown descriptor "@fortnightly"`},
		{"TZ=UTC 0 * * * *", "UTC", schedule.FieldExpression, "must not carry a TZ= prefix"},
		{"CRON_TZ=UTC 0 * * * *", "UTC", schedule.FieldExpression, "must not carry a TZ= prefix"},
		{"0 0 30 2 *", "UTC", schedule.FieldExpression, "never matches a date"},
		{"0 0 31 4,6 *", "UTC", schedule.FieldExpression, "never matches a date"},
		{strings.Repeat("1,", 150) + "1 * * * *", "UTC", schedule.FieldExpression, "longer than 200"},
		{"0 * * * *", "Mars/Olympus_Mons", schedule.FieldTimezone, `unknown timezone "Mars/Olympus_Mons"`},
		{"0 * * * *", "Local", schedule.FieldTimezone, `"Local" is not allowed`},
		{"0 * * * *", "../../etc/passwd", schedule.FieldTimezone, "unknown timezone"},
		{"0 * * * *", "utc ", schedule.FieldTimezone, "unknown timezone"},
		{"0 * * * *", strings.Repeat("A", 65), schedule.FieldTimezone, "longer than 64"},
	}
	for _, c := range cases {
		_, err := schedule.Parse(c.expr, c.tz)
		var se *schedule.Error
		if !errors.As(err, &se) {
			t.Fatalf("Parse(%q, %q) = %v; want a *schedule.Error", c.expr, c.tz, err)
		}
		if se.Field != c.field || !strings.Contains(se.Problem, c.want) {
			t.Fatalf("Parse(%q, %q) = %s: %q; want %s containing %q", c.expr, c.tz, se.Field, se.Problem, c.field, c.want)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	for _, expr := range []string{"* * * * *", " 0 9 * * 1-5 ", "0 0 1 jan,jul *", "*/5 9-17 * * MON-FRI", "0 0 1-7 * 1",
		"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually", "@HOURLY", "0 0 29 2 *", "0 12 ? * *"} {
		s, err := schedule.Parse(expr, "Europe/Berlin")
		if err != nil {
			t.Fatalf("Parse(%q): %v", expr, err)
		}
		if s.Expression() != strings.TrimSpace(expr) || s.Location().String() != "Europe/Berlin" {
			t.Fatalf("Parse(%q) = %q in %v", expr, s.Expression(), s.Location())
		}
	}
	for _, tz := range []string{"", "UTC", "America/New_York", "Asia/Kathmandu", "Australia/Lord_Howe", "Etc/GMT+5"} {
		if _, err := schedule.Parse("0 * * * *", tz); err != nil {
			t.Fatalf("timezone %q: %v", tz, err)
		}
	}
}

// Next always moves forward, by at most the schedule's period plus a skipped
// hour, across years of zones with unusual DST rules.
func TestNextProperties(t *testing.T) {
	for _, tz := range []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "Asia/Kathmandu"} {
		s, err := schedule.Parse("15,45 */3 * * *", tz)
		if err != nil {
			t.Fatal(err)
		}
		cur := at(t, "2024-01-01T00:00:00Z")
		for range 3 * 365 * 8 {
			next := s.Next(cur)
			if !next.After(cur) || next.Sub(cur) > 5*time.Hour {
				t.Fatalf("%s: Next(%v) = %v", tz, cur, next)
			}
			if l := next.In(s.Location()); l.Minute() != 15 && l.Minute() != 45 && l.Minute() != 0 && l.Minute() != 30 {
				t.Fatalf("%s: tick at %v", tz, l)
			}
			cur = next
		}
	}
}

func BenchmarkNextEveryMinute(b *testing.B) {
	s, _ := schedule.Parse("* * * * *", "America/New_York")
	cur := at(b, "2025-01-01T00:00:00Z")
	for b.Loop() {
		cur = s.Next(cur)
	}
}

func BenchmarkNextDaily(b *testing.B) {
	s, _ := schedule.Parse("30 2 * * *", "Europe/Berlin")
	cur := at(b, "2025-01-01T00:00:00Z")
	for b.Loop() {
		cur = s.Next(cur)
	}
}
