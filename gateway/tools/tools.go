// Package tools executes the platform tools a session's agent calls back
// through the gateway (POST /proliferate/:id/tools/:tool):
// save_snapshot, save_service_commands (setup sessions only),
// automation.complete (alias automation_complete), request_env_variables
// and verify (verification evidence, verify.go).
//
// Every call is idempotent by its tool_call_id, durably: Registry.Invoke
// claims (session, tool_call_id) in session_tool_invocations through the
// sessions store before acting. A retry of a finished call — the sandbox's
// tool helper retries network failures with the same id, for example when
// a snapshot froze the sandbox mid-request — replays the stored result,
// also after a gateway restart or on another gateway instance; a retry that
// arrives while the first attempt runs waits for it (in-process through a
// shared call, across processes by polling the row). Nothing is cached in
// memory beyond the in-flight call.
//
// A tool's answer is the contract's {success, result, data}: success=false
// results (bad arguments, a run that cannot complete) are stored as failed
// invocations and replayed as such. Effects on the live session (snapshots,
// termination, surfacing an env request) go through the session's hub,
// reached with the Runtime interface so this package does not depend on
// where the hub lives.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/schemas"
)

// Result is a tool's answer to the sandbox.
type Result struct {
	Success bool           `json:"success"`
	Result  string         `json:"result"`
	Data    map[string]any `json:"data,omitempty"`
	// after is what Execute hands its tool's After hook (never sent nor
	// stored; for example the redacted completion of automation.complete,
	// so After neither decodes the arguments again nor redacts twice).
	after any
}

// Failure is a success=false result with a message.
func Failure(format string, args ...any) Result {
	return Result{Success: false, Result: fmt.Sprintf(format, args...)}
}

// Runtime is what tools may do to the live session; *hub.Hub implements it.
type Runtime interface {
	// SaveSnapshot snapshots the running sandbox (it keeps running).
	SaveSnapshot(ctx context.Context) (string, error)
	// Terminate stops the session with an outcome and summary.
	Terminate(ctx context.Context, reason, outcome, summary string) error
	// Broadcast sends a protocol message to the session's clients.
	Broadcast(msg any)
	// AwaitEnv surfaces an environment request to the session's members
	// and waits for their values or the timeout (hub.AwaitEnv).
	AwaitEnv(ctx context.Context, req hub.EnvRequest) (hub.EnvAnswer, error)
	// ReadWorkspaceFile reads a file of the sandbox's workspace, confined
	// to it (hub.ReadWorkspaceFile).
	ReadWorkspaceFile(ctx context.Context, rel string, limit int64) ([]byte, error)
}

// Call is one tool invocation.
type Call struct {
	// Session is the calling session (authenticated by its sandbox token).
	Session    sessions.Session
	ToolCallID string
	Args       json.RawMessage
	// Runtime returns the session's live runtime (its hub); tools call it
	// only when they need it.
	Runtime func(ctx context.Context) (Runtime, error)
	// Secrets are the values the session received (its environment,
	// values people submitted) as this instance's hub knows them: redacted
	// from what leaves the session besides the organization's secrets.
	Secrets []string
}

// Tool is a gateway-executed platform tool.
type Tool struct {
	// Name is the canonical name (stored in session_tool_invocations).
	Name string
	// Aliases are other names the sandbox may call it by.
	Aliases []string
	// SessionTypes restricts the tool to these session types (nil: all).
	SessionTypes []string
	// Execute performs the tool. A returned error is an unexpected failure;
	// it is stored (and replayed) as a failed result like a success=false
	// Result, so a retry never executes twice.
	Execute func(ctx context.Context, c Call) (Result, error)
	// After, when set, runs once after a fresh (not replayed) execution's
	// answer was delivered, detached from the request (for example
	// terminating the session after automation.complete, which must not
	// kill the sandbox before it reads the answer).
	After func(ctx context.Context, c Call, r Result)
}

