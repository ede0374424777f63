// Package toolmaterializer is the tool-materializer consumer group: it
// builds the organization's tool telemetry and usage analytics in Postgres
// (internal/analytics) from five topics:
//
//   - tools.calls: the calls the gateway executed (executed_by gateway) or
//     observed (sandbox), from start to end;
//   - sessions.transcript: the finished tool calls of every session (the
//     agent's own tools included); the group reads only the tool name,
//     status, duration and time of tool_call entries, never their content;
//   - sessions.events: whom a session counts for (its automation, its
//     creator) and its telemetry deltas (messages, active seconds, new pull
//     requests);
//   - billing.usage: credits per session;
//   - llm.spend: LLM tokens per session (input, output, cache read, cache
//     write), counted once per request id.
//
// Design:
//
//   - Batch mode: the runner hands over up to MaxBatch records of one
//     partition in offset order; the handler applies them in one
//     transaction (a few statements whatever the batch size).
//   - Idempotent: a tool call row per (session, call, source) keeps its
//     source's first terminal state, and the rollups change only by the
//     difference of what a call counts for before and after (analytics
//     package doc); usage deltas are added once per event id or
//     idempotency key. Redelivery and replay change nothing.
//   - A record that can never apply (not decodable, ids that are not UUIDs,
//     an unknown executed_by) is reported through consumers.FailedRecords
//     as permanent and dead-lettered while the rest of the batch applies. A
//     database error fails the batch; the runner retries its records one at
//     a time.
package toolmaterializer

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/analytics"
	"github.com/proliferate/proliferate/schemas"
)

// Deps configure the handler.
type Deps struct {
	Pool *pgxpool.Pool
}

// BatchHandler applies batches of the group's records (the runner must
// decode them: consumers.Config.Codec).
func BatchHandler(d Deps) consumers.BatchHandler {
	return func(ctx context.Context, msgs []*consumers.Message) error {
		failed := consumers.FailedRecords{}
		var calls []analytics.ToolCall
		var sessions []analytics.Session
		var deltas []analytics.UsageDelta
		for _, m := range msgs {
			if m.Event == nil {
				failed[m] = consumers.Permanent(errors.New("tool materializer: record not decoded (the runner needs a codec)"))
				continue
			}
			c, s, u, err := decode(m.Event)
			if err != nil {
				failed[m] = consumers.Permanent(err)
				continue
			}
			if c != nil {
				calls = append(calls, *c)
			}
			if s != nil {
				sessions = append(sessions, *s)
			}
			if u != nil {
				deltas = append(deltas, *u)
			}
		}
		if len(calls) > 0 || len(sessions) > 0 || len(deltas) > 0 {
			err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
				if err := analytics.ApplyToolCalls(ctx, tx, calls); err != nil {
					return err
				}
				return analytics.ApplyUsage(ctx, tx, sessions, deltas)
			})
			if err != nil {
				return err
			}
		}
		if len(failed) > 0 {
			return failed
		}
		return nil
	}
}

