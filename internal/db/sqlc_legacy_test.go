package db

// legacySQL is the hand-written SQL not yet moved to its table's owner
// (file → tables its statements name). It only shrinks:
// TestNoSQLOutsideOwners fails on SQL missing from it and on entries that no
// longer hold.
var legacySQL = map[string][]string{
	"internal/actions/redaction/redaction.go": {"action_redactions", "audit_log", "secrets"},
	"app/gateway.go":                             {"configuration_repos", "integrations", "repo_connections", "repos"},
	"app/repoaccess.go":                          {"configuration_repos", "integrations", "repo_connections", "repos"},
	"app/sessionprompt.go":                       {"configuration_repos", "configurations", "repos"},
	"internal/repos/store.go":                    {"configuration_repos", "configurations", "repos"},
	"internal/transcript/store.go":               {"session_message_search", "session_message_search_queue", "session_message_tombstones", "session_messages", "sessions"},
	"internal/triggers/pollgroups/pollgroups.go": {"trigger_poll_groups", "triggers"},
	"internal/triggers/store/automations.go":     {"configurations", "slack_installations"},
	"internal/triggers/store/events.go":          {"automation_run_events", "automation_runs", "trigger_events", "triggers"},
	"internal/triggers/store/manual.go":          {"triggers"},
	"internal/triggers/store/schedules.go":       {"schedules", "triggers"},
	"internal/triggers/store/store.go":           {"audit_log"},
	"internal/triggers/store/triggers.go":        {"integrations", "schedules", "trigger_events", "triggers"},
}
