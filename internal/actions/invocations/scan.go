package invocations

import (
	"github.com/jackc/pgx/v5"
)

// Cols is the column list every query of action_invocations selects (in
// Scan's order); alias-free, so use it with the table unqualified or
// qualify it yourself.
const Cols = `id::text, org_id::text, session_id::text, integration_id::text, integration, action, risk_level, mode,
	mode_source, drifted, params, status, result, error, denied_reason, duration_ms, approved_by::text, approved_at,
	completed_at, expires_at, automation_id::text, run_id::text, created_at, invoked_by::text, definition_hash,
	reviewed_hash, definition_diff`

// Scan reads one row selected with Cols.
func Scan(row pgx.Row) (Invocation, error) {
	var i Invocation
	var params, result, diff []byte
	err := row.Scan(&i.ID, &i.OrgID, &i.SessionID, &i.IntegrationID, &i.Integration, &i.Action, &i.RiskLevel, &i.Mode,
		&i.ModeSource, &i.Drifted, &params, &i.Status, &result, &i.Error, &i.DeniedReason, &i.DurationMs, &i.ApprovedBy,
		&i.ApprovedAt, &i.CompletedAt, &i.ExpiresAt, &i.AutomationID, &i.RunID, &i.CreatedAt, &i.InvokedBy,
		&i.DefinitionHash, &i.ReviewedHash, &diff)
	i.Params = params
	i.DefinitionDiff = scanDiff(diff)
	if len(result) > 0 {
		i.Result = result
	}
	return i, err
}
