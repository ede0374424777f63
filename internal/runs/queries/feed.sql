-- The organization's run feed (GET /runs): every automation's runs, newest
-- first, filtered on status, automation, origin (the trigger event's
-- provider), assignment and "needs attention", each with its session.

-- name: OrgRunFeed :many
SELECT r.id, r.automation_id, a.name AS automation_name, r.trigger_event_id, r.trigger_id,
    e.title, e.provider, r.status, r.status_reason, r.failure_stage, r.error_code, r.error_message,
    r.session_id, r.configuration_id, r.assigned_to, r.assigned_at, r.queued_at, r.deadline_at,
    r.completed_at, r.resolved_at, r.created_at, r.updated_at,
    s.title AS session_title, s.status AS session_status, s.pause_reason AS session_pause_reason,
    s.outcome AS session_outcome, s.latest_task AS session_latest_task, s.pr_urls AS session_pr_urls,
    s.last_activity_at AS session_last_activity_at
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id
JOIN trigger_events e ON e.id = r.trigger_event_id
LEFT JOIN sessions s ON s.id = r.session_id AND s.org_id = r.org_id
WHERE r.org_id = sqlc.arg(org_id)
  AND (cardinality(sqlc.arg(statuses)::text[]) = 0 OR r.status = ANY(sqlc.arg(statuses)::text[]))
  AND (sqlc.narg(automation_id)::uuid IS NULL OR r.automation_id = sqlc.narg(automation_id)::uuid)
  AND (cardinality(sqlc.arg(providers)::text[]) = 0 OR e.provider = ANY(sqlc.arg(providers)::text[]))
  AND (sqlc.narg(assigned_to)::uuid IS NULL OR r.assigned_to = sqlc.narg(assigned_to)::uuid)
  AND (NOT sqlc.arg(unassigned)::bool OR r.assigned_to IS NULL)
  AND (NOT sqlc.arg(attention)::bool OR (r.status IN ('failed', 'needs_human', 'timed_out') AND r.resolved_at IS NULL))
  AND (r.created_at, r.id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY r.created_at DESC, r.id DESC
LIMIT sqlc.arg(max_rows);
