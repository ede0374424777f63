package actionmaterializer

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the action-materializer consumer group; it runs BatchHandler
// (one statement per fetched batch of a partition).
var Group = group.Define(group.Group{
	Name:        "action-materializer",
	Description: "materializes the organization's audit trail in Postgres (audit_events) from action invocations (who approved or denied what) and audit events (secrets, members, API keys, integrations, action modes), for GET /api/v1/audit",
	Inputs:      []string{topics.ActionsInvocations, topics.AuditEvents},
	Owns:        []string{"audit_events"},
	Kind:        group.Batch,
})