// decode turns an event into what it adds: a tool call state, whom a
// session counts for, a usage delta (each nil when none).
func decode(ev *schemas.Event) (*analytics.ToolCall, *analytics.Session, *analytics.UsageDelta, error) {
	if uuid.Validate(ev.OrgID) != nil || uuid.Validate(ev.EventID) != nil {
		return nil, nil, nil, errors.New("tool materializer: event and organization ids must be UUIDs")
	}
	at := ev.OccurredAt.UTC()
	switch p := ev.Payload.(type) {
	case *schemas.ToolCall:
		c := analytics.ToolCall{EventID: ev.EventID, OrgID: ev.OrgID, SessionID: p.SessionID, ToolCallID: p.ToolCallID,
			Source: p.ExecutedBy, ToolName: p.ToolName, Status: p.Status, DurationMS: p.DurationMs, Cached: p.Cached,
			StartedAt: p.StartedAt}
		if analytics.Terminal(p.Status) {
			c.FinishedAt = &at
		}
		if err := c.Validate(); err != nil {
			return nil, nil, nil, err
		}
		return &c, nil, nil, nil
	case *schemas.SessionTranscript:
		if p.Kind != schemas.TranscriptToolCallKind || p.Tool == nil {
			return nil, nil, nil, nil
		}
		dur := p.Tool.DurationMs
		c := analytics.ToolCall{EventID: ev.EventID, OrgID: ev.OrgID, SessionID: p.SessionID, ToolCallID: p.Tool.ToolCallID,
			Source: analytics.SourceTranscript, ToolName: p.Tool.Name, Status: p.Tool.Status, DurationMS: &dur, FinishedAt: &at}
		if !analytics.Terminal(c.Status) || c.ToolCallID == "" || c.ToolName == "" {
			// A transcript holds finished calls; one without its id or
			// name is a fine transcript entry with nothing to count.
			return nil, nil, nil, nil
		}
		if err := c.Validate(); err != nil {
			return nil, nil, nil, err
		}
		return &c, nil, nil, nil
	case *schemas.SessionEvent:
		if uuid.Validate(p.SessionID) != nil {
			return nil, nil, nil, errors.New("tool materializer: session id must be a UUID")
		}
		var s *analytics.Session
		automation, user := deref(p.AutomationID), ""
		if p.Kind == schemas.SessionKindCreated {
			user = deref(p.UserID)
		}
		if (automation != "" && uuid.Validate(automation) != nil) || (user != "" && uuid.Validate(user) != nil) {
			return nil, nil, nil, errors.New("tool materializer: automation and user ids must be UUIDs")
		}
		if automation != "" || user != "" || p.Kind == schemas.SessionKindCreated {
			s = &analytics.Session{SessionID: p.SessionID, OrgID: ev.OrgID, AutomationID: automation, UserID: user}
		}
		var u *analytics.UsageDelta
		if t := p.Telemetry; t != nil && (t.MessagesExchanged != 0 || t.ActiveSeconds != 0 || len(t.PRURLs) != 0) {
			u = &analytics.UsageDelta{Key: ev.EventID, OrgID: ev.OrgID, SessionID: p.SessionID, At: at,
				Messages: t.MessagesExchanged, ActiveSeconds: t.ActiveSeconds, PRs: int64(len(t.PRURLs))}
		}
		return nil, s, u, nil
	case *schemas.LLMSpend:
		if p.InputTokens == 0 && p.OutputTokens == 0 && p.CacheReadTokens == 0 && p.CacheWriteTokens == 0 {
			return nil, nil, nil, nil
		}
		if p.InputTokens < 0 || p.OutputTokens < 0 || p.CacheReadTokens < 0 || p.CacheWriteTokens < 0 {
			return nil, nil, nil, errors.New("tool materializer: llm spend with negative tokens")
		}
		sess := analytics.NoSession
		if p.SessionID != nil && *p.SessionID != "" {
			if uuid.Validate(*p.SessionID) != nil {
				return nil, nil, nil, errors.New("tool materializer: session id must be a UUID")
			}
			sess = *p.SessionID
		}
		// One request counts once, whatever event carries it (the
		// billing rater keys its usage by the request id too); a record
		// without one counts once by its event id.
		key := ev.EventID
		if p.RequestID != "" {
			key = analytics.KeyOf("llm.spend:" + p.RequestID)
		}
		day := p.EndedAt
		if day.IsZero() {
			day = at
		}
		return nil, nil, &analytics.UsageDelta{Key: key, OrgID: ev.OrgID, SessionID: sess, At: day,
			InputTokens: p.InputTokens, OutputTokens: p.OutputTokens, CacheReadTokens: p.CacheReadTokens,
			CacheWriteTokens: p.CacheWriteTokens}, nil
	case *schemas.BillingUsage:
		if p.CreditsMicros == 0 {
			return nil, nil, nil, nil
		}
		if p.IdempotencyKey == "" {
			return nil, nil, nil, errors.New("tool materializer: billing usage without an idempotency key")
		}
		sess := analytics.NoSession
		if p.SessionID != nil && *p.SessionID != "" {
			if uuid.Validate(*p.SessionID) != nil {
				return nil, nil, nil, errors.New("tool materializer: session id must be a UUID")
			}
			sess = *p.SessionID
		}
		// The usage's own end, not the record's time: the key's content is
		// the same however often it is produced.
		return nil, nil, &analytics.UsageDelta{Key: analytics.KeyOf(p.IdempotencyKey), OrgID: ev.OrgID, SessionID: sess,
			At: p.PeriodTo, CreditsMicros: p.CreditsMicros}, nil
	}
	return nil, nil, nil, fmt.Errorf("tool materializer: unexpected event type %s", ev.EventType)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
