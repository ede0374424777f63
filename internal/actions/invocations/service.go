package invocations

// service.go implements Service.
//
// Design:
//
//   - Every state change is one UPDATE (or INSERT) guarded by the status it
//     starts from, plus one actions.invocations event through the outbox in
//     the same transaction, so Postgres and the topic never disagree and a
//     row changes state at most once per transition whatever the number of
//     gateway or API replicas.
//   - Limits that must hold across instances live in shared stores: the
//     per-minute rate in Redis (an exact sliding window: a sorted set of
//     accepted call times updated by one Lua script), the pending cap in
//     Postgres (count under a per-session transaction-scoped advisory lock).
//   - Execution happens outside any transaction, after the row is committed
//     as executing; it runs detached from the caller's context (bounded by
//     ExecTimeout) so a disconnecting agent never leaves a row executing.
//   - What is stored, published and returned to the agent is the same
//     shaped value: redacted (token formats, the org's secret values and
//     marked patterns, the call's own secrets) and ≤ 10 KiB. When the
//     shaped params differ from the ones the agent sent (a redacted or cut
//     member), a pending invocation keeps the original params in Redis until
//     it is resolved, so approving it executes what was asked; if Redis lost
//     them, the approved invocation fails with a clear error instead of
//     executing redacted values.
//   - Unattended runs: RunHooks move the session's run to needs_human while
//     an approval is pending and back to running when it is resolved, in the
//     invocation's transaction.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations/invocationsdb"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// ExecTimeout bounds one execution of an action.
const ExecTimeout = 30 * time.Second

// Deps are the service's collaborators. Pool and Codec are required; the
// API role (lists, approve, deny, expire) may leave Sources, Validator and
// Redis nil. Without Redis the rate limit is not enforced.
type Deps struct {
	Pool      *pgxpool.Pool
	Redis     *redis.Client
	Codec     *schemas.Codec
	Sources   Sources
	Validator *actions.Validator
	Notifier  Notifier
	RunHooks  RunHooks
	// Now is the clock (expiry, rate windows); time.Now when nil.
	Now func() time.Time
	Log *slog.Logger
	// ExecTimeout overrides the default ExecTimeout (tests).
	ExecTimeout time.Duration
	// PendingTTL and UnattendedPendingTTL override InteractiveTTL and
	// UnattendedTTL (ACTIONS_PENDING_TTL, ACTIONS_PENDING_TTL_AUTOMATION).
	PendingTTL           time.Duration
	UnattendedPendingTTL time.Duration
	// Redactors gives each organization's redactor (its secret values and
	// marked patterns, redaction.Cache in production); nil: the token
	// formats and each call's own secrets only.
	Redactors OrgRedactors
}

// OrgRedactors returns an organization's content redactor. An error means
// its rules could not be read: nothing is run or stored without them.
type OrgRedactors interface {
	Redactor(ctx context.Context, orgID string) (*actions.Redactor, error)
}

// Svc implements Service.
type Svc struct {
	d Deps
}

var _ Service = (*Svc)(nil)

// New returns the service.
func New(d Deps) *Svc {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.ExecTimeout <= 0 {
		d.ExecTimeout = ExecTimeout
	}
	if d.PendingTTL <= 0 {
		d.PendingTTL = InteractiveTTL
	}
	if d.UnattendedPendingTTL <= 0 {
		d.UnattendedPendingTTL = UnattendedTTL
	}
	d.Log = d.Log.With("module", "actions")
	return &Svc{d: d}
}

func (s *Svc) now() time.Time { return s.d.Now().UTC() }

// Available implements Service.
func (s *Svc) Available(ctx context.Context, sess sessions.Session) ([]Available, error) {
	if s.d.Sources == nil {
		return nil, errors.New("invocations: no action sources configured")
	}
	out, err := s.d.Sources.List(ctx, sess)
	if err != nil {
		return nil, fmt.Errorf("list action sources of session %s: %w", sess.ID, err)
	}
	return out, nil
}