// Errors of Invoke.
var (
	// ErrUnknownTool: no tool of that name.
	ErrUnknownTool = errors.New("tools: unknown tool")
	// ErrInFlight: another attempt of the same tool_call_id is still
	// executing after the wait; the caller should retry later (503).
	ErrInFlight = errors.New("tools: the same tool call is still executing")
	// ErrInvalidCall: missing tool_call_id.
	ErrInvalidCall = errors.New("tools: tool_call_id is required")
)

// Deps of a Registry.
type Deps struct {
	Pool     *pgxpool.Pool
	Codec    *schemas.Codec
	Sessions *sessions.Store
	Log      *slog.Logger
	// WaitInFlight bounds how long a retry waits for an attempt executing
	// elsewhere [60s]; PollEvery is its polling period [100ms].
	WaitInFlight, PollEvery time.Duration
	// Prebuilt records configuration snapshots with their version key;
	// nil records them without one (never restored).
	Prebuilt *prebuilds.Resolver
	// Evidence stores verify's files; nil (or without a blob store):
	// verify answers that evidence is unavailable.
	Evidence *evidence.Store
	// Redactors gives an organization's redactor (its secrets' values, its
	// redaction patterns, the token formats): what the agent sends that
	// leaves the session (a run's completion: the run API, runs.lifecycle,
	// notifications; save_snapshot's message) is redacted with it and with
	// the values the session received (OutboundRedactor). nil: token
	// formats and the session's values only.
	Redactors Redactors
}

// Redactors gives an organization's redactor (redaction.Cache).
type Redactors interface {
	Redactor(ctx context.Context, orgID string) (*actions.Redactor, error)
}

// Registry maps tool names to tools and executes them idempotently.
type Registry struct {
	d      Deps
	mu     sync.Mutex
	tools  map[string]*Tool
	flight map[string]*flight
}

type flight struct {
	done chan struct{}
	res  Result
	err  error
}

// New returns a registry with the platform tools registered.
func New(d Deps) *Registry {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.WaitInFlight <= 0 {
		d.WaitInFlight = 60 * time.Second
	}
	if d.PollEvery <= 0 {
		d.PollEvery = 100 * time.Millisecond
	}
	r := &Registry{d: d, tools: map[string]*Tool{}, flight: map[string]*flight{}}
	for _, t := range platformTools(d) {
		r.Register(t)
	}
	return r
}

// Register adds (or replaces) a tool under its name and aliases.
func (r *Registry) Register(t Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tp := &t
	r.tools[t.Name] = tp
	for _, a := range t.Aliases {
		r.tools[a] = tp
	}
}

// Lookup returns the tool called name (by name or alias).
func (r *Registry) Lookup(name string) (*Tool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tools[name]
	return t, ok
}

