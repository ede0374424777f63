-- Trigger events: what the events API (internal/triggers/store) reads and
-- writes, and what the LLM gate checks.

-- ListTriggerEvents is a page of the organization's trigger events with the
-- run each queued, newest first; a NULL filter does not filter (since is
-- inclusive, until exclusive).
-- name: ListTriggerEvents :many
SELECT e.id, e.trigger_id, t.automation_id, t.trigger_type, e.status, e.skip_reason, e.error_message,
        e.provider, e.provider_event_type, e.normalized_event_type, e.external_event_id, e.dedup_key, e.title, e.url,
        e.webhook_event_id, e.occurred_at, e.processed_at, e.created_at, r.id AS run_id, r.status AS run_status, r.triggered_by
    FROM trigger_events e JOIN triggers t ON t.id = e.trigger_id
    LEFT JOIN automation_runs r ON r.trigger_event_id = e.id
    WHERE e.org_id = sqlc.arg(org_id)
    AND (sqlc.narg(trigger_id)::uuid IS NULL OR e.trigger_id = sqlc.narg(trigger_id)::uuid)
    AND (sqlc.narg(automation_id)::uuid IS NULL OR t.automation_id = sqlc.narg(automation_id)::uuid)
    AND (sqlc.narg(status)::text IS NULL OR e.status = sqlc.narg(status)::text)
    AND (sqlc.narg(provider)::text IS NULL OR e.provider = sqlc.narg(provider)::text)
    AND (sqlc.narg(since)::timestamptz IS NULL OR e.created_at >= sqlc.narg(since)::timestamptz)
    AND (sqlc.narg(until)::timestamptz IS NULL OR e.created_at < sqlc.narg(until)::timestamptz)
    AND (e.created_at, e.id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
    ORDER BY e.created_at DESC, e.id DESC LIMIT sqlc.arg(max);

-- name: GetTriggerEvent :one
SELECT e.id, e.trigger_id, t.automation_id, t.trigger_type, e.status, e.skip_reason, e.error_message,
        e.provider, e.provider_event_type, e.normalized_event_type, e.external_event_id, e.dedup_key, e.title, e.url,
        e.webhook_event_id, e.occurred_at, e.processed_at, e.created_at, r.id AS run_id, r.status AS run_status, r.triggered_by,
        e.parsed_context
    FROM trigger_events e JOIN triggers t ON t.id = e.trigger_id
    LEFT JOIN automation_runs r ON r.trigger_event_id = e.id
    WHERE e.id = sqlc.arg(id) AND e.org_id = sqlc.arg(org_id);

-- name: TriggerEventStatusCounts :many
SELECT status, count(*) AS n FROM trigger_events WHERE trigger_id = $1 AND org_id = $2 GROUP BY status;

-- name: LockTriggerEventStatus :one
SELECT status FROM trigger_events WHERE id = $1 AND org_id = $2 FOR UPDATE;

-- name: SkipTriggerEventByHand :exec
UPDATE trigger_events SET status = 'skipped', skip_reason = 'manual', processed_at = now()
    WHERE id = $1 AND org_id = $2;

-- SkippedEventSource is what triggers.events carries of a skipped event
-- beyond the API's view of it.
-- name: SkippedEventSource :one
SELECT t.integration_id, t.poll_group_id, e.parsed_context::text AS parsed_context
    FROM trigger_events e JOIN triggers t ON t.id = e.trigger_id WHERE e.id = $1;

-- TriggerEventRecorded says whether the trigger already recorded an event
-- with the dedup key (a redelivery).
-- name: TriggerEventRecorded :one
SELECT EXISTS (SELECT 1 FROM trigger_events WHERE trigger_id = $1 AND dedup_key = $2);
