package litellm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/kafka"
	llm "github.com/proliferate/proliferate/internal/llmproxy/litellm"
	"github.com/proliferate/proliferate/internal/llmproxy/llmproxydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Collector defaults.
const (
	// DefaultLookback is where an organization without a cursor starts.
	DefaultLookback = 5 * time.Minute
	// DefaultLateWindow is how far before its cursor an organization's
	// logs are re-read to catch logs LiteLLM wrote late.
	DefaultLateWindow = 2 * time.Minute
	// DefaultConcurrency is how many organizations are collected at once.
	DefaultConcurrency = 5
	// produceBatch is how many events are produced (and the cursor
	// advanced) at a time.
	produceBatch = 500
	// maxPagesPerFetch bounds one fetch; a busier window is halved.
	maxPagesPerFetch = 50
	// SourceLiteLLM is LLMSpend.Source of collected events.
	SourceLiteLLM = "litellm"
)

// collectorLockKey is the Postgres advisory lock that keeps one collector
// active across replicas ("llmspend" in ASCII).
const collectorLockKey int64 = 0x6c6c6d7370656e64

// CollectorDeps are the Collector's dependencies.
type CollectorDeps struct {
	Client *llm.Client
	Pool   *pgxpool.Pool
	// Kafka is a producer client from the platform's client factory
	// (internal/kafka.NewClient).
	Kafka *kgo.Client
	Codec *schemas.Codec
	// Interval between cycles (LLM_SPEND_SYNC_INTERVAL, default 30 s).
	Interval time.Duration
	// BillingEnabled: collect only organizations with a billing state
	// (not unconfigured); false collects every organization (usage is
	// still recorded).
	BillingEnabled bool
	// Lookback is where an organization without a cursor starts
	// (default 5 min).
	Lookback time.Duration
	// LateWindow (default 2 min; negative disables) re-reads the window
	// before the cursor each cycle and produces logs not seen yet, so a
	// log LiteLLM writes late is not skipped. Logs seen by this process
	// are remembered; after a restart the window is produced again, which
	// the ledger's llm:{request_id} key makes harmless.
	LateWindow time.Duration
	// Concurrency bounds organizations collected at once (default 5).
	Concurrency int
	Logger      *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Collector collects LiteLLM spend logs into llm.spend.
//
// One collector is active across replicas: each cycle takes a session-level
// Postgres advisory lock (pg_try_advisory_lock) on a dedicated pooled
// connection and releases it at the end. A replica that cannot take it
// skips the cycle. Locking per cycle (not for the process lifetime) means a
// crashed or partitioned holder loses the lock with its connection and
// another replica takes over at its next tick, and no connection is pinned
// between cycles.
type Collector struct {
	d CollectorDeps

	mu   sync.Mutex
	seen map[string]map[string]time.Time // org → request id → start time
}

// CycleStats summarize one cycle.
type CycleStats struct {
	// Locked is false when another replica held the collector lock (the
	// cycle did nothing).
	Locked   bool
	Orgs     int
	Produced int
	// Failed counts organizations whose collection failed (retried next
	// cycle).
	Failed int
}

// NewCollector returns a Collector.
func NewCollector(d CollectorDeps) (*Collector, error) {
	if d.Client == nil || d.Pool == nil || d.Kafka == nil || d.Codec == nil {
		return nil, errors.New("litellm: collector needs a client, a pool, a Kafka client and a codec")
	}
	if d.Interval <= 0 {
		d.Interval = 30 * time.Second
	}
	if d.Lookback <= 0 {
		d.Lookback = DefaultLookback
	}
	switch {
	case d.LateWindow == 0:
		d.LateWindow = DefaultLateWindow
	case d.LateWindow < 0:
		d.LateWindow = 0
	}
	if d.Concurrency <= 0 {
		d.Concurrency = DefaultConcurrency
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Collector{d: d, seen: map[string]map[string]time.Time{}}, nil
}

// Run collects every Interval until ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.d.Interval)
	defer t.Stop()
	for {
		st, err := c.Cycle(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			c.d.Logger.ErrorContext(ctx, "LiteLLM spend collection failed", "err", err)
		case st.Produced > 0 || st.Failed > 0:
			c.d.Logger.InfoContext(ctx, "collected LiteLLM spend logs", "orgs", st.Orgs, "produced", st.Produced, "failed_orgs", st.Failed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Cycle does one pass over the organizations, if this replica holds the
// collector lock. One organization's failure never stops the others; it is
// counted in Failed and retried next cycle from its unmoved cursor.
func (c *Collector) Cycle(ctx context.Context) (CycleStats, error) {
	var st CycleStats
	_, release, locked, err := db.PassLock(ctx, c.d.Pool, collectorLockKey)
	if err != nil {
		return st, fmt.Errorf("litellm collector: %w", err)
	}
	if st.Locked = locked; !locked {
		return st, nil
	}
	defer release()

	orgs, err := c.orgs(ctx)
	if err != nil {
		return st, err
	}
	st.Orgs = len(orgs)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, c.d.Concurrency)
	)
	for _, org := range orgs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return st, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n, err := c.collectOrg(ctx, org)
			mu.Lock()
			defer mu.Unlock()
			st.Produced += n
			if err != nil {
				st.Failed++
				c.d.Logger.WarnContext(ctx, "LiteLLM spend collection failed for organization; retrying next cycle",
					"org_id", org, "produced", n, "err", err)
			}
		}()
	}
	wg.Wait()
	return st, nil
}

func (c *Collector) orgs(ctx context.Context) ([]string, error) {
	ids, err := orgsdb.New(c.d.Pool).MeteredOrgs(ctx, c.d.BillingEnabled)
	if err != nil {
		return nil, fmt.Errorf("litellm collector: list organizations: %w", err)
	}
	return ids, nil
}

// cursor is an organization's position: the last produced log's start time
// and request id (the tie-break between equal start times).
type cursor struct {
	at        time.Time
	requestID string
	exists    bool
}

// after reports whether (t, id) is after the cursor.
func (cu cursor) after(t time.Time, id string) bool {
	if c := t.Compare(cu.at); c != 0 {
		return c > 0
	}
	return id > cu.requestID
}

type entry struct {
	log llm.SpendLog
	at  time.Time
}

// collectOrg produces the organization's new logs and advances its cursor
// after each acknowledged batch. It returns how many events it produced.
func (c *Collector) collectOrg(ctx context.Context, org string) (int, error) {
	cu, err := c.readCursor(ctx, org)
	if err != nil {
		return 0, err
	}
	now := c.d.Now().UTC()
	if !cu.exists {
		cu.at = now.Add(-c.d.Lookback).Truncate(time.Microsecond)
	}
	from := cu.at.Add(-c.d.LateWindow)
	if !cu.exists {
		from = cu.at
	}
	// end_date is inclusive at second resolution; logs of the current
	// second are left for the next cycle, after the cursor.
	to := now.Truncate(time.Second).Add(-time.Second)
	logs, err := c.fetch(ctx, org, from.Truncate(time.Second), to)
	if err != nil {
		return 0, err
	}

	seen := c.seenOf(org)
	var fresh []entry
	for _, l := range logs {
		if l.RequestID == "" {
			c.d.Logger.WarnContext(ctx, "LiteLLM spend log without request id skipped", "org_id", org)
			continue
		}
		at, err := llm.ParseTime(l.StartTime)
		if err != nil {
			c.d.Logger.WarnContext(ctx, "LiteLLM spend log with a bad startTime skipped", "org_id", org, "request_id", l.RequestID, "err", err)
			continue
		}
		if at.Before(from) {
			continue
		}
		if !cu.after(at, l.RequestID) {
			if _, ok := seen[l.RequestID]; ok || !cu.exists || c.d.LateWindow == 0 {
				continue
			}
		}
		fresh = append(fresh, entry{log: l, at: at})
	}
	slices.SortFunc(fresh, func(a, b entry) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.log.RequestID, b.log.RequestID))
	})
	fresh = slices.CompactFunc(fresh, func(a, b entry) bool { return a.log.RequestID == b.log.RequestID })

	produced := 0
	for start := 0; start < len(fresh); start += produceBatch {
		batch := fresh[start:min(start+produceBatch, len(fresh))]
		recs := make([]*kgo.Record, 0, len(batch))
		for _, e := range batch {
			ev, ok := c.event(ctx, org, e)
			if !ok {
				continue
			}
			rec, err := kafka.EventRecord(c.d.Codec, topics.LLMSpend, org, ev)
			if err != nil {
				return produced, fmt.Errorf("litellm collector: organization %s: %w", org, err)
			}
			recs = append(recs, rec)
		}
		if len(recs) > 0 {
			if err := c.d.Kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return produced, fmt.Errorf("litellm collector: produce %d llm.spend events of organization %s: %w", len(recs), org, err)
			}
		}
		produced += len(recs)
		last := batch[len(batch)-1]
		if cu.after(last.at, last.log.RequestID) {
			cu = cursor{at: last.at, requestID: last.log.RequestID, exists: true}
		}
		if err := c.writeCursor(ctx, org, cu, len(recs)); err != nil {
			return produced, err
		}
		c.remember(org, batch, cu)
	}
	if len(fresh) == 0 && !cu.exists {
		// Anchor a new organization's window at its lookback start, so
		// a later gap between cycles loses nothing.
		if err := c.writeCursor(ctx, org, cu, 0); err != nil {
			return 0, err
		}
	}
	return produced, nil
}

