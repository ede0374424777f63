// Package analytics owns the tool telemetry and usage analytics tables
// (analytics_*): the tool-materializer group applies tool calls and usage
// deltas to them (ApplyToolCalls, ApplyUsage), and the analytics API reads
// their per-organization, per-day rollups (Tools, Usage).
//
// Tool calls: one row per call and source (tools.calls' executed_by,
// 'gateway' or 'sandbox', or 'transcript' for the finished tool calls of
// sessions.transcript). A source's first terminal state wins. The rollups
// count each call once, by the row of its highest-ranked source (gateway,
// sandbox, transcript), in the UTC day it ended: calls, failures (any end
// but completed) and a fixed log-scale duration histogram (Bucket) whose
// counts merge across days, so p50/p95 over any range come from the rollup
// within the histogram's resolution (±7.5 %). Rows are locked per session
// before they are read, so a call reported by two topics is counted once
// whatever order the batches apply in, and replaying the topics yields the
// same rows.
//
// Usage: messages, active seconds and pull requests per session and day
// (sessions.events telemetry deltas), credits (billing.usage), LLM tokens
// (llm.spend: input, output, cache read, cache write), and whom a
// session counts for (its automation and its creator, from
// sessions.events). Each delta is added once: its key (the event id, or
// for billing.usage the idempotency key, for llm.spend the request id) is claimed in
// analytics_applied_events in the same transaction.
package analytics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/proliferate/proliferate/internal/analytics/analyticsdb"
)

// Sources of a tool call row, best first.
const (
	SourceGateway    = "gateway"
	SourceSandbox    = "sandbox"
	SourceTranscript = "transcript"
)

func rank(source string) int {
	switch source {
	case SourceGateway:
		return 0
	case SourceSandbox:
		return 1
	}
	return 2
}

// Terminal reports whether a tool call status is an end (anything but
// started, pending or running).
func Terminal(status string) bool {
	switch status {
	case "started", "pending", "running", "":
		return false
	}
	return true
}

// Histogram: bucket 0 holds durations under 1 ms; bucket b ≥ 1 holds
// [ratio^(b-1), ratio^b) ms; the last bucket holds everything longer.
const (
	Buckets = 120
	ratio   = 1.15
)

// Bucket is the histogram bucket of a duration in milliseconds.
func Bucket(ms int64) int {
	if ms < 1 {
		return 0
	}
	b := 1 + int(math.Floor(math.Log(float64(ms))/math.Log(ratio)))
	return min(b, Buckets-1)
}

// bucketValue is the duration a bucket stands for: the geometric middle of
// its bounds.
func bucketValue(b int) int64 {
	if b <= 0 {
		return 0
	}
	return int64(math.Round(math.Pow(ratio, float64(b)-0.5)))
}

// Percentile is the q-quantile (0 < q ≤ 1) of a histogram given as bucket →
// count; 0 for an empty one.
func Percentile(h map[int]int64, q float64) int64 {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(total)))
	var seen int64
	for b := range Buckets {
		seen += h[b]
		if seen >= want && seen > 0 {
			return bucketValue(b)
		}
	}
	return bucketValue(Buckets - 1)
}

// ToolCall is one source's state of one tool call.
type ToolCall struct {
	EventID    string
	OrgID      string
	SessionID  string
	ToolCallID string
	Source     string
	ToolName   string
	Status     string
	DurationMS *int64
	Cached     bool
	StartedAt  *time.Time
	// FinishedAt is when the call ended (the terminal record's time); its
	// UTC day is the day the rollups count it in.
	FinishedAt *time.Time
}

// Validate reports why c cannot be applied.
func (c ToolCall) Validate() error {
	switch {
	case uuid.Validate(c.EventID) != nil, uuid.Validate(c.OrgID) != nil, uuid.Validate(c.SessionID) != nil:
		return errors.New("tool call: event, organization and session ids must be UUIDs")
	case c.ToolCallID == "" || c.ToolName == "":
		return errors.New("tool call: tool call id and tool name are required")
	case c.Source != SourceGateway && c.Source != SourceSandbox && c.Source != SourceTranscript:
		return fmt.Errorf("tool call: unknown source %q", c.Source)
	case Terminal(c.Status) && c.FinishedAt == nil:
		return errors.New("tool call: an ended call needs its end time")
	}
	return nil
}

// DB is a transaction (or pool) the queries run on.
type DB = analyticsdb.DBTX

type callKey struct{ session, call string }