// Guide implements Service.
func (s *Svc) Guide(ctx context.Context, sess sessions.Session, integration string) (string, error) {
	if s.d.Sources == nil {
		return "", ErrUnknownIntegration
	}
	src, ec, _, err := s.d.Sources.Get(ctx, sess, integration)
	if err != nil {
		return "", err
	}
	g, err := src.Guide(ctx, ec)
	if err != nil {
		return "", fmt.Errorf("%w: guide of %s: %w", ErrSourceUnavailable, integration, err)
	}
	return g, nil
}

// sessionPolicy is what the mode cascade and the TTL read about a session.
type sessionPolicy struct {
	orgModes, automationModes map[string]string
	automationID, runID       *string
}

func (s *Svc) loadPolicy(ctx context.Context, tx pgx.Tx, sess sessions.Session) (sessionPolicy, error) {
	var p sessionPolicy
	r, err := sessionsdb.New(tx).SessionActionPolicy(ctx, sessionsdb.SessionActionPolicyParams{ID: sess.ID, OrgID: sess.OrgID})
	orgRaw, autoRaw := r.OrgActionModes, r.AutomationActionModes
	p.automationID, p.runID = r.AutomationID, r.RunID
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("session %s: %w", sess.ID, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read action modes of session %s: %w", sess.ID, err)
	}
	if p.orgModes, err = decodeModes(orgRaw); err != nil {
		return p, fmt.Errorf("organizations.action_modes of %s: %w", sess.OrgID, err)
	}
	if p.automationModes, err = decodeModes(autoRaw); err != nil {
		return p, fmt.Errorf("automations.action_modes of %v: %w", p.automationID, err)
	}
	return p, nil
}

// decodeModes reads an action_modes object; a non-string value is kept as
// its JSON text so the cascade denies it as unknown_mode:<value>.
func decodeModes(raw []byte) (map[string]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var str string
		if json.Unmarshal(v, &str) == nil {
			out[k] = str
		} else {
			out[k] = string(v)
		}
	}
	return out, nil
}