// Names lists every callable name, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for n := range r.tools {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Invoke runs tool name for c once per (session, tool_call_id): the first
// call executes, every later call with the same id gets the stored result.
// fresh reports whether this call executed the tool (its After hook, if
// any, is then the caller's to run via RunAfter).
func (r *Registry) Invoke(ctx context.Context, name string, c Call) (res Result, fresh bool, err error) {
	t, ok := r.Lookup(name)
	if !ok {
		return Result{}, false, fmt.Errorf("%w: %s", ErrUnknownTool, name)
	}
	if c.ToolCallID == "" || len(c.ToolCallID) > 200 {
		return Result{}, false, ErrInvalidCall
	}
	key := c.Session.ID + "/" + c.ToolCallID
	r.mu.Lock()
	if f, ok := r.flight[key]; ok {
		r.mu.Unlock()
		select {
		case <-f.done:
			return f.res, false, f.err
		case <-ctx.Done():
			return Result{}, false, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	r.flight[key] = f
	r.mu.Unlock()
	defer func() {
		f.res, f.err = res, err
		close(f.done)
		r.mu.Lock()
		delete(r.flight, key)
		r.mu.Unlock()
	}()
	return r.invoke(ctx, t, c)
}

func (r *Registry) invoke(ctx context.Context, t *Tool, c Call) (Result, bool, error) {
	args := c.Args
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	deadline := time.Now().Add(r.d.WaitInFlight)
	for {
		// BeginTool claims the row, returns the stored one, or hands over
		// an attempt that went stale (its gateway died mid-execution).
		inv, fresh, err := r.d.Sessions.BeginTool(ctx, c.Session.ID, c.ToolCallID, t.Name, args)
		if err != nil {
			return Result{}, false, fmt.Errorf("claim tool call %s: %w", c.ToolCallID, err)
		}
		if fresh {
			res, err := r.run(ctx, t, c, inv)
			return res, err == nil, err
		}
		if inv.Status != sessions.ToolExecuting {
			return storedResult(inv), false, nil
		}
		// Another attempt is executing elsewhere: wait for its result.
		if time.Now().After(deadline) {
			return Result{}, false, ErrInFlight
		}
		tm := time.NewTimer(r.d.PollEvery)
		select {
		case <-ctx.Done():
			tm.Stop()
			return Result{}, false, ctx.Err()
		case <-tm.C:
		}
	}
}

// run executes a claimed invocation and stores its result.
func (r *Registry) run(ctx context.Context, t *Tool, c Call, inv sessions.Invocation) (Result, error) {
	start := time.Now()
	res := r.execute(ctx, t, c)
	out, err := json.Marshal(res)
	if err != nil {
		return Result{}, err
	}
	errMsg := ""
	if !res.Success {
		errMsg = res.Result
		if errMsg == "" {
			errMsg = "failed"
		}
	}
	// The result must be stored even if the request was cancelled meanwhile
	// (the sandbox will retry and must find it).
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.d.Sessions.FinishTool(fctx, inv, out, errMsg, time.Since(start)); err != nil {
		return Result{}, fmt.Errorf("store result of tool call %s: %w", c.ToolCallID, err)
	}
	r.d.Log.Info("platform tool executed", "session_id", c.Session.ID, "tool", t.Name,
		"tool_call_id", c.ToolCallID, "success", res.Success, "duration_ms", time.Since(start).Milliseconds())
	return res, nil
}

// execute runs the tool, turning errors, panics and wrong session types
// into failed results.
func (r *Registry) execute(ctx context.Context, t *Tool, c Call) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			r.d.Log.Error("platform tool panicked", "tool", t.Name, "session_id", c.Session.ID, "panic", fmt.Sprint(p))
			res = Failure("%s failed: internal error", t.Name)
		}
	}()
	if len(t.SessionTypes) > 0 && !slices.Contains(t.SessionTypes, c.Session.SessionType) {
		return Failure("%s is only available in %v sessions", t.Name, t.SessionTypes)
	}
	res, err := t.Execute(ctx, c)
	if err != nil {
		r.d.Log.Error("platform tool failed", "tool", t.Name, "session_id", c.Session.ID, "error", err)
		return Failure("%s failed: %v", t.Name, err)
	}
	return res
}

func storedResult(inv sessions.Invocation) Result {
	var res Result
	if len(inv.Output) > 0 && json.Unmarshal(inv.Output, &res) == nil && (res.Result != "" || res.Success) {
		return res
	}
	if inv.Status == sessions.ToolFailed {
		msg := "failed"
		if inv.Error != nil {
			msg = *inv.Error
		}
		return Result{Success: false, Result: msg}
	}
	return Result{Success: true, Result: "done"}
}

// RunAfter runs the tool's After hook for a fresh execution, detached from
// the request's cancellation, bounded by timeout.
func (r *Registry) RunAfter(ctx context.Context, name string, c Call, res Result, timeout time.Duration) {
	t, ok := r.Lookup(name)
	if !ok || t.After == nil {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	t.After(actx, c, res)
}