// fetch reads every log of the organization in [from, to] (inclusive, second
// resolution). LiteLLM pages newest first, so the whole window is read
// before anything is produced; a window over maxPagesPerFetch pages is
// narrowed to its older half (the rest comes next cycle).
func (c *Collector) fetch(ctx context.Context, org string, from, to time.Time) ([]llm.SpendLog, error) {
	if to.Before(from) {
		return nil, nil
	}
	for {
		var out []llm.SpendLog
		first, err := c.d.Client.SpendLogs(ctx, llm.SpendLogsQuery{TeamID: org, Start: from, End: to, Page: 1, PageSize: llm.SpendLogsMaxPageSize})
		if err != nil {
			return nil, fmt.Errorf("litellm collector: organization %s: %w", org, err)
		}
		if first.TotalPages > maxPagesPerFetch && to.Sub(from) > 2*time.Second {
			to = from.Add(to.Sub(from) / 2).Truncate(time.Second)
			continue
		}
		out = append(out, first.Data...)
		for page := 2; page <= first.TotalPages; page++ {
			p, err := c.d.Client.SpendLogs(ctx, llm.SpendLogsQuery{TeamID: org, Start: from, End: to, Page: page, PageSize: llm.SpendLogsMaxPageSize})
			if err != nil {
				return nil, fmt.Errorf("litellm collector: organization %s: %w", org, err)
			}
			if len(p.Data) == 0 {
				break
			}
			out = append(out, p.Data...)
		}
		return out, nil
	}
}

