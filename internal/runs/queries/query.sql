-- What the REST API reads and changes of automation runs
-- (internal/runs/query): an automation's runs, the attention list, a
-- member's claims, a run's detail and event log, claims and resolutions.
-- A summary is the run with its automation's name and its trigger event's
-- title and provider; pages are rows strictly after (at, after_id) in
-- (created_at DESC, id DESC) order.

-- ListAutomationRuns lists an automation's runs, only those in statuses
-- when it is not empty.
-- name: ListAutomationRuns :many
SELECT r.id, r.automation_id, a.name AS automation_name, r.trigger_event_id, r.trigger_id,
    e.title, e.provider, r.status, r.status_reason, r.failure_stage, r.error_code, r.error_message,
    r.session_id, r.configuration_id, r.assigned_to, r.assigned_at, r.queued_at, r.deadline_at,
    r.completed_at, r.resolved_at, r.created_at, r.updated_at
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id
JOIN trigger_events e ON e.id = r.trigger_event_id
WHERE r.org_id = sqlc.arg(org_id) AND r.automation_id = sqlc.arg(automation_id)
  AND (cardinality(sqlc.arg(statuses)::text[]) = 0 OR r.status = ANY(sqlc.arg(statuses)::text[]))
  AND (r.created_at, r.id) < (sqlc.arg(at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY r.created_at DESC, r.id DESC LIMIT sqlc.arg(max);

-- AttentionRuns are the unresolved failed, needs_human and timed_out runs
-- that ended within max_age_days, most recently ended first.
-- name: AttentionRuns :many
SELECT r.id, r.automation_id, a.name AS automation_name, r.trigger_event_id, r.trigger_id,
    e.title, e.provider, r.status, r.status_reason, r.failure_stage, r.error_code, r.error_message,
    r.session_id, r.configuration_id, r.assigned_to, r.assigned_at, r.queued_at, r.deadline_at,
    r.completed_at, r.resolved_at, r.created_at, r.updated_at
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id
JOIN trigger_events e ON e.id = r.trigger_event_id
WHERE r.org_id = sqlc.arg(org_id) AND r.status IN ('failed', 'needs_human', 'timed_out') AND r.resolved_at IS NULL
  AND r.completed_at >= now() - make_interval(days => sqlc.arg(max_age_days)::int)
ORDER BY r.completed_at DESC, r.id DESC LIMIT sqlc.arg(max);

-- ClaimedRuns are the runs a member claimed in the organization.
-- name: ClaimedRuns :many
SELECT r.id, r.automation_id, a.name AS automation_name, r.trigger_event_id, r.trigger_id,
    e.title, e.provider, r.status, r.status_reason, r.failure_stage, r.error_code, r.error_message,
    r.session_id, r.configuration_id, r.assigned_to, r.assigned_at, r.queued_at, r.deadline_at,
    r.completed_at, r.resolved_at, r.created_at, r.updated_at
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id
JOIN trigger_events e ON e.id = r.trigger_event_id
WHERE r.org_id = sqlc.arg(org_id) AND r.assigned_to = sqlc.arg(user_id)
  AND (r.created_at, r.id) < (sqlc.arg(at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY r.created_at DESC, r.id DESC LIMIT sqlc.arg(max);

-- name: RunSummary :one
SELECT r.id, r.automation_id, a.name AS automation_name, r.trigger_event_id, r.trigger_id,
    e.title, e.provider, r.status, r.status_reason, r.failure_stage, r.error_code, r.error_message,
    r.session_id, r.configuration_id, r.assigned_to, r.assigned_at, r.queued_at, r.deadline_at,
    r.completed_at, r.resolved_at, r.created_at, r.updated_at
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id
JOIN trigger_events e ON e.id = r.trigger_event_id
WHERE r.id = sqlc.arg(id) AND r.org_id = sqlc.arg(org_id);

-- RunDetail is a run's summary with everything else of the run and its
-- trigger event.
-- name: RunDetail :one
SELECT r.id, r.automation_id, a.name AS automation_name, r.trigger_event_id, r.trigger_id,
    e.title, e.provider, r.status, r.status_reason, r.failure_stage, r.error_code, r.error_message,
    r.session_id, r.configuration_id, r.assigned_to, r.assigned_at, r.queued_at, r.deadline_at,
    r.completed_at, r.resolved_at, r.created_at, r.updated_at,
    r.attempt, r.triggered_by, r.enrichment_started_at,
    r.enrichment_completed_at, r.execution_started_at, r.prompt_sent_at, r.last_activity_at, r.completion_id,
    r.enrichment_json, r.completion_json, r.enrichment_artifact_ref, r.completion_artifact_ref,
    r.resolved_by, r.resolution_note, e.id AS event_id, e.url AS event_url, e.normalized_event_type,
    e.provider_event_type, e.external_event_id, e.occurred_at
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id
JOIN trigger_events e ON e.id = r.trigger_event_id
WHERE r.id = sqlc.arg(id) AND r.org_id = sqlc.arg(org_id);

-- RunEventLog is a run's event log, oldest first.
-- name: RunEventLog :many
SELECT id, type, from_status, to_status, data, created_at
FROM automation_run_events WHERE run_id = sqlc.arg(run_id) ORDER BY id LIMIT sqlc.arg(max);

-- RunClaim is a run's claimant and resolution time.
-- name: RunClaim :one
SELECT assigned_to, resolved_at FROM automation_runs WHERE id = $1;

-- name: AssignRun :exec
UPDATE automation_runs SET assigned_to = sqlc.arg(user_id), assigned_at = now(), updated_at = now()
WHERE id = sqlc.arg(id);

-- name: UnassignRun :exec
UPDATE automation_runs SET assigned_to = NULL, assigned_at = NULL, updated_at = now()
WHERE id = $1;

-- name: RecordRunResolution :exec
UPDATE automation_runs SET resolved_by = sqlc.arg(user_id), resolved_at = now(), resolution_note = sqlc.narg(note)
WHERE id = sqlc.arg(id);
