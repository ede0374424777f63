-- The trigger event of a run (internal/runs): recorded when the event
-- queues, skips or fails (a redelivery of the same trigger and dedup key
-- records nothing: no row), and ended with its run.

-- name: RecordTriggerEvent :one
INSERT INTO trigger_events (org_id, trigger_id, status, skip_reason, error_message, provider,
        provider_event_type, normalized_event_type, external_event_id, dedup_key, title, url, parsed_context,
        webhook_event_id, occurred_at)
VALUES (sqlc.arg(org_id), sqlc.arg(trigger_id), sqlc.arg(status), sqlc.narg(skip_reason), sqlc.narg(error_message),
        sqlc.arg(provider), sqlc.arg(provider_event_type), sqlc.arg(normalized_event_type), sqlc.narg(external_event_id),
        sqlc.arg(dedup_key), sqlc.arg(title), sqlc.narg(url), sqlc.arg(parsed_context), sqlc.narg(webhook_event_id),
        sqlc.narg(occurred_at))
ON CONFLICT (trigger_id, dedup_key) DO NOTHING
RETURNING id;

-- EndRunTriggerEvent sets the status a run's trigger event ends with.
-- name: EndRunTriggerEvent :exec
UPDATE trigger_events SET status = sqlc.arg(status) WHERE id = sqlc.arg(id) AND status <> sqlc.arg(status);
