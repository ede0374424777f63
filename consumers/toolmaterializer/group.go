package toolmaterializer

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the tool-materializer consumer group; it runs BatchHandler (one
// transaction per fetched batch of a partition).
var Group = group.Define(group.Group{
	Name: "tool-materializer",
	Description: "materializes per-session tool call records and per-organization, per-day rollups (calls, failures, duration histograms by tool; " +
		"messages, active time, pull requests and credits by automation and by person; LLM tokens per session) for the analytics API",
	Inputs: []string{topics.ToolsCalls, topics.SessionsTranscript, topics.SessionsEvents, topics.BillingUsage, topics.LLMSpend},
	Owns: []string{"analytics_tool_calls", "analytics_tool_daily", "analytics_tool_durations",
		"analytics_sessions", "analytics_session_usage", "analytics_applied_events"},
	Kind: group.Batch,
})