// Invoke implements Service.
func (s *Svc) Invoke(ctx context.Context, sess sessions.Session, in InvokeInput) (Outcome, error) {
	if err := s.allow(ctx, sess.ID); err != nil {
		return Outcome{}, err
	}
	if s.d.Sources == nil {
		return Outcome{}, ErrUnknownIntegration
	}
	src, ec, integrationID, err := s.d.Sources.Get(ctx, sess, in.Integration)
	if err != nil {
		return Outcome{}, err
	}
	defs, err := src.ListActions(ctx, ec)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: list actions of %s: %w", ErrSourceUnavailable, in.Integration, err)
	}
	var def actions.Definition
	found := false
	for _, d := range defs {
		if d.ID == in.Action {
			def, found = d, true
			break
		}
	}
	if !found {
		return Outcome{}, ErrUnknownAction
	}
	params := in.Params
	if len(strings.TrimSpace(string(params))) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`)
	}
	if s.d.Validator != nil {
		err = s.d.Validator.Validate(def, params)
	} else {
		err = actions.Validate(def, params)
	}
	if err != nil {
		return Outcome{}, err // *actions.ParamsError (422) or a broken schema
	}
	var drift Drift // review.go
	if strings.HasPrefix(src.ID(), actions.ConnectorPrefix) {
		if drift, err = s.d.Sources.Drifted(ctx, sess, src.ID(), def); err != nil {
			return Outcome{}, fmt.Errorf("drift check of %s:%s: %w", src.ID(), def.ID, err)
		}
		if cur := drift.Current; cur != nil && !bytes.Equal(cur.Params, def.Params) {
			// The server's current definition is the one that runs and
			// the one an approver is shown: the params must fit it.
			if err := s.validate(*cur, params); err != nil {
				return Outcome{}, err
			}
		}
	}
	drifted := drift.Drifted
	red, err := s.redactorFor(ctx, sess.OrgID, params, ec)
	if err != nil {
		return Outcome{}, err
	}
	storedParams, paramsCut := actions.ShapeResultWith(params, actions.DefaultMaxResultBytes, red)
	exact := !paramsCut && jsonEqualCompact(storedParams, params)

	var inv Invocation
	err = pgx.BeginFunc(ctx, s.d.Pool, func(tx pgx.Tx) error {
		pol, err := s.loadPolicy(ctx, tx, sess)
		if err != nil {
			return err
		}
		res := actions.ResolveMode(actions.ModeInput{SourceID: src.ID(), ActionID: def.ID, Risk: def.Risk,
			AutomationModes: pol.automationModes, OrgModes: pol.orgModes, Drifted: drifted})
		row := newRow{orgID: sess.OrgID, sessionID: sess.ID, integrationID: integrationID, integration: src.ID(),
			action: def.ID, risk: string(def.Risk), mode: string(res.Mode), modeSource: string(res.Source),
			drifted: res.Drifted, params: storedParams, automationID: pol.automationID, runID: pol.runID}
		if in.InvokedBy != "" {
			row.invokedBy = &in.InvokedBy
		}
		row.definitionHash, row.reviewedHash = nonEmpty(drift.CurrentHash), nonEmpty(drift.ReviewedHash)
		if res.Drifted {
			row.diff = drift.Diff
		}
		now := s.now()
		switch res.Mode {
		case actions.ModeDeny:
			row.status, row.deniedReason, row.completedAt = StatusDenied, &res.DeniedReason, &now
			if inv, err = insert(ctx, tx, row); err != nil {
				return err
			}
			return s.emit(ctx, tx, inv, "")
		case actions.ModeAllow:
			// approved → executing in one transaction: two state changes,
			// two events; nobody can observe the row in between.
			row.status = StatusExecuting
			if inv, err = insert(ctx, tx, row); err != nil {
				return err
			}
			approved := inv
			approved.Status = StatusApproved
			return s.emitAll(ctx, tx, change{approved, ""}, change{inv, StatusApproved})
		default: // require_approval
			q := invocationsdb.New(tx)
			if err := q.LockSessionPending(ctx, sess.ID); err != nil {
				return fmt.Errorf("lock pending invocations of session %s: %w", sess.ID, err)
			}
			pending, err := q.CountPendingInSession(ctx, invocationsdb.CountPendingInSessionParams{SessionID: sess.ID, Now: now})
			if err != nil {
				return fmt.Errorf("count pending invocations of session %s: %w", sess.ID, err)
			}
			if pending >= MaxPendingPerSession {
				return ErrPendingLimit
			}
			ttl := s.d.PendingTTL
			if pol.runID != nil {
				ttl = s.d.UnattendedPendingTTL
			}
			exp := now.Add(ttl)
			row.status, row.expiresAt = StatusPending, &exp
			if inv, err = insert(ctx, tx, row); err != nil {
				return err
			}
			if !exact {
				if err := s.keepParams(ctx, inv.ID, params, ttl); err != nil {
					return err
				}
			}
			if inv.RunID != nil && s.d.RunHooks != nil {
				if err := s.d.RunHooks.AwaitingApproval(ctx, tx, inv); err != nil {
					return fmt.Errorf("pause run of invocation %s: %w", inv.ID, err)
				}
			}
			return s.emit(ctx, tx, inv, "")
		}
	})
	if err != nil {
		if errors.Is(err, ErrPendingLimit) || errors.Is(err, ErrNotFound) {
			return Outcome{}, err
		}
		return Outcome{}, fmt.Errorf("invoke %s:%s: %w", in.Integration, in.Action, err)
	}
	s.notify(ctx, inv)
	s.d.Log.InfoContext(ctx, "action invocation", "session_id", inv.SessionID, "organization_id", inv.OrgID,
		"invocation_id", inv.ID, "source_id", inv.Integration, "action_id", inv.Action, "mode", inv.Mode,
		"mode_source", inv.ModeSource, "drifted", inv.Drifted, "status", inv.Status)
	if inv.Status != StatusExecuting {
		return Outcome{Invocation: inv}, nil
	}
	return s.execute(ctx, inv, src, ec, params, red)
}

// execute runs an invocation committed as executing and records the
// outcome. It is detached from ctx's cancellation (bounded by ExecTimeout)
// so the row always ends completed or failed. red redacts the outcome.
func (s *Svc) execute(ctx context.Context, inv Invocation, src actions.Source, ec actions.ExecContext, params json.RawMessage,
	red *actions.Redactor) (Outcome, error) {
	ctx = context.WithoutCancel(ctx)
	ectx, cancel := context.WithTimeout(ctx, s.d.ExecTimeout)
	start := time.Now()
	raw, execErr := src.Execute(ectx, inv.Action, params, ec)
	cancel()
	dur := time.Since(start).Milliseconds()
	return s.finish(ctx, inv, raw, execErr, dur, red)
}

// redactorFor is the content redactor of one call: the token formats, the
// organization's secret values and marked patterns (Deps.Redactors, cached
// per organization), and the exact values of the call's secret-keyed
// params (a tool's echo of client_secret) and of the integration's
// credential.
func (s *Svc) redactorFor(ctx context.Context, orgID string, params json.RawMessage, ec actions.ExecContext) (*actions.Redactor, error) {
	var org *actions.Redactor
	if s.d.Redactors != nil {
		var err error
		if org, err = s.d.Redactors.Redactor(ctx, orgID); err != nil {
			return nil, fmt.Errorf("redaction rules of organization %s: %w", orgID, err)
		}
	}
	return org.With(append(actions.SecretValues(params), ec.Token)...), nil
}

// finish stores the outcome of an execution (executing → completed|failed).
// red redacts the result and the error text (nil: token formats only)
// before the agent, the row, the topic and the notifier see them.
func (s *Svc) finish(ctx context.Context, inv Invocation, raw json.RawMessage, execErr error, durMs int64, red *actions.Redactor) (Outcome, error) {
	var stored, agent json.RawMessage
	var errText *string
	status := StatusCompleted
	if execErr != nil {
		status = StatusFailed
		msg := red.String(safeError(execErr, s.d.ExecTimeout))
		errText = &msg
		s.d.Log.WarnContext(ctx, "action failed", "invocation_id", inv.ID, "source_id", inv.Integration,
			"action_id", inv.Action, "duration_ms", durMs, "error", msg)
	} else {
		if len(raw) == 0 {
			raw = json.RawMessage(`null`)
		}
		// One size rule (actions.DefaultMaxResultBytes): the agent gets
		// exactly what is stored, published and shown.
		stored, _ = actions.ShapeResultWith(raw, actions.DefaultMaxResultBytes, red)
		agent = stored
	}
	now := s.now()
	var out Invocation
	err := pgx.BeginFunc(ctx, s.d.Pool, func(tx pgx.Tx) error {
		row, err := invocationsdb.New(tx).FinishInvocation(ctx, invocationsdb.FinishInvocationParams{ID: inv.ID,
			Status: status, Result: nullJSON(stored), Error: errText, DurationMs: durMs, CompletedAt: now})
		out = fromRow(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("invocation %s is no longer executing: %w", inv.ID, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("record outcome of invocation %s: %w", inv.ID, err)
		}
		return s.emit(ctx, tx, out, StatusExecuting)
	})
	if err != nil {
		return Outcome{}, err
	}
	s.notify(ctx, out)
	s.d.Log.InfoContext(ctx, "action executed", "invocation_id", out.ID, "session_id", out.SessionID,
		"source_id", out.Integration, "action_id", out.Action, "status", out.Status, "duration_ms", durMs)
	return Outcome{Invocation: out, Result: agent}, nil
}

// safeError is the text stored and shown for a failed execution: the
// remote's message (sources keep credentials out of it), or a generic
// description for anything else (whose text is only logged).
func safeError(err error, timeout time.Duration) string {
	var ee *actions.ExecError
	var pe *actions.ParamsError
	switch {
	case errors.As(err, &ee):
		return ee.Error()
	case errors.As(err, &pe):
		return pe.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("action timed out after %s", timeout)
	case errors.Is(err, actions.ErrUnknownAction):
		return "unknown action"
	}
	return "action failed"
}

// Approve implements Service.
func (s *Svc) Approve(ctx context.Context, a Approver, invocationID string, ap Approval) (Outcome, error) {
	mode := ap.Mode
	if mode == "" {
		mode = ApproveOnce
	}
	if mode != ApproveOnce && mode != ApproveAlways {
		return Outcome{}, fmt.Errorf("invocations: approve mode %q: %w", mode, ErrInvalidQuery)
	}
	if a.Role == "owner" || a.Role == "admin" { // resolve refuses anyone else before reading anything
		ap.Mode = mode
		if err := s.checkDefinition(ctx, a, invocationID, ap); err != nil {
			return Outcome{}, err
		}
	}
	var inv Invocation
	expired := false
	err := s.resolve(ctx, a, invocationID, func(tx pgx.Tx, cur Invocation, now time.Time) (Invocation, error) {
		q := invocationsdb.New(tx)
		row, err := q.ApproveInvocation(ctx, invocationsdb.ApproveInvocationParams{ID: cur.ID, ApprovedBy: a.UserID, Now: now})
		if err != nil {
			return cur, fmt.Errorf("approve invocation %s: %w", cur.ID, err)
		}
		approved := fromRow(row)
		if err := s.emit(ctx, tx, approved, StatusPending); err != nil {
			return cur, err
		}
		if mode == ApproveAlways {
			if err := setAllow(ctx, tx, approved); err != nil {
				return cur, err
			}
			if err := acceptReview(ctx, tx, approved); err != nil {
				return cur, err
			}
		}
		if approved.RunID != nil && s.d.RunHooks != nil {
			if err := s.d.RunHooks.ApprovalResolved(ctx, tx, approved); err != nil {
				return cur, fmt.Errorf("resume run of invocation %s: %w", cur.ID, err)
			}
		}
		row, err = q.StartInvocation(ctx, cur.ID)
		if err != nil {
			return cur, fmt.Errorf("start invocation %s: %w", cur.ID, err)
		}
		executing := fromRow(row)
		return executing, s.emit(ctx, tx, executing, StatusApproved)
	}, &inv, &expired)
	if errors.Is(err, ErrExpired) {
		return Outcome{Invocation: inv}, err
	}
	if err != nil {
		return Outcome{}, err
	}
	if expired {
		return Outcome{Invocation: inv}, ErrExpired
	}
	s.d.Log.InfoContext(ctx, "action approved", "invocation_id", inv.ID, "session_id", inv.SessionID,
		"source_id", inv.Integration, "action_id", inv.Action, "approve_mode", mode)
	return s.executeApproved(ctx, inv)
}

// executeApproved executes an invocation an approver just moved to
// executing: it builds the source for the invocation's session (the
// credential is resolved now) and recovers the original params.
func (s *Svc) executeApproved(ctx context.Context, inv Invocation) (Outcome, error) {
	fail := func(msg string) (Outcome, error) {
		return s.finish(context.WithoutCancel(ctx), inv, nil, &actions.ExecError{Message: msg}, 0, nil)
	}
	if s.d.Sources == nil {
		return fail("action sources are not available to this service")
	}
	sess := sessions.Session{ID: inv.SessionID, OrgID: inv.OrgID, AutomationID: inv.AutomationID, RunID: inv.RunID}
	if title, err := sessionsdb.New(s.d.Pool).SessionTitle(ctx, inv.SessionID); err == nil {
		sess.Title = title
	} else {
		s.d.Log.WarnContext(ctx, "read session of approved invocation", "invocation_id", inv.ID, "error", err)
	}
	src, ec, _, err := s.d.Sources.Get(ctx, sess, inv.Integration)
	if err != nil {
		s.d.Log.WarnContext(ctx, "source of approved invocation unavailable", "invocation_id", inv.ID, "error", err)
		return fail("integration " + inv.Integration + " is no longer available to this session")
	}
	params, err := s.originalParams(ctx, inv)
	if err != nil {
		s.d.Log.WarnContext(ctx, "original params of approved invocation unavailable", "invocation_id", inv.ID, "error", err)
		return fail("the original parameters of this invocation are no longer available; invoke the action again")
	}
	red, err := s.redactorFor(ctx, inv.OrgID, params, ec)
	if err != nil {
		s.d.Log.WarnContext(ctx, "redaction rules of approved invocation unavailable", "invocation_id", inv.ID, "error", err)
		return fail("the organization's redaction rules could not be read, so the action was not run; invoke it again")
	}
	return s.execute(ctx, inv, src, ec, params, red)
}

// Deny implements Service.
func (s *Svc) Deny(ctx context.Context, a Approver, invocationID string) (Invocation, error) {
	var inv Invocation
	expired := false
	err := s.resolve(ctx, a, invocationID, func(tx pgx.Tx, cur Invocation, now time.Time) (Invocation, error) {
		row, err := invocationsdb.New(tx).DenyInvocation(ctx, invocationsdb.DenyInvocationParams{ID: cur.ID, ApprovedBy: a.UserID, Now: now})
		if err != nil {
			return cur, fmt.Errorf("deny invocation %s: %w", cur.ID, err)
		}
		denied := fromRow(row)
		if err := s.emit(ctx, tx, denied, StatusPending); err != nil {
			return cur, err
		}
		if denied.RunID != nil && s.d.RunHooks != nil {
			if err := s.d.RunHooks.ApprovalResolved(ctx, tx, denied); err != nil {
				return cur, fmt.Errorf("resume run of invocation %s: %w", cur.ID, err)
			}
		}
		return denied, nil
	}, &inv, &expired)
	if errors.Is(err, ErrExpired) {
		return inv, err
	}
	if err != nil {
		return Invocation{}, err
	}
	if expired {
		return inv, ErrExpired
	}
	s.dropParams(ctx, inv.ID)
	s.d.Log.InfoContext(ctx, "action denied", "invocation_id", inv.ID, "session_id", inv.SessionID,
		"source_id", inv.Integration, "action_id", inv.Action)
	return inv, nil
}

// resolve runs the checks shared by Approve and Deny and then apply, in one
// transaction holding the invocation's row lock. An overdue invocation is
// expired instead (*expired = true, the expired row in *out); one the
// sweeper already expired is ErrExpired with the row in *out (nothing
// written, nothing announced again); any other decided one ErrConflict.
func (s *Svc) resolve(ctx context.Context, a Approver, invocationID string,
	apply func(tx pgx.Tx, cur Invocation, now time.Time) (Invocation, error), out *Invocation, expired *bool) error {
	if a.Role != "owner" && a.Role != "admin" {
		return ErrForbidden
	}
	if !isUUID(invocationID) || !isUUID(a.OrgID) {
		return ErrNotFound
	}
	err := pgx.BeginFunc(ctx, s.d.Pool, func(tx pgx.Tx) error {
		q := invocationsdb.New(tx)
		row, err := q.LockOrgInvocation(ctx, invocationsdb.LockOrgInvocationParams{ID: invocationID, OrgID: a.OrgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock invocation %s: %w", invocationID, err)
		}
		cur := fromRow(row)
		switch cur.Status {
		case StatusPending:
		case StatusExpired:
			// Expired by the sweeper (or an earlier decision): the same
			// answer as expiring it now, so a late approver always hears
			// "expired", never "already decided".
			*out = cur
			return ErrExpired
		default:
			return ErrConflict
		}
		now := s.now()
		if cur.ExpiresAt != nil && !cur.ExpiresAt.After(now) {
			row, err := q.ExpireInvocation(ctx, invocationsdb.ExpireInvocationParams{ID: cur.ID, Now: now})
			if err != nil {
				return fmt.Errorf("expire invocation %s: %w", cur.ID, err)
			}
			exp := fromRow(row)
			if err := s.afterExpire(ctx, tx, exp); err != nil {
				return err
			}
			*out, *expired = exp, true
			return nil
		}
		*out, err = apply(tx, cur, now)
		return err
	})
	if err != nil {
		return err
	}
	s.notify(ctx, *out)
	if *expired {
		s.dropParams(ctx, out.ID)
	}
	return nil
}

// afterExpire writes the event of an expired invocation and tells its run.
func (s *Svc) afterExpire(ctx context.Context, tx pgx.Tx, inv Invocation) error {
	if err := s.emit(ctx, tx, inv, StatusPending); err != nil {
		return err
	}
	if inv.RunID != nil && s.d.RunHooks != nil {
		if err := s.d.RunHooks.ApprovalResolved(ctx, tx, inv); err != nil {
			return fmt.Errorf("tell run of expired invocation %s: %w", inv.ID, err)
		}
	}
	return nil
}

// setAllow records "always allow" for the invocation's integration:action
// at the automation scope for automation sessions, else the org scope.
func setAllow(ctx context.Context, tx pgx.Tx, inv Invocation) error {
	key := actions.ModeKey(inv.Integration, inv.Action)
	if inv.AutomationID != nil {
		n, err := triggersdb.New(tx).AllowAutomationActionMode(ctx, triggersdb.AllowAutomationActionModeParams{ID: *inv.AutomationID, Key: key, OrgID: inv.OrgID})
		if err != nil {
			return fmt.Errorf("set automation action mode %s: %w", key, err)
		}
		if n == 1 {
			return nil
		}
		// The automation is gone: fall back to the org scope.
	}
	if err := orgsdb.New(tx).AllowActionMode(ctx, orgsdb.AllowActionModeParams{ID: inv.OrgID, Key: key}); err != nil {
		return fmt.Errorf("set org action mode %s: %w", key, err)
	}
	return nil
}

// ExpireBatch bounds the rows one ExpirePending statement expires.
const ExpireBatch = 1000

// ExpirePending implements Service. Rows locked by a concurrent Approve or
// Deny are skipped (that call resolves or expires them itself); rows of a
// concurrent ExpirePending are skipped too, so each row is expired by
// exactly one statement.
func (s *Svc) ExpirePending(ctx context.Context) (int, error) {
	var expired []Invocation
	now := s.now()
	err := pgx.BeginFunc(ctx, s.d.Pool, func(tx pgx.Tx) error {
		rows, err := invocationsdb.New(tx).ExpireOverdue(ctx, invocationsdb.ExpireOverdueParams{Now: now, MaxRows: ExpireBatch})
		if err != nil {
			return fmt.Errorf("expire pending invocations: %w", err)
		}
		expired = fromRows(rows)
		for _, inv := range expired {
			if err := s.afterExpire(ctx, tx, inv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, inv := range expired {
		s.notify(ctx, inv)
		s.dropParams(ctx, inv.ID)
	}
	if len(expired) > 0 {
		s.d.Log.InfoContext(ctx, "expired pending action invocations", "count", len(expired))
	}
	return len(expired), nil
}

func (s *Svc) notify(ctx context.Context, inv Invocation) {
	if s.d.Notifier != nil {
		s.d.Notifier.InvocationChanged(ctx, inv)
	}
}

// emit adds the actions.invocations event describing inv after a change
// from previous ("" for a new invocation).
func (s *Svc) emit(ctx context.Context, tx pgx.Tx, inv Invocation, previous string) error {
	return outbox.AddEvent(ctx, tx, s.d.Codec, topics.ActionsInvocations, inv.ID, Event(inv, previous))
}

// change is one state change to publish.
type change struct {
	inv      Invocation
	previous string
}

// emitAll adds the events of several changes, in order, in one round trip.
func (s *Svc) emitAll(ctx context.Context, tx pgx.Tx, changes ...change) error {
	msgs := make([]outbox.Message, 0, len(changes))
	for _, c := range changes {
		rec, err := kafka.EventRecord(s.d.Codec, topics.ActionsInvocations, c.inv.ID, Event(c.inv, c.previous))
		if err != nil {
			return err
		}
		h := make(map[string]string, len(rec.Headers))
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
		}
		msgs = append(msgs, outbox.Message{Topic: rec.Topic, Key: string(rec.Key), Value: rec.Value, Headers: h})
	}
	return outbox.Add(ctx, tx, msgs...)
}

// Event is the actions.invocations event describing inv after a change
// from previous ("" for a new invocation). Params and result are the
// stored (redacted, bounded) ones.
func Event(inv Invocation, previous string) *schemas.Event {
	p := &schemas.ActionInvocation{
		InvocationID: inv.ID, SessionID: inv.SessionID, Integration: inv.Integration, IntegrationID: inv.IntegrationID,
		Action: inv.Action, RiskLevel: inv.RiskLevel, Mode: inv.Mode, ModeSource: nonEmpty(inv.ModeSource),
		Status: inv.Status, PreviousStatus: nonEmpty(previous), Error: inv.Error, DeniedReason: inv.DeniedReason,
		ApprovedBy: inv.ApprovedBy, ApprovedAt: inv.ApprovedAt, ExpiresAt: inv.ExpiresAt, CompletedAt: inv.CompletedAt,
		DurationMs: inv.DurationMs, AutomationID: inv.AutomationID, RunID: inv.RunID,
	}
	if len(inv.Params) > 0 {
		p.ParamsJSON = nonEmpty(compactJSON(inv.Params))
	}
	if len(inv.Result) > 0 {
		p.ResultJSON = nonEmpty(compactJSON(inv.Result))
	}
	p.Drifted, p.DefinitionHash, p.ReviewedHash = inv.Drifted, inv.DefinitionHash, inv.ReviewedHash
	if inv.DefinitionDiff != nil {
		if b, err := json.Marshal(inv.DefinitionDiff); err == nil {
			p.DefinitionDiffJSON = nonEmpty(string(b))
		}
	}
	ev := schemas.New(inv.OrgID, p)
	if inv.RunID != nil {
		ev.CorrelationID = *inv.RunID
	}
	return ev
}

// compactJSON drops the whitespace Postgres' jsonb output adds.
func compactJSON(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullJSON(b json.RawMessage) []byte {
	if len(b) == 0 {
		return nil // NULL
	}
	return []byte(b)
}

// StaleExecutingAfter is how long an invocation may stay executing before
// FailStale fails it: its execution is bounded by ExecTimeout, so a row
// older than this lost its gateway (crash, kill) before the outcome was
// recorded.
const StaleExecutingAfter = ExecTimeout + time.Minute

// StaleError is the error text of an invocation failed by FailStale.
const StaleError = "execution interrupted: the gateway stopped before the result was recorded; the action may or may not have run"

// FailStale fails invocations left executing by a gateway that stopped
// mid-execution (the original left them executing forever). Run it beside
// ExpirePending; like it, each row is failed by exactly one statement on
// any number of replicas.
func (s *Svc) FailStale(ctx context.Context) (int, error) {
	var failed []Invocation
	now := s.now()
	err := pgx.BeginFunc(ctx, s.d.Pool, func(tx pgx.Tx) error {
		rows, err := invocationsdb.New(tx).FailStale(ctx, invocationsdb.FailStaleParams{Now: now,
			StaleAfter: StaleExecutingAfter, Error: StaleError, MaxRows: ExpireBatch})
		if err != nil {
			return fmt.Errorf("fail stale invocations: %w", err)
		}
		failed = fromRows(rows)
		for _, inv := range failed {
			if err := s.emit(ctx, tx, inv, StatusExecuting); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, inv := range failed {
		s.notify(ctx, inv)
	}
	if len(failed) > 0 {
		s.d.Log.WarnContext(ctx, "failed interrupted action invocations", "count", len(failed))
	}
	return len(failed), nil
}