// event maps a log to an llm.spend event; false for logs that bill nothing.
func (c *Collector) event(ctx context.Context, org string, e entry) (*schemas.Event, bool) {
	l := e.log
	cost := int64(math.Round(l.Spend * 1e6))
	if cost <= 0 {
		if l.TotalTokens > 0 || l.PromptTokens > 0 || l.CompletionTokens > 0 {
			c.d.Logger.WarnContext(ctx, "LiteLLM spend log has tokens but no spend (model missing from LiteLLM's price map?)",
				"org_id", org, "request_id", l.RequestID, "model", l.Model, "total_tokens", l.TotalTokens, "anomaly", true)
		}
		return nil, false
	}
	md := parseMetadata(l.Metadata)
	p := &schemas.LLMSpend{
		RequestID:        l.RequestID,
		SessionID:        sessionOf(l, md),
		Model:            l.Model,
		ModelGroup:       nonEmpty(l.ModelGroup),
		Provider:         nonEmpty(l.CustomLLMProvider),
		InputTokens:      l.PromptTokens,
		OutputTokens:     l.CompletionTokens,
		CacheReadTokens:  md.UsageObject.CacheReadInputTokens,
		CacheWriteTokens: md.UsageObject.CacheCreationInputTokens,
		TotalTokens:      l.TotalTokens,
		CostUSDMicros:    cost,
		StartedAt:        e.at.Truncate(time.Millisecond),
		EndedAt:          e.at.Truncate(time.Millisecond),
		Source:           SourceLiteLLM,
	}
	if p.TotalTokens == 0 {
		p.TotalTokens = p.InputTokens + p.OutputTokens
	}
	if end, err := llm.ParseTime(l.EndTime); err == nil && !end.Before(e.at) {
		p.EndedAt = end.Truncate(time.Millisecond)
	}
	return schemas.New(org, p), true
}

