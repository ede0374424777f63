package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Platform tool names.
const (
	SaveSnapshot        = "save_snapshot"
	SaveServiceCommands = "save_service_commands"
	AutomationComplete  = "automation.complete"
	// AutomationCompleteAlias is the underscore spelling (tool file names
	// cannot always carry a dot).
	AutomationCompleteAlias = "automation_complete"
	RequestEnvVariables     = "request_env_variables"
)

func platformTools(d Deps) []Tool {
	return []Tool{
		{Name: SaveSnapshot, Execute: d.saveSnapshot},
		{Name: SaveServiceCommands, SessionTypes: []string{sessions.TypeSetup}, Execute: d.saveServiceCommands},
		{Name: AutomationComplete, Aliases: []string{AutomationCompleteAlias}, Execute: d.automationComplete, After: d.afterAutomationComplete},
		{Name: RequestEnvVariables, Execute: d.requestEnvVariables},
		VerifyTool(d),
	}
}

// decodeArgs decodes strictly (unknown fields are an error the agent sees).
func decodeArgs(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid arguments: %v", err)
	}
	return nil
}

// saveSnapshot snapshots the sandbox; in a setup session the snapshot also
// becomes its configuration's (ready) snapshot.
func (d Deps) saveSnapshot(ctx context.Context, c Call) (Result, error) {
	var args struct {
		Message string `json:"message"`
	}
	if err := decodeArgs(c.Args, &args); err != nil {
		return Failure("%v", err), nil
	}
	// The message is the agent's: redacted before it is stored and
	// replayed (session_tool_invocations) like a completion.
	if args.Message != "" {
		red, err := OutboundRedactor(ctx, d.Redactors, c.Session.OrgID, c.Secrets)
		if err != nil {
			return Result{}, err
		}
		args.Message = red.String(args.Message)
	}
	rt, err := c.Runtime(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("session runtime: %w", err)
	}
	id, err := rt.SaveSnapshot(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("snapshot: %w", err)
	}
	target := "session"
	if c.Session.SessionType == sessions.TypeSetup && c.Session.ConfigurationID != nil {
		pb := d.Prebuilt
		if pb == nil {
			pb = &prebuilds.Resolver{Pool: d.Pool, Log: d.Log}
		}
		ok, err := pb.Record(ctx, c.Session, id)
		if err != nil {
			return Result{}, err
		}
		if ok {
			target = "configuration"
		}
	}
	msg := "Snapshot saved."
	if args.Message != "" {
		msg = "Snapshot saved: " + args.Message
	}
	return Result{Success: true, Result: msg, Data: map[string]any{"snapshotId": id, "target": target}}, nil
}

// ServiceCommand is one entry of save_service_commands (stored in
// configurations.service_commands as {name, command, cwd, workspace_path}).
type ServiceCommand = repos.ServiceCommand

// ValidateServiceCommands checks the commands with the API's own rules
// (repos.CheckServiceCommands: 1–10 commands with unique names of 1–100
// characters without "/" or "\", commands of 1–1000 characters, relative
// cwd and workspace paths) and returns them normalized, or the problems.
func ValidateServiceCommands(cmds []ServiceCommand) ([]ServiceCommand, []string) {
	clean, fes := repos.CheckServiceCommands("commands", cmds)
	var probs []string
	for _, fe := range fes {
		probs = append(probs, fe.Field+": "+fe.Problem)
	}
	return clean, probs
}

