package runstages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// PromptInput is what a run's prompt is made of.
type PromptInput struct {
	RunID, CompletionID string
	Instructions        string
	Title, URL          string
	Provider            string
	// Enrichment is the run's enrichment payload (JSON), given to the agent
	// as the trigger context.
	Enrichment json.RawMessage
}

// maxContextBytes bounds the trigger context pasted into a prompt.
const maxContextBytes = 16 << 10

// BuildPrompt writes the prompt of an automation run: the automation's
// instructions, the trigger context, and what the agent must do to finish
// (call automation.complete with the run id and completion id). It is
// deterministic, so a resent prompt is the same prompt.
func BuildPrompt(in PromptInput) string {
	var b strings.Builder
	b.WriteString("You are running an automation.\n\n## Instructions\n\n")
	if s := strings.TrimSpace(in.Instructions); s != "" {
		b.WriteString(s)
	} else {
		b.WriteString("Investigate the event below and act on it as a careful engineer would.")
	}
	b.WriteString("\n\n## Trigger\n\n")
	if in.Title != "" {
		fmt.Fprintf(&b, "Title: %s\n", in.Title)
	}
	if in.Provider != "" {
		fmt.Fprintf(&b, "Source: %s\n", in.Provider)
	}
	if in.URL != "" {
		fmt.Fprintf(&b, "URL: %s\n", in.URL)
	}
	if len(in.Enrichment) > 0 {
		var pretty bytes.Buffer
		if json.Indent(&pretty, in.Enrichment, "", "  ") != nil {
			pretty.Reset()
			pretty.Write(in.Enrichment)
		}
		ctx := pretty.String()
		if len(ctx) > maxContextBytes {
			ctx = ctx[:maxContextBytes] + "\n… (truncated)"
		}
		b.WriteString("\nContext (JSON):\n```json\n")
		b.WriteString(ctx)
		b.WriteString("\n```\n")
	}
	b.WriteString("\n## When you are done\n\n")
	b.WriteString("Call the `automation.complete` tool exactly once with these values, whatever the outcome:\n\n")
	fmt.Fprintf(&b, "run_id: %s\ncompletion_id: %s\n\n", in.RunID, in.CompletionID)
	b.WriteString("outcome: `succeeded` when the work is done, `failed` when it cannot be done, " +
		"`needs_human` when a person must decide or review; summary_markdown: what you did and why, " +
		"with links (pull requests, issues) in citations.\n")
	return b.String()
}