type logMetadata struct {
	KeyAlias    string `json:"user_api_key_alias"`
	KeyUserID   string `json:"user_api_key_user_id"`
	UsageObject struct {
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage_object"`
}

func parseMetadata(raw json.RawMessage) logMetadata {
	var md logMetadata
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &md) // best effort: metadata is free-form
	}
	return md
}

// sessionOf is the session a log belongs to. Our keys carry user_id =
// key_alias = session id, which LiteLLM reports as the log's "user" (and in
// metadata); end_user is the request body's "user" field, which OpenCode
// does not set, so it is only the last resort.
func sessionOf(l llm.SpendLog, md logMetadata) *string {
	for _, s := range []string{llm.Deref(l.User), md.KeyUserID, md.KeyAlias, llm.Deref(l.EndUser)} {
		if s != "" {
			return &s
		}
	}
	return nil
}

func nonEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}

func (c *Collector) readCursor(ctx context.Context, org string) (cursor, error) {
	var cu cursor
	r, err := llmproxydb.New(c.d.Pool).SpendCursor(ctx, org)
	if errors.Is(err, pgx.ErrNoRows) {
		return cursor{}, nil
	}
	if err != nil {
		return cursor{}, fmt.Errorf("litellm collector: read cursor of organization %s: %w", org, err)
	}
	cu.at = r.LastStartTime.UTC()
	cu.requestID = llm.Deref(r.LastRequestID)
	cu.exists = true
	return cu, nil
}

// writeCursor stores the cursor; it never moves an existing one backwards.
func (c *Collector) writeCursor(ctx context.Context, org string, cu cursor, n int) error {
	var id *string
	if cu.requestID != "" {
		id = &cu.requestID
	}
	err := llmproxydb.New(c.d.Pool).AdvanceSpendCursor(ctx, llmproxydb.AdvanceSpendCursorParams{
		OrgID: org, LastStartTime: cu.at, LastRequestID: id, Records: int32(n),
	})
	if err != nil {
		return fmt.Errorf("litellm collector: advance cursor of organization %s: %w", org, err)
	}
	return nil
}

func (c *Collector) seenOf(org string) map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.seen[org])
}

// remember records produced logs and forgets those that fell out of the
// late window.
func (c *Collector) remember(org string, batch []entry, cu cursor) {
	if c.d.LateWindow == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.seen[org]
	if m == nil {
		m = map[string]time.Time{}
		c.seen[org] = m
	}
	for _, e := range batch {
		m[e.log.RequestID] = e.at
	}
	horizon := cu.at.Add(-c.d.LateWindow)
	for id, at := range m {
		if at.Before(horizon) {
			delete(m, id)
		}
	}
}
