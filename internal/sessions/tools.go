package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// scanInv turns a query's invocation row (its session's run joined) into an
// invocation.
func scanInv[R sessionsdb.InsertToolInvocationRow | sessionsdb.LockToolInvocationRow | sessionsdb.FinishToolInvocationRow](row R, err error) (Invocation, error) {
	r := sessionsdb.InsertToolInvocationRow(row)
	inv := Invocation{ID: r.ID, SessionID: r.SessionID, ToolCallID: r.ToolCallID, ToolName: r.ToolName, Status: r.Status,
		Error: r.Error, OrgID: r.OrgID, RunID: r.RunID, StartedAt: r.StartedAt}
	if r.Input != nil {
		inv.Input = r.Input
	}
	if r.Output != nil {
		inv.Output = r.Output
	}
	return inv, err
}

func jsonOrNil(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	return raw, nil
}

// BeginTool claims (session, toolCallID). fresh=true: a new executing row
// the caller must finish with FinishTool (a started tools.calls event is
// emitted). fresh=false: the existing row — completed/failed: replay its
// output/error (a cached tools.calls event is emitted); executing: another
// attempt is in flight. An executing row older than ToolStaleAfter is taken
// over (fresh=true): its executor is presumed dead.
func (s *Store) BeginTool(ctx context.Context, sessionID, toolCallID, toolName string, input json.RawMessage) (inv Invocation, fresh bool, err error) {
	if !isUUID(sessionID) {
		return Invocation{}, false, ErrNotFound
	}
	if toolCallID == "" || len(toolCallID) > 200 {
		return Invocation{}, false, invalid("tool_call_id must be 1–200 bytes")
	}
	in, err := jsonOrNil(input)
	if err != nil {
		return Invocation{}, false, invalid("tool input: %v", err)
	}
	stale := s.ToolStaleAfter
	if stale <= 0 {
		stale = DefaultToolStaleAfter
	}
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := sessionsdb.New(tx)
		inv, err = scanInv(q.InsertToolInvocation(ctx, sessionsdb.InsertToolInvocationParams{
			ToolCallID: toolCallID, ToolName: toolName, Input: in, SessionID: sessionID}))
		if err == nil {
			fresh = true
			return s.toolEvent(ctx, tx, inv, schemas.ToolCallStarted, nil, nil, false)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("insert tool invocation: %w", err)
		}
		inv, err = scanInv(q.LockToolInvocation(ctx, sessionsdb.LockToolInvocationParams{SessionID: sessionID, ToolCallID: toolCallID}))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound // no such session
		}
		if err != nil {
			return fmt.Errorf("find tool invocation: %w", err)
		}
		switch inv.Status {
		case ToolExecuting:
			if time.Since(inv.StartedAt) < stale {
				return nil
			}
			if inv.StartedAt, err = q.TakeOverToolInvocation(ctx, inv.ID); err != nil {
				return fmt.Errorf("take over tool invocation: %w", err)
			}
			fresh = true
			return s.toolEvent(ctx, tx, inv, schemas.ToolCallStarted, nil, nil, false)
		case ToolCompleted:
			return s.toolEvent(ctx, tx, inv, schemas.ToolCallCompleted, nil, nil, true)
		default:
			return s.toolEvent(ctx, tx, inv, schemas.ToolCallFailed, nil, inv.Error, true)
		}
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Invocation{}, false, err
		}
		return Invocation{}, false, fmt.Errorf("begin tool %s of session %s: %w", toolCallID, sessionID, err)
	}
	return inv, fresh, nil
}

// FinishTool stores the result (errMsg non-empty → failed) and emits the
// completed/failed tools.calls event, in one transaction. Finishing an
// invocation that is no longer executing is a no-op.
func (s *Store) FinishTool(ctx context.Context, inv Invocation, output json.RawMessage, errMsg string, dur time.Duration) error {
	if !isUUID(inv.ID) {
		return ErrNotFound
	}
	out, err := jsonOrNil(output)
	if err != nil {
		return invalid("tool output: %v", err)
	}
	status, evStatus := ToolCompleted, schemas.ToolCallCompleted
	if errMsg != "" {
		status, evStatus = ToolFailed, schemas.ToolCallFailed
	}
	ms := dur.Milliseconds()
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		done, err := scanInv(sessionsdb.New(tx).FinishToolInvocation(ctx, sessionsdb.FinishToolInvocationParams{
			Status: status, Output: out, Error: nullable(errMsg), DurationMs: ms, ID: inv.ID}))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("finish tool invocation %s: %w", inv.ID, err)
		}
		return s.toolEvent(ctx, tx, done, evStatus, &ms, done.Error, false)
	})
}

func (s *Store) toolEvent(ctx context.Context, tx pgx.Tx, inv Invocation, status string, durMs *int64, errMsg *string, cached bool) error {
	started := inv.StartedAt.UTC().Truncate(time.Millisecond)
	p := &schemas.ToolCall{SessionID: inv.SessionID, ToolCallID: inv.ToolCallID, ToolName: inv.ToolName, Status: status,
		ExecutedBy: "gateway", StartedAt: &started, DurationMs: durMs, Error: errMsg, Cached: cached, RunID: inv.RunID}
	if err := outbox.AddEvent(ctx, tx, s.Codec, topics.ToolsCalls, inv.SessionID, schemas.New(inv.OrgID, p)); err != nil {
		return fmt.Errorf("add tool call event: %w", err)
	}
	return nil
}
