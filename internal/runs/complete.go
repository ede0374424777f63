package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/schemas"
)

// Completion is what the agent reports through the automation.complete tool.
type Completion struct {
	RunID        string `json:"run_id"`
	CompletionID string `json:"completion_id"`
	// Outcome is succeeded, failed or needs_human.
	Outcome         string   `json:"outcome"`
	SummaryMarkdown string   `json:"summary_markdown,omitempty"`
	Citations       []string `json:"citations,omitempty"`
	DiffRef         string   `json:"diff_ref,omitempty"`
	TestReportRef   string   `json:"test_report_ref,omitempty"`
	SideEffectRefs  []string `json:"side_effect_refs,omitempty"`
	// PRURLs are the pull requests of the run's session (its pr_urls:
	// opened through the gateway or named by the agent), filled in by
	// Complete from the session, whatever the agent sent.
	PRURLs []string `json:"pr_urls,omitempty"`
}

// Completion limits.
const (
	MaxCompletionIDLen = 200
	MaxSummaryLen      = 20000
	MaxRefs            = 50
	MaxRefLen          = 2000
)

// Outcomes an agent may report.
var Outcomes = []string{StatusSucceeded, StatusFailed, StatusNeedsHuman}

// Problem is one invalid field of a Completion.
type Problem struct{ Field, Message string }

// Validate lists what is wrong with c (nothing: nil).
func (c Completion) Validate() []Problem {
	var ps []Problem
	if c.RunID == "" {
		ps = append(ps, Problem{"run_id", "required"})
	}
	switch {
	case strings.TrimSpace(c.CompletionID) == "":
		ps = append(ps, Problem{"completion_id", "required"})
	case len(c.CompletionID) > MaxCompletionIDLen:
		ps = append(ps, Problem{"completion_id", fmt.Sprintf("at most %d characters", MaxCompletionIDLen)})
	}
	ok := false
	for _, o := range Outcomes {
		ok = ok || c.Outcome == o
	}
	if !ok {
		ps = append(ps, Problem{"outcome", "one of succeeded, failed, needs_human"})
	}
	if len(c.SummaryMarkdown) > MaxSummaryLen {
		ps = append(ps, Problem{"summary_markdown", fmt.Sprintf("at most %d characters", MaxSummaryLen)})
	}
	for name, refs := range map[string][]string{"citations": c.Citations, "side_effect_refs": c.SideEffectRefs} {
		if len(refs) > MaxRefs {
			ps = append(ps, Problem{name, fmt.Sprintf("at most %d entries", MaxRefs)})
		}
		for _, r := range refs {
			if len(r) > MaxRefLen {
				ps = append(ps, Problem{name, fmt.Sprintf("entries of at most %d characters", MaxRefLen)})
				break
			}
		}
	}
	for name, v := range map[string]string{"diff_ref": c.DiffRef, "test_report_ref": c.TestReportRef} {
		if len(v) > MaxRefLen {
			ps = append(ps, Problem{name, fmt.Sprintf("at most %d characters", MaxRefLen)})
		}
	}
	return ps
}

// ErrInvalid wraps a completion that failed Validate.
var ErrInvalid = errors.New("runs: invalid completion")

// ErrAlreadyCompleted is returned for a completion with another completion id
// than the one that finished the run, or for a run that ended without one
// (timed out, failed, canceled): the run's outcome stands.
var ErrAlreadyCompleted = errors.New("runs: run already finished")

// ErrNotRunning is returned for a completion of a run whose session has not
// been started yet.
var ErrNotRunning = errors.New("runs: run is not running")

// CompleteResult is the run after a completion.
type CompleteResult struct {
	Run Run
	// Replayed is true when the same completion id had already completed the
	// run: nothing was written and Run is as that completion left it.
	Replayed bool
}

// Complete applies an agent's completion in tx: running → succeeded | failed |
// needs_human, storing completion_id and completion_json, logging a
// completion row and the transition, and ending the trigger event. It is
// idempotent by completion id. orgID scopes the run ("" for the gateway,
// which checks sessionID instead); sessionID, when not empty, must be the
// run's session (a sandbox completes only its own run). A mismatch is
// ErrNotFound, so ids of other orgs and sessions leak nothing.
func Complete(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, orgID, sessionID string, c Completion) (CompleteResult, error) {
	if ps := c.Validate(); len(ps) > 0 {
		return CompleteResult{}, fmt.Errorf("%w: %s %s", ErrInvalid, ps[0].Field, ps[0].Message)
	}
	r, err := Lock(ctx, tx, orgID, c.RunID)
	if err != nil {
		return CompleteResult{}, err
	}
	if sessionID != "" && (r.SessionID == nil || *r.SessionID != sessionID) {
		return CompleteResult{}, ErrNotFound
	}
	if r.CompletionID != nil {
		if *r.CompletionID == c.CompletionID {
			return CompleteResult{Run: r, Replayed: true}, nil
		}
		return CompleteResult{Run: r}, fmt.Errorf("%w: run %s was completed with another completion id", ErrAlreadyCompleted, r.ID)
	}
	if Terminal(r.Status) {
		return CompleteResult{Run: r}, fmt.Errorf("%w: run %s is %s", ErrAlreadyCompleted, r.ID, r.Status)
	}
	if r.Status != StatusRunning {
		return CompleteResult{Run: r}, fmt.Errorf("%w: run %s is %s", ErrNotRunning, r.ID, r.Status)
	}
	c.PRURLs = nil
	if r.SessionID != nil {
		// The session's pull requests join the completion, so the run's
		// completion artifact and its notification carry their links.
		urls, err := sessionsdb.New(tx).SessionPRURLs(ctx, *r.SessionID)
		if err == nil {
			c.PRURLs = urls
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return CompleteResult{}, fmt.Errorf("read the pull requests of run %s: %w", r.ID, err)
		}
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return CompleteResult{}, err
	}
	if err := runsdb.New(tx).SetRunCompletion(ctx, runsdb.SetRunCompletionParams{ID: r.ID,
		CompletionID: &c.CompletionID, CompletionJson: raw}); err != nil {
		return CompleteResult{}, fmt.Errorf("store completion of run %s: %w", r.ID, err)
	}
	if err := LogEvent(ctx, tx, r.ID, "completion", "", "", map[string]any{
		"completion_id": c.CompletionID, "outcome": c.Outcome}); err != nil {
		return CompleteResult{}, err
	}
	summary := c.SummaryMarkdown
	if len(summary) > 4000 {
		summary = summary[:4000]
	}
	updated, err := Apply(ctx, tx, codec, r, Move{From: []string{StatusRunning}, To: c.Outcome, Reason: "completed",
		Outcome: c.Outcome, Summary: summary, CompletionID: c.CompletionID})
	if err != nil {
		return CompleteResult{}, err
	}
	return CompleteResult{Run: updated}, nil
}