// contribution is what one call adds to the rollups.
type contribution struct {
	ok     bool
	org    string
	day    string // YYYY-MM-DD
	tool   string
	failed bool
	bucket int // -1: no duration
}

func counted(rows map[string]ToolCall) contribution {
	best, found := ToolCall{}, false
	for _, r := range rows {
		if Terminal(r.Status) && (!found || rank(r.Source) < rank(best.Source)) {
			best, found = r, true
		}
	}
	if !found {
		return contribution{}
	}
	c := contribution{ok: true, org: best.OrgID, day: best.FinishedAt.UTC().Format(time.DateOnly), tool: best.ToolName,
		failed: best.Status != "completed", bucket: -1}
	if best.DurationMS != nil {
		c.bucket = Bucket(*best.DurationMS)
	}
	return c
}

type dayKey struct{ org, day, tool string }
type bucketKey struct {
	dayKey
	bucket int
}

// ApplyToolCalls applies tool call states in order, inside tx (it locks
// their sessions until tx ends) and adds the change of what each call
// contributes to the rollups.
func ApplyToolCalls(ctx context.Context, tx DB, calls []ToolCall) error {
	if len(calls) == 0 {
		return nil
	}
	q := analyticsdb.New(tx)
	var sessions []string
	var keys []callKey
	seenKey := map[callKey]bool{}
	for _, c := range calls {
		k := callKey{c.SessionID, c.ToolCallID}
		if !seenKey[k] {
			seenKey[k] = true
			keys = append(keys, k)
			sessions = append(sessions, c.SessionID)
		}
	}
	if err := q.LockSessions(ctx, sessions); err != nil {
		return fmt.Errorf("analytics: lock sessions: %w", err)
	}
	p := analyticsdb.ToolCallsOfParams{}
	for _, k := range keys {
		p.SessionIds = append(p.SessionIds, k.session)
		p.CallIds = append(p.CallIds, k.call)
	}
	existing, err := q.ToolCallsOf(ctx, p)
	if err != nil {
		return fmt.Errorf("analytics: read tool calls: %w", err)
	}
	state := map[callKey]map[string]ToolCall{}
	for _, k := range keys {
		state[k] = map[string]ToolCall{}
	}
	for _, r := range existing {
		state[callKey{r.SessionID, r.ToolCallID}][r.Source] = ToolCall{EventID: r.EventID, OrgID: r.OrgID, SessionID: r.SessionID,
			ToolCallID: r.ToolCallID, Source: r.Source, ToolName: r.ToolName, Status: r.Status, DurationMS: r.DurationMs,
			Cached: r.Cached, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
	}
	before := map[callKey]contribution{}
	for _, k := range keys {
		before[k] = counted(state[k])
	}
	type rowKey struct {
		callKey
		source string
	}
	changed := map[rowKey]bool{}
	var order []rowKey
	for _, c := range calls {
		k := callKey{c.SessionID, c.ToolCallID}
		cur, ok := state[k][c.Source]
		// A source's first terminal state wins; a start after a start
		// (a take-over) keeps the first.
		if ok && (Terminal(cur.Status) || !Terminal(c.Status)) {
			continue
		}
		if ok && c.StartedAt == nil {
			c.StartedAt = cur.StartedAt
		}
		state[k][c.Source] = c
		rk := rowKey{k, c.Source}
		if !changed[rk] {
			changed[rk] = true
			order = append(order, rk)
		}
	}
	if len(order) == 0 {
		return nil
	}
	put := analyticsdb.PutToolCallsParams{}
	for _, rk := range order {
		r := state[rk.callKey][rk.source]
		dur := int64(-1)
		if r.DurationMS != nil {
			dur = max(*r.DurationMS, 0)
		}
		put.SessionIds = append(put.SessionIds, r.SessionID)
		put.CallIds = append(put.CallIds, r.ToolCallID)
		put.Sources = append(put.Sources, r.Source)
		put.OrgIds = append(put.OrgIds, r.OrgID)
		put.ToolNames = append(put.ToolNames, r.ToolName)
		put.Statuses = append(put.Statuses, r.Status)
		put.DurationsMs = append(put.DurationsMs, dur)
		put.Cached = append(put.Cached, r.Cached)
		put.StartedAt = append(put.StartedAt, timeOrEpoch(r.StartedAt))
		put.FinishedAt = append(put.FinishedAt, timeOrEpoch(r.FinishedAt))
		put.EventIds = append(put.EventIds, r.EventID)
	}
	if err := q.PutToolCalls(ctx, put); err != nil {
		return fmt.Errorf("analytics: write tool calls: %w", err)
	}
	daily := map[dayKey][2]int64{}
	hist := map[bucketKey]int64{}
	apply := func(c contribution, sign int64) {
		if !c.ok {
			return
		}
		dk := dayKey{c.org, c.day, c.tool}
		v := daily[dk]
		v[0] += sign
		if c.failed {
			v[1] += sign
		}
		daily[dk] = v
		if c.bucket >= 0 {
			hist[bucketKey{dk, c.bucket}] += sign
		}
	}
	for _, k := range keys {
		after := counted(state[k])
		if after != before[k] {
			apply(before[k], -1)
			apply(after, 1)
		}
	}
	return addRollups(ctx, q, daily, hist)
}

func addRollups(ctx context.Context, q *analyticsdb.Queries, daily map[dayKey][2]int64, hist map[bucketKey]int64) error {
	dks := make([]dayKey, 0, len(daily))
	for k, v := range daily {
		if v != [2]int64{} {
			dks = append(dks, k)
		}
	}
	slices.SortFunc(dks, cmpDay)
	if len(dks) > 0 {
		p := analyticsdb.AddToolDailyParams{}
		for _, k := range dks {
			d, err := day(k.day)
			if err != nil {
				return err
			}
			p.OrgIds, p.Days, p.ToolNames = append(p.OrgIds, k.org), append(p.Days, d), append(p.ToolNames, k.tool)
			p.Calls, p.Failures = append(p.Calls, daily[k][0]), append(p.Failures, daily[k][1])
		}
		if err := q.AddToolDaily(ctx, p); err != nil {
			return fmt.Errorf("analytics: add tool rollups: %w", err)
		}
	}
	bks := make([]bucketKey, 0, len(hist))
	for k, n := range hist {
		if n != 0 {
			bks = append(bks, k)
		}
	}
	slices.SortFunc(bks, func(a, b bucketKey) int {
		if c := cmpDay(a.dayKey, b.dayKey); c != 0 {
			return c
		}
		return a.bucket - b.bucket
	})
	if len(bks) > 0 {
		p := analyticsdb.AddToolDurationsParams{}
		for _, k := range bks {
			d, err := day(k.day)
			if err != nil {
				return err
			}
			p.OrgIds, p.Days, p.ToolNames = append(p.OrgIds, k.org), append(p.Days, d), append(p.ToolNames, k.tool)
			p.Buckets, p.Counts = append(p.Buckets, int16(k.bucket)), append(p.Counts, hist[k])
		}
		if err := q.AddToolDurations(ctx, p); err != nil {
			return fmt.Errorf("analytics: add tool durations: %w", err)
		}
	}
	// A call that moved (a better source's report came after another's)
	// may leave rows at zero: drop them.
	shrunk := map[dayKey]bool{}
	for k, v := range daily {
		if v[0] < 0 || v[1] < 0 {
			shrunk[k] = true
		}
	}
	for k, n := range hist {
		if n < 0 {
			shrunk[k.dayKey] = true
		}
	}
	if len(shrunk) == 0 {
		return nil
	}
	sks := make([]dayKey, 0, len(shrunk))
	for k := range shrunk {
		sks = append(sks, k)
	}
	slices.SortFunc(sks, cmpDay)
	p := analyticsdb.DropEmptyToolRollupsParams{}
	for _, k := range sks {
		d, err := day(k.day)
		if err != nil {
			return err
		}
		p.OrgIds, p.Days, p.ToolNames = append(p.OrgIds, k.org), append(p.Days, d), append(p.ToolNames, k.tool)
	}
	if err := q.DropEmptyToolRollups(ctx, p); err != nil {
		return fmt.Errorf("analytics: drop empty tool rollups: %w", err)
	}
	return nil
}

func cmpDay(a, b dayKey) int {
	if c := strings.Compare(a.org, b.org); c != 0 {
		return c
	}
	if c := strings.Compare(a.day, b.day); c != 0 {
		return c
	}
	return strings.Compare(a.tool, b.tool)
}

func day(s string) (pgtype.Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return pgtype.Date{}, err
	}
	return pgtype.Date{Time: t, Valid: true}, nil
}

