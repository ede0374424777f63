package analytics

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/proliferate/proliferate/internal/analytics/analyticsdb"
)

// ToolStat is one tool's calls over a range of days.
type ToolStat struct {
	Tool     string `json:"tool"`
	Calls    int64  `json:"calls"`
	Failures int64  `json:"failures"`
	// P50MS and P95MS are duration percentiles in milliseconds, from the
	// rollups' histogram (within ±7.5 %); 0 when no call had a duration.
	P50MS int64 `json:"p50_ms"`
	P95MS int64 `json:"p95_ms"`
}

// Tools is an organization's tool calls per tool over the UTC days [from,
// to], most called first.
func Tools(ctx context.Context, db DB, orgID string, from, to time.Time) ([]ToolStat, error) {
	q := analyticsdb.New(db)
	f, t := pgDate(from), pgDate(to)
	totals, err := q.ToolTotals(ctx, analyticsdb.ToolTotalsParams{OrgID: orgID, FromDay: f, ToDay: t})
	if err != nil {
		return nil, fmt.Errorf("analytics: tool totals: %w", err)
	}
	buckets, err := q.ToolDurationBuckets(ctx, analyticsdb.ToolDurationBucketsParams{OrgID: orgID, FromDay: f, ToDay: t})
	if err != nil {
		return nil, fmt.Errorf("analytics: tool durations: %w", err)
	}
	hist := map[string]map[int]int64{}
	for _, b := range buckets {
		if hist[b.ToolName] == nil {
			hist[b.ToolName] = map[int]int64{}
		}
		hist[b.ToolName][int(b.Bucket)] += b.N
	}
	out := make([]ToolStat, 0, len(totals))
	for _, r := range totals {
		out = append(out, ToolStat{Tool: r.ToolName, Calls: r.Calls, Failures: r.Failures,
			P50MS: Percentile(hist[r.ToolName], 0.50), P95MS: Percentile(hist[r.ToolName], 0.95)})
	}
	return out, nil
}

// Usage groupings.
const (
	ByAutomation = "automation"
	ByPerson     = "person"
)

// UsageDay is one day's usage of one automation or person.
type UsageDay struct {
	Day string `json:"day" doc:"UTC day, YYYY-MM-DD"`
	// Key is the automation id or the user id; "" for sessions of no
	// automation, or that no person created.
	Key           string `json:"key"`
	Messages      int64  `json:"messages"`
	ActiveSeconds int64  `json:"active_seconds"`
	PRs           int64  `json:"prs"`
	CreditsMicros int64  `json:"credits_micros" doc:"credits in millionths"`
}

// Usage is an organization's usage per UTC day in [from, to] and
// automation or person (by), in day order.
func Usage(ctx context.Context, db DB, orgID string, from, to time.Time, by string) ([]UsageDay, error) {
	if by != ByAutomation && by != ByPerson {
		return nil, fmt.Errorf("analytics: unknown grouping %q", by)
	}
	rows, err := analyticsdb.New(db).UsageByKey(ctx, analyticsdb.UsageByKeyParams{OrgID: orgID, FromDay: pgDate(from), ToDay: pgDate(to), By: by})
	if err != nil {
		return nil, fmt.Errorf("analytics: usage by %s: %w", by, err)
	}
	out := make([]UsageDay, 0, len(rows))
	for _, r := range rows {
		out = append(out, UsageDay{Day: r.Day.Time.Format(time.DateOnly), Key: r.Key, Messages: r.Messages,
			ActiveSeconds: r.ActiveSeconds, PRs: r.Prs, CreditsMicros: r.CreditsMicros})
	}
	return out, nil
}

// SessionCall is one tool call of a session, as its best source reports it.
type SessionCall struct {
	ToolCallID string     `json:"tool_call_id"`
	Source     string     `json:"source"`
	Tool       string     `json:"tool"`
	Status     string     `json:"status"`
	DurationMS *int64     `json:"duration_ms"`
	Cached     bool       `json:"cached"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// SessionCalls lists a session's tool calls.
func SessionCalls(ctx context.Context, db DB, orgID, sessionID string) ([]SessionCall, error) {
	rows, err := analyticsdb.New(db).SessionToolCalls(ctx, analyticsdb.SessionToolCallsParams{OrgID: orgID, SessionID: sessionID})
	if err != nil {
		return nil, fmt.Errorf("analytics: session tool calls: %w", err)
	}
	out := make([]SessionCall, 0, len(rows))
	for _, r := range rows {
		out = append(out, SessionCall{ToolCallID: r.ToolCallID, Source: r.Source, Tool: r.ToolName, Status: r.Status,
			DurationMS: r.DurationMs, Cached: r.Cached, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt})
	}
	return out, nil
}

// SessionUsage is a session's usage over all days.
type SessionUsage struct {
	Messages         int64 `json:"messages"`
	ActiveSeconds    int64 `json:"active_seconds"`
	PRs              int64 `json:"prs"`
	CreditsMicros    int64 `json:"credits_micros" doc:"credits in millionths"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// SessionTotals is a session's usage (zeros when none was recorded).
func SessionTotals(ctx context.Context, db DB, orgID, sessionID string) (SessionUsage, error) {
	r, err := analyticsdb.New(db).SessionUsageTotals(ctx, analyticsdb.SessionUsageTotalsParams{OrgID: orgID, SessionID: sessionID})
	if err != nil {
		return SessionUsage{}, fmt.Errorf("analytics: session usage: %w", err)
	}
	return SessionUsage{Messages: r.Messages, ActiveSeconds: r.ActiveSeconds, PRs: r.Prs, CreditsMicros: r.CreditsMicros,
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, CacheReadTokens: r.CacheReadTokens,
		CacheWriteTokens: r.CacheWriteTokens}, nil
}

func pgDate(t time.Time) pgtype.Date {
	y, m, d := t.UTC().Date()
	return pgtype.Date{Time: time.Date(y, m, d, 0, 0, 0, 0, time.UTC), Valid: true}
}
