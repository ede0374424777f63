// Package poller is the polling role: every tick it finds the poll groups
// whose next_poll_at has come and polls each once for all of its triggers.
//
//   - One poll per group per interval across replicas: a replica takes the
//     group's Redis lock (SET NX PX with a random token, released by a
//     compare-and-delete script), then re-reads the group and polls only if
//     it is still due, so a replica that saw the group due before another
//     finished polling it does not poll again.
//   - The provider is called once per page; each page's events are fanned
//     out in memory to every enabled polling trigger of the group, in one
//     transaction per trigger (runs.Enqueue when the trigger's filters match
//     and its automation's LLM filter, asked through internal/triggers/llmgate
//     before the transaction, agrees; runs.RecordSkipped otherwise), and only
//     then is the page's cursor
//     stored on the group. A crash in between polls the page again and the
//     events' dedup keys make that a no-op.
//   - Failures (token, provider, rate limits) are recorded on the group
//     (consecutive_failures, last_error) and the next poll is put off:
//     Retry-After when the provider sent one, otherwise exponential backoff
//     from the group's interval, up to an hour.
//   - A group without enabled triggers is not polled; its cursor is cleared
//     so that polling resumes from the time it was last considered, not with
//     the backlog of its quiet period.
package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/llmgate"
	"github.com/proliferate/proliferate/internal/triggers/pollgroups/pollgroupsdb"
	"github.com/proliferate/proliferate/internal/triggers/providers"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
)

// Source fetches changes from one provider, a page at a time.
type Source interface {
	Poll(ctx context.Context, req PollRequest) (PollPage, error)
}

// PollRequest is one page request.
type PollRequest struct {
	Token string
	// Cursor is the group's stored cursor (nil on the first poll).
	Cursor json.RawMessage
	// Since is where a poll without a cursor starts: when the group was
	// created or last considered (never the provider's whole history).
	Since time.Time
	Now   time.Time
}

// PollPage is one page of a poll.
type PollPage struct {
	Events []runs.Event
	// Cursor is stored on the group once the page's events are recorded.
	Cursor json.RawMessage
	// More is true when the provider has further pages for this poll.
	More bool
	// Problems are items that could not be normalized (logged, skipped).
	Problems []string
}

// RateLimitedError is returned by a Source the provider rate-limited.
type RateLimitedError struct {
	Provider   string
	Status     int
	RetryAfter time.Duration // zero when the provider did not say
}

func (e *RateLimitedError) Error() string {
	s := fmt.Sprintf("%s: rate limited (HTTP %d)", e.Provider, e.Status)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf("; retry after %s", e.RetryAfter.Round(time.Second))
	}
	return s
}

// TokenSource resolves an integration's token (*integrations.Service).
type TokenSource interface {
	TokenFor(ctx context.Context, orgID, integrationID string, opts ...integrations.TokenOption) (integrations.Token, error)
}

// Deps are what the poller needs.
type Deps struct {
	Pool   *pgxpool.Pool
	Redis  *redis.Client
	Codec  *schemas.Codec
	Log    *slog.Logger
	Tokens TokenSource
	// Sources by provider (default: Linear at LinearAPIURL).
	Sources      map[string]Source
	LinearAPIURL string
	HTTPClient   *http.Client // default: 30 s timeout
	// Match decides whether a trigger fires for an event (default
	// providers.Matches).
	Match func(provider string, config map[string]any, ev runs.Event) (bool, string)
	// Tick is how often due groups are looked for (SCHEDULER_TICK).
	Tick time.Duration
	Now  func() time.Time
	// LockTTL bounds a poll (default 2 min); a poll is cancelled before its
	// lock expires.
	LockTTL time.Duration
	// MaxPages bounds the pages fetched in one poll (default 10); a longer
	// traversal continues at the next tick.
	MaxPages int
	Batch    int // due groups per pass (default 100)
	Workers  int // groups polled concurrently (default 4)
	// LLM asks automations' LLM filter and analysis prompts about matching
	// events before their runs are queued (nil: not asked).
	LLM *llmgate.Gate
}

// Poller polls due poll groups.
type Poller struct {
	d   Deps
	log *slog.Logger
}

// MaxBackoff caps the delay after failures.
const MaxBackoff = time.Hour