func (d Deps) saveServiceCommands(ctx context.Context, c Call) (Result, error) {
	var args struct {
		Commands []struct {
			Name               string `json:"name"`
			Command            string `json:"command"`
			Cwd                string `json:"cwd"`
			WorkspacePath      string `json:"workspacePath"`
			WorkspacePathSnake string `json:"workspace_path"`
		} `json:"commands"`
	}
	if err := decodeArgs(c.Args, &args); err != nil {
		return Failure("%v", err), nil
	}
	cmds := make([]ServiceCommand, 0, len(args.Commands))
	for _, a := range args.Commands {
		wp := a.WorkspacePath
		if wp == "" {
			wp = a.WorkspacePathSnake
		}
		cmds = append(cmds, ServiceCommand{Name: a.Name, Command: a.Command, Cwd: a.Cwd, WorkspacePath: wp})
	}
	cmds, probs := ValidateServiceCommands(cmds)
	if len(probs) > 0 {
		return Failure("Invalid arguments: %s", strings.Join(probs, "; ")), nil
	}
	if c.Session.ConfigurationID == nil {
		return Failure("this session has no configuration to save service commands to"), nil
	}
	raw, err := json.Marshal(cmds)
	if err != nil {
		return Result{}, err
	}
	n, err := prebuildsdb.New(d.Pool).SaveServiceCommands(ctx, prebuildsdb.SaveServiceCommandsParams{
		ServiceCommands: raw, UpdatedBy: c.Session.CreatedBy, ID: *c.Session.ConfigurationID, OrgID: c.Session.OrgID,
	})
	if err != nil {
		return Result{}, fmt.Errorf("save service commands: %w", err)
	}
	if n == 0 {
		return Failure("the session's configuration no longer exists"), nil
	}
	return Result{Success: true, Result: fmt.Sprintf("Saved %d service command(s).", len(cmds)),
		Data: map[string]any{"configurationId": *c.Session.ConfigurationID, "commandCount": len(cmds)}}, nil
}

// automationComplete applies the completion to the session's run
// (runs.Complete, scoped to this session) in one transaction.
func (d Deps) automationComplete(ctx context.Context, c Call) (Result, error) {
	var comp runs.Completion
	if err := decodeArgs(c.Args, &comp); err != nil {
		return Failure("%v", err), nil
	}
	comp, err := d.redactCompletion(ctx, c, comp)
	if err != nil {
		return Result{}, err
	}
	var res runs.CompleteResult
	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = runs.Complete(ctx, tx, d.Codec, c.Session.OrgID, c.Session.ID, comp)
		return err
	})
	switch {
	case errors.Is(err, runs.ErrInvalid):
		return Failure("Invalid arguments: %v", strings.TrimPrefix(err.Error(), runs.ErrInvalid.Error()+": ")), nil
	case errors.Is(err, runs.ErrNotFound):
		return Failure("run %s is not this session's run", comp.RunID), nil
	case errors.Is(err, runs.ErrAlreadyCompleted), errors.Is(err, runs.ErrNotRunning):
		return Failure("%v", err), nil
	case err != nil:
		return Result{}, fmt.Errorf("complete run %s: %w", comp.RunID, err)
	}
	msg := fmt.Sprintf("Run %s completed with outcome %s.", res.Run.ID, comp.Outcome)
	if res.Replayed {
		msg = fmt.Sprintf("Run %s was already completed with this completion id (outcome %s).", res.Run.ID, res.Run.Status)
	}
	return Result{Success: true, Result: msg, Data: map[string]any{
		"runId": res.Run.ID, "status": res.Run.Status, "completionId": comp.CompletionID, "replayed": res.Replayed},
		after: comp}, nil
}

// redactCompletion replaces, in what the agent reports, the organization's
// secrets and patterns, the token formats and the values the session
// received: an agent that prints a secret into its summary (talked into it,
// or by mistake) must not carry it into the run API, runs.lifecycle, the
// run's artifact or its notification. The agent's own session, which had
// the value, is the only place it stays.
func (d Deps) redactCompletion(ctx context.Context, c Call, comp runs.Completion) (runs.Completion, error) {
	red, err := OutboundRedactor(ctx, d.Redactors, c.Session.OrgID, c.Secrets)
	if err != nil {
		return comp, err
	}
	comp.SummaryMarkdown = red.String(comp.SummaryMarkdown)
	comp.DiffRef, comp.TestReportRef = red.String(comp.DiffRef), red.String(comp.TestReportRef)
	for _, refs := range [][]string{comp.Citations, comp.SideEffectRefs} {
		for i := range refs {
			refs[i] = red.String(refs[i])
		}
	}
	return comp, nil
}

// OutboundRedactor is the redactor of what a session's agent writes that
// leaves the session (a run's completion, a snapshot's message, a pull
// request's title and body): the organization's secrets and patterns and
// the token formats (reds; nil: the token formats only) and the values the
// session received.
func OutboundRedactor(ctx context.Context, reds Redactors, orgID string, received []string) (*actions.Redactor, error) {
	red := actions.NewRedactor()
	if reds != nil {
		r, err := reds.Redactor(ctx, orgID)
		if err != nil {
			return nil, fmt.Errorf("redaction of organization %s: %w", orgID, err)
		}
		red = r
	}
	return red.With(received...), nil
}

