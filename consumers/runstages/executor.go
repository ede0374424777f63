package runstages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/enrich"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/runs/target"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// Executor is the run-executor group's handler. For a ready run it resolves
// the target configuration, creates the run's session (idempotency key
// run:{id}:session) and moves the run to running with its session id, in one
// transaction; then it sends the prompt (idempotency key run:{id}:prompt)
// and records prompt_sent_at. The running event comes back to this group:
// if the process died between the commit and the prompt, that delivery sends
// it. The agent can only complete a run after the prompt, which is after the
// run is running with its session recorded.
func Executor(d Deps) consumers.Handler {
	log := d.logger()
	return func(ctx context.Context, m *consumers.Message) error {
		ev, err := lifecycle(m)
		if err != nil {
			return err
		}
		if ev.ToStatus != runs.StatusReady && ev.ToStatus != runs.StatusRunning {
			return nil
		}
		run, err := runs.Get(ctx, d.Pool, "", ev.RunID)
		if errors.Is(err, runs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if run.Status != runs.StatusReady && (run.Status != runs.StatusRunning || run.PromptSentAt != nil || run.SessionID == nil) {
			return nil // past this stage (a redelivery or a replay): nothing to load
		}
		a, err := loadAutomation(ctx, d.Pool, run)
		if errors.Is(err, runs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if run.Status == runs.StatusReady {
			if run, err = d.start(ctx, log, run, a); err != nil || run.Status != runs.StatusRunning {
				return err
			}
		}
		if run.Status != runs.StatusRunning || run.PromptSentAt != nil || run.SessionID == nil {
			return nil
		}
		return d.prompt(ctx, run, a)
	}
}

// automation is what execution reads of a run's automation.
type automation struct {
	name, instructions, modelID string
	target                      target.Automation
}

func loadAutomation(ctx context.Context, q triggersdb.DBTX, run runs.Run) (automation, error) {
	r, err := triggersdb.New(q).AutomationExecution(ctx, run.AutomationID)
	a := automation{name: r.Name, instructions: r.AgentInstructions, modelID: r.ModelID, target: target.Automation{
		Strategy: r.ConfigSelectionStrategy, DefaultConfigurationID: r.DefaultConfigurationID,
		FallbackConfigurationID: r.FallbackConfigurationID, AllowedConfigurationIDs: r.AllowedConfigurationIDs}}
	if errors.Is(err, pgx.ErrNoRows) {
		return a, runs.ErrNotFound
	}
	if err != nil {
		return a, fmt.Errorf("load automation of run %s: %w", run.ID, err)
	}
	return a, nil
}

// start resolves the target, creates the session and moves the run to
// running (or fails it). It returns the run as it now is.
func (d Deps) start(ctx context.Context, log *slog.Logger, run runs.Run, a automation) (runs.Run, error) {
	var enr enrich.Payload
	if len(run.EnrichmentJSON) > 0 {
		if err := json.Unmarshal(run.EnrichmentJSON, &enr); err != nil {
			return run, consumers.Permanent(fmt.Errorf("enrichment of run %s: %w", run.ID, err))
		}
	}
	tgt, err := target.Resolve(ctx, target.PG(d.Pool), run.OrgID, a.target, enr.SuggestedRepoID)
	if errors.Is(err, target.ErrNoTarget) {
		log.Info("run has no configuration to run in", "run_id", run.ID)
		return run, d.fail(ctx, run, "missing_configuration", "missing_configuration",
			"no configuration to run in: the automation has no default, no fallback, and no allowed configuration contains the suggested repository")
	}
	if err != nil {
		return run, fmt.Errorf("resolve target of run %s: %w", run.ID, err)
	}
	triggeredBy, err := runsdb.New(d.Pool).RunTriggeredBy(ctx, run.ID)
	if err != nil {
		return run, fmt.Errorf("load run %s: %w", run.ID, err)
	}
	sessionID, err := d.Sessions.CreateSession(ctx, runs.SessionRequest{
		IdempotencyKey: "run:" + run.ID + ":session", OrgID: run.OrgID, RunID: run.ID, AutomationID: run.AutomationID,
		ConfigurationID: tgt.ConfigurationID, ModelID: a.modelID, Title: sessionTitle(a.name, enr), TriggeredBy: triggeredBy,
	})
	if den, ok := billingDenial(err); ok {
		if den.Code == billing.DenyUnavailable {
			return run, fmt.Errorf("create session of run %s: billing could not be checked; retrying: %w", run.ID, err)
		}
		log.Info("session refused by billing", "run_id", run.ID, "code", den.Code, "action", den.Action)
		return run, d.failBilling(ctx, run, runs.StatusReady, den)
	}
	if errors.Is(err, runs.ErrSessionRejected) {
		log.Info("session request rejected", "run_id", run.ID, "error", err)
		return run, d.fail(ctx, run, "session_rejected", "session_rejected", err.Error())
	}
	if err != nil {
		return run, fmt.Errorf("create session of run %s: %w", run.ID, err)
	}
	err = inTx(ctx, d.Pool, func(tx pgx.Tx) error {
		locked, err := runs.Lock(ctx, tx, "", run.ID)
		if err != nil {
			return err
		}
		if locked.Status != runs.StatusReady {
			run = locked
			return nil
		}
		if err := runsdb.New(tx).SetRunSession(ctx, runsdb.SetRunSessionParams{ID: run.ID, SessionID: sessionID,
			ConfigurationID: tgt.ConfigurationID}); err != nil {
			return fmt.Errorf("record session of run %s: %w", run.ID, err)
		}
		if err := runs.LogEvent(ctx, tx, run.ID, "target_resolved", "", "", map[string]any{
			"type": tgt.Type, "reason": tgt.Reason, "configuration_id": tgt.ConfigurationID, "suggested_repo_id": tgt.SuggestedRepoID,
		}); err != nil {
			return err
		}
		if err := runs.LogEvent(ctx, tx, run.ID, "session_created", "", "", map[string]any{"session_id": sessionID}); err != nil {
			return err
		}
		locked.SessionID = &sessionID
		run, err = runs.Apply(ctx, tx, d.Codec, locked, runs.Move{From: []string{runs.StatusReady}, To: runs.StatusRunning,
			Data: map[string]any{"session_id": sessionID}})
		return err
	})
	return run, err
}

// fail moves a ready run to failed at the execution stage.
func (d Deps) fail(ctx context.Context, run runs.Run, reason, code, msg string) error {
	return inTx(ctx, d.Pool, func(tx pgx.Tx) error {
		locked, err := runs.Lock(ctx, tx, "", run.ID)
		if err != nil {
			return err
		}
		_, err = runs.Apply(ctx, tx, d.Codec, locked, runs.Move{From: []string{runs.StatusReady}, To: runs.StatusFailed,
			Reason: reason, Stage: runs.StageExecution, ErrorCode: code, ErrorMessage: msg})
		return err
	})
}

// prompt sends the run's prompt and records that it was sent.
func (d Deps) prompt(ctx context.Context, run runs.Run, a automation) error {
	ev, err := triggersdb.New(d.Pool).TriggerEventSummary(ctx, run.TriggerEventID)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("load trigger event of run %s: %w", run.ID, err)
	}
	title, url, provider := ev.Title, deref(ev.Url), ev.Provider
	text := BuildPrompt(PromptInput{RunID: run.ID, CompletionID: CompletionID(run.ID), Instructions: a.instructions,
		Title: title, URL: url, Provider: provider, Enrichment: run.EnrichmentJSON})
	if err := d.Sessions.SendPrompt(ctx, run.OrgID, *run.SessionID, text, "run:"+run.ID+":prompt"); err != nil {
		if den, ok := billingDenial(err); ok && den.Code != billing.DenyUnavailable {
			return d.failBilling(ctx, run, runs.StatusRunning, den)
		}
		if errors.Is(err, runs.ErrSessionRejected) {
			return d.failRunning(ctx, run, err)
		}
		return fmt.Errorf("send prompt of run %s: %w", run.ID, err)
	}
	return inTx(ctx, d.Pool, func(tx pgx.Tx) error {
		sent, err := runsdb.New(tx).MarkPromptSent(ctx, run.ID)
		if err != nil || sent == 0 {
			return err
		}
		return runs.LogEvent(ctx, tx, run.ID, "prompt_sent", "", "", map[string]any{"session_id": *run.SessionID})
	})
}

func (d Deps) failRunning(ctx context.Context, run runs.Run, cause error) error {
	return inTx(ctx, d.Pool, func(tx pgx.Tx) error {
		locked, err := runs.Lock(ctx, tx, "", run.ID)
		if err != nil {
			return err
		}
		_, err = runs.Apply(ctx, tx, d.Codec, locked, runs.Move{From: []string{runs.StatusRunning}, To: runs.StatusFailed,
			Reason: "prompt_rejected", Stage: runs.StageExecution, ErrorCode: "prompt_rejected", ErrorMessage: cause.Error()})
		return err
	})
}

// BillingDeniedCode is the error code of a run whose session the billing
// gate refused (HTTP 402 from the gateway); the error message starts with
// the denial's code (credits_exhausted, concurrent_session_limit, …).
const BillingDeniedCode = "billing_denied"

// billingDenial finds a billing refusal (the gateway's 402) in err.
func billingDenial(err error) (*billing.Denial, bool) {
	if d, ok := billing.AsDenial(err); ok {
		return d, true
	}
	var ge *client.Error
	if !errors.As(err, &ge) || ge.Status != http.StatusPaymentRequired {
		return nil, false
	}
	d := &billing.Denial{Code: ge.Code, Message: ge.Message}
	var details struct {
		Action string `json:"action"`
	}
	if len(ge.Details) > 0 && json.Unmarshal(ge.Details, &details) == nil {
		d.Action = details.Action
	}
	return d, true
}

// failBilling fails a run (ready or running) whose session billing
// refused: a clear, permanent reason instead of endless retries.
func (d Deps) failBilling(ctx context.Context, run runs.Run, from string, den *billing.Denial) error {
	msg := den.Code + ": " + den.Message
	if den.Action != "" {
		msg += " (action: " + den.Action + ")"
	}
	return inTx(ctx, d.Pool, func(tx pgx.Tx) error {
		locked, err := runs.Lock(ctx, tx, "", run.ID)
		if err != nil {
			return err
		}
		_, err = runs.Apply(ctx, tx, d.Codec, locked, runs.Move{From: []string{from}, To: runs.StatusFailed,
			Reason: BillingDeniedCode, Stage: runs.StageExecution, ErrorCode: BillingDeniedCode, ErrorMessage: msg,
			Data: map[string]any{"denial_code": den.Code, "action": den.Action}})
		return err
	})
}

var completionNamespace = uuid.MustParse("3c0d7a59-2a7e-4d55-8a43-0f6f8b3f1d20")

// CompletionID is the completion id the run's prompt gives the agent: stable
// for the run, so a resent prompt carries the same one.
func CompletionID(runID string) string {
	return "cmp_" + strings.ReplaceAll(uuid.NewSHA1(completionNamespace, []byte(runID)).String(), "-", "")
}

func sessionTitle(automationName string, enr enrich.Payload) string {
	t := automationName
	if enr.Summary.Title != "" {
		t += ": " + enr.Summary.Title
	}
	if len(t) > 200 {
		t = t[:200]
	}
	return t
}
