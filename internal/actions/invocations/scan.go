package invocations

import (
	"github.com/proliferate/proliferate/internal/actions/invocations/invocationsdb"
)

// fromRow is the Invocation of a stored row.
func fromRow(r invocationsdb.ActionInvocation) Invocation {
	i := Invocation{
		ID: r.ID, OrgID: r.OrgID, SessionID: r.SessionID, IntegrationID: r.IntegrationID, Integration: r.Integration,
		Action: r.Action, RiskLevel: r.RiskLevel, Mode: r.Mode, ModeSource: r.ModeSource, Drifted: r.Drifted,
		Params: r.Params, Status: r.Status, Error: r.Error, DeniedReason: r.DeniedReason, DurationMs: r.DurationMs,
		ApprovedBy: r.ApprovedBy, ApprovedAt: r.ApprovedAt, CompletedAt: r.CompletedAt, ExpiresAt: r.ExpiresAt,
		AutomationID: r.AutomationID, RunID: r.RunID, CreatedAt: r.CreatedAt, InvokedBy: r.InvokedBy,
		DefinitionHash: r.DefinitionHash, ReviewedHash: r.ReviewedHash, DefinitionDiff: scanDiff(r.DefinitionDiff),
	}
	if len(r.Result) > 0 {
		i.Result = r.Result
	}
	return i
}

// fromRows maps fromRow over rows.
func fromRows(rows []invocationsdb.ActionInvocation) []Invocation {
	out := make([]Invocation, len(rows))
	for k, r := range rows {
		out[k] = fromRow(r)
	}
	return out
}