func timeOrEpoch(t *time.Time) time.Time {
	if t == nil {
		return time.Unix(0, 0).UTC()
	}
	return *t
}

// NoSession is the session usage without a session counts under.
const NoSession = "00000000-0000-0000-0000-000000000000"

// Session says whom a session counts for.
type Session struct {
	SessionID    string
	OrgID        string
	AutomationID string // "" unknown
	UserID       string // "" unknown
}

// UsageDelta is usage to add once, under Key.
type UsageDelta struct {
	// Key is a UUID: the event id, or a UUID derived from an idempotency
	// key (KeyOf).
	Key           string
	OrgID         string
	SessionID     string // NoSession when none
	At            time.Time
	Messages      int64
	ActiveSeconds int64
	PRs           int64
	CreditsMicros int64
	// LLM tokens (llm.spend).
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
}

var keyNamespace = uuid.MustParse("8a4c1f0e-5d7b-4e21-9c3a-1b2d3e4f5a6b")

// KeyOf is the delta key of an idempotency key.
func KeyOf(idempotencyKey string) string {
	return uuid.NewSHA1(keyNamespace, []byte(idempotencyKey)).String()
}

// ApplyUsage records sessions and adds every delta whose key is new, inside
// tx.
func ApplyUsage(ctx context.Context, tx DB, sessions []Session, deltas []UsageDelta) error {
	q := analyticsdb.New(tx)
	if len(sessions) > 0 {
		// One row per session in a statement (ON CONFLICT cannot touch a
		// row twice): merge the batch's values first.
		merged := map[string]*Session{}
		var order []string
		for _, s := range sessions {
			m := merged[s.SessionID]
			if m == nil {
				c := s
				merged[s.SessionID] = &c
				order = append(order, s.SessionID)
				continue
			}
			if m.AutomationID == "" {
				m.AutomationID = s.AutomationID
			}
			if m.UserID == "" {
				m.UserID = s.UserID
			}
		}
		slices.Sort(order)
		p := analyticsdb.PutSessionsParams{}
		for _, id := range order {
			s := merged[id]
			p.SessionIds, p.OrgIds = append(p.SessionIds, s.SessionID), append(p.OrgIds, s.OrgID)
			p.AutomationIds, p.UserIds = append(p.AutomationIds, s.AutomationID), append(p.UserIds, s.UserID)
		}
		if err := q.PutSessions(ctx, p); err != nil {
			return fmt.Errorf("analytics: record sessions: %w", err)
		}
	}
	if len(deltas) == 0 {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	for _, d := range deltas {
		if !seen[d.Key] {
			seen[d.Key] = true
			keys = append(keys, d.Key)
		}
	}
	fresh, err := q.ClaimEvents(ctx, keys)
	if err != nil {
		return fmt.Errorf("analytics: claim usage keys: %w", err)
	}
	isFresh := map[string]bool{}
	for _, k := range fresh {
		isFresh[k] = true
	}
	type usageKey struct{ org, day, session string }
	sums := map[usageKey][8]int64{}
	for _, d := range deltas {
		if !isFresh[d.Key] {
			continue
		}
		isFresh[d.Key] = false // a key twice in the batch counts once
		k := usageKey{d.OrgID, d.At.UTC().Format(time.DateOnly), d.SessionID}
		v := sums[k]
		v[0] += d.Messages
		v[1] += d.ActiveSeconds
		v[2] += d.PRs
		v[3] += d.CreditsMicros
		v[4] += d.InputTokens
		v[5] += d.OutputTokens
		v[6] += d.CacheReadTokens
		v[7] += d.CacheWriteTokens
		sums[k] = v
	}
	if len(sums) == 0 {
		return nil
	}
	uks := make([]usageKey, 0, len(sums))
	for k := range sums {
		uks = append(uks, k)
	}
	slices.SortFunc(uks, func(a, b usageKey) int {
		return strings.Compare(a.org+a.day+a.session, b.org+b.day+b.session)
	})
	p := analyticsdb.AddSessionUsageParams{}
	for _, k := range uks {
		d, err := day(k.day)
		if err != nil {
			return err
		}
		v := sums[k]
		p.OrgIds, p.Days, p.SessionIds = append(p.OrgIds, k.org), append(p.Days, d), append(p.SessionIds, k.session)
		p.Messages, p.ActiveSeconds, p.Prs, p.CreditsMicros = append(p.Messages, v[0]), append(p.ActiveSeconds, v[1]), append(p.Prs, v[2]), append(p.CreditsMicros, v[3])
		p.InputTokens, p.OutputTokens = append(p.InputTokens, v[4]), append(p.OutputTokens, v[5])
		p.CacheReadTokens, p.CacheWriteTokens = append(p.CacheReadTokens, v[6]), append(p.CacheWriteTokens, v[7])
	}
	if err := q.AddSessionUsage(ctx, p); err != nil {
		return fmt.Errorf("analytics: add usage: %w", err)
	}
	return nil
}