// afterAutomationComplete terminates the session with the run's outcome
// once the agent has its answer (automation fast path: no idle snapshot),
// with the completion automationComplete redacted.
func (d Deps) afterAutomationComplete(ctx context.Context, c Call, r Result) {
	comp, ok := r.after.(runs.Completion)
	if !r.Success || !ok {
		return
	}
	rt, err := c.Runtime(ctx)
	if err == nil {
		err = rt.Terminate(ctx, "automation_complete", comp.Outcome, comp.SummaryMarkdown)
	}
	if err != nil {
		d.Log.Error("terminate session after automation.complete", "session_id", c.Session.ID, "error", err)
	}
}

// EnvKey is one variable requested by request_env_variables.
type EnvKey = hub.EnvKeySpec

// requestEnvVariables surfaces the request to the session's members and
// waits for their answer (hub.AwaitEnv: the submit_env WebSocket message or
// POST /proliferate/{id}/env) or the timeout. The answer names the keys,
// never their values: those are in the sandbox (the runtime env file its
// shell commands source, optionally a workspace env file).
func (d Deps) requestEnvVariables(ctx context.Context, c Call) (Result, error) {
	var args struct {
		Keys []EnvKey `json:"keys"`
	}
	if err := decodeArgs(c.Args, &args); err != nil {
		return Failure("%v", err), nil
	}
	if len(args.Keys) == 0 || len(args.Keys) > 50 {
		return Failure("Invalid arguments: keys must have 1 to 50 entries"), nil
	}
	names := make([]string, 0, len(args.Keys))
	seen := map[string]bool{}
	for i, k := range args.Keys {
		if err := secrets.ValidateKey("key", k.Key); err != nil || !sandbox.SessionEnvAllowed(k.Key) {
			return Failure("Invalid arguments: keys[%d].key must be a variable name (letters, digits, _; not starting with a digit; "+
				"not PROLIFERATE_*, OPENCODE_* nor one the sandbox sets such as PATH or HOME)", i), nil
		}
		if seen[k.Key] {
			return Failure("Invalid arguments: keys[%d].key %s is requested twice", i, k.Key), nil
		}
		seen[k.Key] = true
		if k.Type != "" && k.Type != "env" && k.Type != "secret" {
			return Failure("Invalid arguments: keys[%d].type must be env or secret", i), nil
		}
		names = append(names, k.Key)
	}
	rt, err := c.Runtime(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("session runtime: %w", err)
	}
	ans, err := rt.AwaitEnv(ctx, hub.EnvRequest{ToolCallID: c.ToolCallID, Keys: args.Keys})
	if err != nil {
		return Result{}, fmt.Errorf("environment request: %w", err)
	}
	if ans.Status != protocol.EnvSubmitted {
		return Result{Success: false, Result: fmt.Sprintf(
			"Nobody provided %s within %s: the request timed out. Continue without them if you can, "+
				"or tell the user what is missing and why, and ask again later.", strings.Join(names, ", "), ans.Timeout),
			Data: map[string]any{"keys": names, "timedOut": true}}, nil
	}
	msg := fmt.Sprintf("The user provided %s. They are exported in your shell commands from now on "+
		"(bash sources ~/%s); ~/.proliferate/env.json holds them too: read single keys with jq, never print the files.",
		strings.Join(ans.Keys, ", "), sandbox.RuntimeEnvFile)
	if ans.EnvFile != "" {
		msg += fmt.Sprintf(" They were also written to %s in the workspace (git-ignored).", ans.EnvFile)
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(ans.Keys, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		msg += " Not provided (optional): " + strings.Join(missing, ", ") + "."
	}
	saved := []string{}
	for _, r := range ans.Results {
		if r.Persisted || r.AlreadyExisted {
			saved = append(saved, r.Key)
		}
	}
	data := map[string]any{"keys": ans.Keys, "saved": saved}
	if ans.EnvFile != "" {
		data["envFile"] = ans.EnvFile
	}
	return Result{Success: true, Result: msg, Data: data}, nil
}
