-- Automation runs: what the run stages, the finalizer and the artifact
-- writer read and record of a run.

-- name: RunEnrichmentJSON :one
SELECT enrichment_json FROM automation_runs WHERE id = sqlc.arg(id) AND org_id::text = sqlc.arg(org_id)::text;

-- name: RunCompletionJSON :one
SELECT completion_json FROM automation_runs WHERE id = sqlc.arg(id) AND org_id::text = sqlc.arg(org_id)::text;

-- SetRunEnrichmentRef records the enrichment artifact (no row: already
-- recorded).
-- name: SetRunEnrichmentRef :one
UPDATE automation_runs SET enrichment_artifact_ref = sqlc.arg(ref)::text
WHERE id = sqlc.arg(id) AND enrichment_artifact_ref IS DISTINCT FROM sqlc.arg(ref)::text RETURNING true;

-- SetRunCompletionRef records the completion artifact (no row: already
-- recorded).
-- name: SetRunCompletionRef :one
UPDATE automation_runs SET completion_artifact_ref = sqlc.arg(ref)::text
WHERE id = sqlc.arg(id) AND completion_artifact_ref IS DISTINCT FROM sqlc.arg(ref)::text RETURNING true;

-- OverdueRuns are unfinished runs past their deadline, or running without
-- activity for inactivity.
-- name: OverdueRuns :many
SELECT id FROM automation_runs
WHERE status IN ('queued', 'enriching', 'ready', 'running') AND (
    deadline_at < now()
    OR (status = 'running' AND coalesce(last_activity_at, execution_started_at, updated_at) < now() - sqlc.arg(inactivity)::interval))
ORDER BY coalesce(deadline_at, updated_at) LIMIT sqlc.arg(max);

-- name: RunTriggeredBy :one
SELECT triggered_by FROM automation_runs WHERE id = $1;

-- name: SetRunSession :exec
UPDATE automation_runs SET session_id = sqlc.arg(session_id)::uuid, configuration_id = sqlc.narg(configuration_id)::uuid
WHERE id = sqlc.arg(id);

-- MarkPromptSent records the prompt once (no row: already sent).
-- name: MarkPromptSent :execrows
UPDATE automation_runs SET prompt_sent_at = now(), last_activity_at = now()
WHERE id = $1 AND prompt_sent_at IS NULL;

-- name: SaveRunEnrichment :exec
UPDATE automation_runs SET enrichment_json = sqlc.arg(enrichment) WHERE id = sqlc.arg(id);

-- RunNotification is what a run's notification says: the automation's
-- destination, the outcome, the trigger event, the session's pull requests
-- and the evidence count. The completion summary reads '' when unset;
-- has_completion_summary tells.
-- name: RunNotification :one
SELECT a.name AS automation_name, a.notification_destination_type, a.notification_channel_id,
    a.notification_slack_user_id, a.notification_slack_installation_id,
    (r.completion_json->>'summary_markdown' IS NOT NULL)::bool AS has_completion_summary,
    COALESCE(r.completion_json->>'summary_markdown', '')::text AS completion_summary,
    r.error_message, r.status_reason, te.title AS trigger_title, te.url AS trigger_url,
    COALESCE(s.pr_urls, '{}')::text[] AS pr_urls,
    (SELECT count(*) FROM session_evidence ev WHERE ev.run_id = r.id AND ev.org_id = r.org_id) AS evidence
FROM automation_runs r
JOIN automations a ON a.id = r.automation_id AND a.org_id = r.org_id
JOIN trigger_events te ON te.id = r.trigger_event_id AND te.org_id = r.org_id
LEFT JOIN sessions s ON s.id = r.session_id AND s.org_id = r.org_id
WHERE r.id = sqlc.arg(id) AND r.org_id::text = sqlc.arg(org_id)::text;
