-- audit_events: the organization's audit trail, written by the
-- action-materializer group (Apply) and read by GET /api/v1/audit (List).

-- InsertAuditEvent inserts one row per event, queued in a batch (one round
-- trip per batch of records); an event id already present inserts nothing
-- (redelivery, replay).
-- name: InsertAuditEvent :batchexec
INSERT INTO audit_events (event_id, org_id, occurred_at, source, action, actor_type, actor_id, api_key_id,
    impersonator_id, target_type, target_id, request_id, details)
VALUES (sqlc.arg(event_id), sqlc.arg(org_id), sqlc.arg(occurred_at), sqlc.arg(source), sqlc.arg(action),
    sqlc.arg(actor_type), sqlc.narg(actor_id), sqlc.narg(api_key_id), sqlc.narg(impersonator_id),
    sqlc.arg(target_type), sqlc.arg(target_id), sqlc.narg(request_id), sqlc.arg(details))
ON CONFLICT (event_id) DO NOTHING;

-- ListAuditEvents pages an organization's trail newest first, strictly
-- after the cursor (cursor_at, cursor_id). Empty filters match everything:
-- actor is a user or API key id, action an exact action, type the action's
-- subject (the part before the first dot), target a target id.
-- name: ListAuditEvents :many
SELECT event_id, org_id, occurred_at, source, action, actor_type, actor_id, api_key_id, impersonator_id,
    target_type, target_id, request_id, details
FROM audit_events
WHERE org_id = sqlc.arg(org_id)
    AND (sqlc.arg(actor)::text = '' OR actor_id = sqlc.arg(actor)::text OR api_key_id = sqlc.arg(actor)::text)
    AND (sqlc.arg(action)::text = '' OR action = sqlc.arg(action)::text)
    AND (sqlc.arg(type)::text = '' OR split_part(action, '.', 1) = sqlc.arg(type)::text)
    AND (sqlc.arg(target_type)::text = '' OR target_type = sqlc.arg(target_type)::text)
    AND (sqlc.arg(target)::text = '' OR target_id = sqlc.arg(target)::text)
    AND occurred_at >= sqlc.arg(from_at)::timestamptz AND occurred_at < sqlc.arg(to_at)::timestamptz
    AND (occurred_at, event_id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY occurred_at DESC, event_id DESC
LIMIT sqlc.arg(lim);