// New builds a poller.
func New(d Deps) *Poller {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.HTTPClient == nil {
		d.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if d.Sources == nil {
		d.Sources = map[string]Source{}
		if d.LinearAPIURL != "" {
			d.Sources[providers.Linear] = &Linear{URL: d.LinearAPIURL, Client: d.HTTPClient}
		}
	}
	if d.Match == nil {
		d.Match = providers.Matches
	}
	if d.Tick <= 0 {
		d.Tick = time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.LockTTL <= 0 {
		d.LockTTL = 2 * time.Minute
	}
	if d.MaxPages <= 0 {
		d.MaxPages = 10
	}
	if d.Batch <= 0 {
		d.Batch = 100
	}
	if d.Workers <= 0 {
		d.Workers = 4
	}
	return &Poller{d: d, log: d.Log.With("role", "poller")}
}

// Run polls due groups every tick until ctx ends (then returns nil).
func (p *Poller) Run(ctx context.Context) error {
	p.log.Info("poller started", "tick", p.d.Tick.String(), "providers", len(p.d.Sources))
	t := time.NewTicker(p.d.Tick)
	defer t.Stop()
	for {
		if _, err := p.RunOnce(ctx, p.d.Now()); err != nil && ctx.Err() == nil {
			p.log.Error("poll pass failed", "error", err)
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
	Polled   int // groups polled (successfully or not)
	Busy     int // groups another replica was polling or had just polled
	Failed   int // polls that failed (recorded on the group)
	Pages    int // provider pages fetched
	Events   int // events received
	Queued   int // runs queued
	Skipped  int // skipped trigger events recorded
	Disabled int // groups without enabled triggers, not polled
}

func (r *Result) add(o Result) {
	r.Polled += o.Polled
	r.Busy += o.Busy
	r.Failed += o.Failed
	r.Pages += o.Pages
	r.Events += o.Events
	r.Queued += o.Queued
	r.Skipped += o.Skipped
	r.Disabled += o.Disabled
}

// RunOnce polls every group due at now (up to Batch). Replicas may call it
// concurrently.
func (p *Poller) RunOnce(ctx context.Context, now time.Time) (Result, error) {
	ids, err := pollgroupsdb.New(p.d.Pool).DuePollGroups(ctx, pollgroupsdb.DuePollGroupsParams{Now: now, Max: int32(p.d.Batch)})
	if err != nil {
		return Result{}, fmt.Errorf("find due poll groups: %w", err)
	}
	var (
		mu    sync.Mutex
		total Result
		errs  []error
		wg    sync.WaitGroup
		queue = make(chan string)
	)
	for range min(p.d.Workers, max(len(ids), 1)) {
		wg.Go(func() {
			for id := range queue {
				res, err := p.PollGroup(ctx, id, now)
				mu.Lock()
				total.add(res)
				if err != nil {
					errs = append(errs, fmt.Errorf("poll group %s: %w", id, err))
				}
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		queue <- id
	}
	close(queue)
	wg.Wait()
	return total, errors.Join(errs...)
}

type group struct {
	id, orgID, provider string
	integrationID       *string
	interval            time.Duration
	cursor              json.RawMessage
	since               time.Time
	failures            int
}

type pollTrigger struct {
	id, automationID  string
	automationEnabled bool
	config            map[string]any
	// The automation's LLM prompts ("" when unset).
	filterPrompt, analysisPrompt string
}

// PollGroup polls one group if it is due at now and no other replica holds
// its lock. Errors are infrastructure errors (database, Redis); provider
// failures are recorded on the group and not returned.
func (p *Poller) PollGroup(ctx context.Context, groupID string, now time.Time) (Result, error) {
	var res Result
	token, ok, err := lock(ctx, p.d.Redis, groupID, p.d.LockTTL)
	if err != nil {
		return res, fmt.Errorf("take lock: %w", err)
	}
	if !ok {
		res.Busy++
		return res, nil
	}
	defer func() {
		if err := unlock(context.WithoutCancel(ctx), p.d.Redis, groupID, token); err != nil {
			p.log.Warn("could not release poll group lock; it expires on its own", "poll_group_id", groupID, "error", err)
		}
	}()
	// Stop before the lock expires.
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.d.LockTTL*4/5)
	defer cancel()

	g, due, err := p.loadGroup(ctx, groupID, now)
	if err != nil || !due {
		if err == nil {
			res.Busy++
		}
		return res, err
	}
	log := p.log.With("poll_group_id", g.id, "org_id", g.orgID, "provider", g.provider)
	triggers, err := p.loadTriggers(ctx, g.id)
	if err != nil {
		return res, err
	}
	if len(triggers) == 0 {
		res.Disabled++
		return res, pollgroupsdb.New(p.d.Pool).IdlePollGroup(ctx, pollgroupsdb.IdlePollGroupParams{ID: g.id, Now: now})
	}
	res.Polled++
	fail := func(cause error) (Result, error) {
		res.Failed++
		return res, p.recordFailure(ctx, g, now, cause, log)
	}
	src := p.d.Sources[g.provider]
	if src == nil {
		return fail(fmt.Errorf("no poller for provider %q", g.provider))
	}
	if g.integrationID == nil {
		return fail(errors.New("poll group has no integration to poll with"))
	}
	tok, err := p.d.Tokens.TokenFor(ctx, g.orgID, *g.integrationID)
	if err != nil {
		return fail(fmt.Errorf("integration token: %w", err))
	}
	cursor, more := g.cursor, false
	for range p.d.MaxPages {
		page, err := src.Poll(ctx, PollRequest{Token: tok.Value, Cursor: cursor, Since: g.since, Now: now})
		if err != nil {
			if parent.Err() != nil { // shutting down: not the provider's fault
				return res, parent.Err()
			}
			if ctx.Err() != nil {
				err = fmt.Errorf("poll did not finish within %s: %w", p.d.LockTTL*4/5, err)
			}
			return fail(err)
		}
		res.Pages++
		res.Events += len(page.Events)
		for _, pr := range page.Problems {
			log.Warn("poll item could not be normalized; skipped", "problem", pr)
		}
		for _, t := range triggers {
			q, s, err := p.fanOut(ctx, g, t, page.Events)
			if err != nil {
				return res, err
			}
			res.Queued += q
			res.Skipped += s
		}
		// The page's runs are committed: now the cursor may move.
		if err := pollgroupsdb.New(p.d.Pool).StorePollCursor(ctx, pollgroupsdb.StorePollCursorParams{ID: g.id, Cursor: []byte(page.Cursor)}); err != nil {
			return res, fmt.Errorf("store cursor: %w", err)
		}
		cursor, more = page.Cursor, page.More
		if !more {
			break
		}
	}
	next := now.Add(g.interval)
	if more { // traversal not finished: continue at the next tick
		next = now
	}
	if err := pollgroupsdb.New(p.d.Pool).PollSucceeded(ctx, pollgroupsdb.PollSucceededParams{ID: g.id, PolledAt: now, NextPollAt: next}); err != nil {
		return res, fmt.Errorf("schedule next poll: %w", err)
	}
	log.Info("poll group polled", "pages", res.Pages, "events", res.Events, "queued", res.Queued, "skipped", res.Skipped, "triggers", len(triggers))
	return res, nil
}

// loadGroup re-reads the group under the lock; due is false when it was
// polled (or disabled) since it was found due.
func (p *Poller) loadGroup(ctx context.Context, id string, now time.Time) (group, bool, error) {
	r, err := pollgroupsdb.New(p.d.Pool).DuePollGroup(ctx, pollgroupsdb.DuePollGroupParams{ID: id, Now: now})
	g := group{id: r.ID, orgID: r.OrgID, provider: r.Provider, integrationID: r.IntegrationID, cursor: r.Cursor, failures: int(r.ConsecutiveFailures)}
	interval, lastPolled, created := int(r.IntervalSeconds), r.LastPolledAt, r.CreatedAt
	if errors.Is(err, pgx.ErrNoRows) {
		return g, false, nil
	}
	if err != nil {
		return g, false, fmt.Errorf("load poll group: %w", err)
	}
	g.interval = time.Duration(interval) * time.Second
	g.since = created
	if lastPolled != nil {
		g.since = *lastPolled
	}
	return g, true, nil
}

// loadTriggers returns the group's enabled polling triggers.
func (p *Poller) loadTriggers(ctx context.Context, groupID string) ([]pollTrigger, error) {
	rows, err := triggersdb.New(p.d.Pool).PollGroupTriggers(ctx, groupID)
	if err != nil {
		return nil, fmt.Errorf("load triggers: %w", err)
	}
	out := make([]pollTrigger, len(rows))
	for i, r := range rows {
		t := pollTrigger{id: r.ID, automationID: r.AutomationID, automationEnabled: r.AutomationEnabled,
			filterPrompt: r.LLMFilterPrompt, analysisPrompt: r.LLMAnalysisPrompt}
		if err := json.Unmarshal(r.Config, &t.config); err != nil || t.config == nil {
			t.config = map[string]any{}
		}
		out[i] = t
	}
	return out, nil
}

// fanOut records a page's events for one trigger in one transaction.
func (p *Poller) fanOut(ctx context.Context, g group, t pollTrigger, events []runs.Event) (queued, skipped int, err error) {
	if len(events) == 0 {
		return 0, 0, nil
	}
	src := runs.Source{OrgID: g.orgID, TriggerID: t.id, AutomationID: t.automationID, TriggerType: "polling",
		IntegrationID: deref(g.integrationID), PollGroupID: g.id}
	// The model is asked outside the transaction (it may take seconds);
	// its answers are kept, so a poll cut short asks nothing twice.
	llmSkips := make([]*llmgate.Skip, len(events))
	if t.automationEnabled && (t.filterPrompt != "" || t.analysisPrompt != "") {
		lt := llmgate.Trigger{ID: t.id, OrgID: g.orgID, FilterPrompt: t.filterPrompt, AnalysisPrompt: t.analysisPrompt}
		for i, ev := range events {
			if ok, _ := p.d.Match(g.provider, t.config, ev); ok {
				if llmSkips[i], err = p.d.LLM.Ask(ctx, lt, ev); err != nil {
					return 0, 0, fmt.Errorf("ask the model about event %s for trigger %s: %w", ev.DedupKey, t.id, err)
				}
			}
		}
	}
	err = pgx.BeginFunc(ctx, p.d.Pool, func(tx pgx.Tx) error {
		queued, skipped = 0, 0
		for i, ev := range events {
			var out runs.Outcome
			var err error
			ok, reason := false, ""
			if t.automationEnabled {
				ok, reason = p.d.Match(g.provider, t.config, ev)
			}
			switch {
			case !t.automationEnabled:
				out, err = runs.RecordSkipped(ctx, tx, p.d.Codec, src, ev, runs.SkipAutomationDisabled)
			case !ok:
				out, err = runs.RecordSkipped(ctx, tx, p.d.Codec, src, ev, runs.SkipFilterMismatch)
			case llmSkips[i] != nil:
				out, err = runs.RecordSkipped(ctx, tx, p.d.Codec, src, llmSkips[i].Apply(ev), llmSkips[i].Reason)
			default:
				out, err = runs.Enqueue(ctx, tx, p.d.Codec, src, ev)
			}
			if err != nil {
				return err
			}
			switch {
			case out.Duplicate:
			case out.RunID != "":
				queued++
			default:
				skipped++
				if reason != "" {
					p.log.Debug("polled event did not match trigger", "trigger_id", t.id, "dedup_key", ev.DedupKey, "reason", reason)
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("record events for trigger %s: %w", t.id, err)
	}
	return queued, skipped, nil
}

// Backoff is the delay before the next poll after n consecutive failures:
// the provider's Retry-After when it sent one, otherwise the interval
// doubled per failure; at most MaxBackoff (or the interval if longer).
func Backoff(interval time.Duration, n int, retryAfter time.Duration) time.Duration {
	ceiling := max(MaxBackoff, interval)
	if retryAfter > 0 {
		return min(max(retryAfter, time.Second), ceiling)
	}
	d := interval
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

func (p *Poller) recordFailure(ctx context.Context, g group, now time.Time, cause error, log *slog.Logger) error {
	n := g.failures + 1
	var rl *RateLimitedError
	var retry time.Duration
	if errors.As(cause, &rl) {
		retry = rl.RetryAfter
	}
	delay := Backoff(g.interval, n, retry)
	msg := printable(cause.Error(), 500)
	log.Warn("poll failed; backing off", "error", msg, "consecutive_failures", n, "retry_in", delay.String())
	err := pollgroupsdb.New(p.d.Pool).PollFailed(context.WithoutCancel(ctx), pollgroupsdb.PollFailedParams{ID: g.id, Failures: int32(n),
		LastError: msg, NextPollAt: now.Add(delay)})
	if err != nil {
		return fmt.Errorf("record poll failure: %w", err)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
