-- audit_events: the organization's audit trail, written by the
-- action-materializer group (Apply) and read by GET /api/v1/audit (List).

-- InsertAuditEvents inserts a batch of rows in one statement: rows is a
-- JSON array of objects with the table's columns (details an object); an
-- event id already present inserts nothing (redelivery, replay).
-- name: InsertAuditEvents :execrows
INSERT INTO audit_events (event_id, org_id, occurred_at, source, action, actor_type, actor_id, api_key_id,
    impersonator_id, target_type, target_id, request_id, details)
SELECT r.event_id, r.org_id, r.occurred_at, r.source, r.action, r.actor_type, r.actor_id, r.api_key_id,
    r.impersonator_id, r.target_type, r.target_id, r.request_id, r.details
FROM jsonb_to_recordset(sqlc.arg(rows)::jsonb) AS r(event_id uuid, org_id uuid, occurred_at timestamptz, source text,
    action text, actor_type text, actor_id text, api_key_id text, impersonator_id text, target_type text,
    target_id text, request_id text, details jsonb)
ON CONFLICT (event_id) DO NOTHING;

-- ListAuditEvents pages an organization's trail newest first, strictly
-- after the cursor (cursor_at, cursor_id). Empty filters match everything:
-- actor is a user or API key id, action an exact action, type the action's
-- subject (the part before the first dot), target a target id.
-- name: ListAuditEvents :many
SELECT event_id, org_id, occurred_at, source, action, actor_type, actor_id, api_key_id, impersonator_id,
    target_type, target_id, request_id, details
FROM audit_events
WHERE org_id = sqlc.arg(org_id)::uuid
    AND (sqlc.arg(actor)::text = '' OR actor_id = sqlc.arg(actor)::text OR api_key_id = sqlc.arg(actor)::text)
    AND (sqlc.arg(action)::text = '' OR action = sqlc.arg(action)::text)
    AND (sqlc.arg(type)::text = '' OR split_part(action, '.', 1) = sqlc.arg(type)::text)
    AND (sqlc.arg(target_type)::text = '' OR target_type = sqlc.arg(target_type)::text)
    AND (sqlc.arg(target)::text = '' OR target_id = sqlc.arg(target)::text)
    AND occurred_at >= sqlc.arg(from_at)::timestamptz AND occurred_at < sqlc.arg(to_at)::timestamptz
    AND (occurred_at, event_id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY occurred_at DESC, event_id DESC
LIMIT sqlc.arg(lim);

-- ListPersonalAuditEvents pages a person's own trail (events of no
-- organization whose actor is the person) newest first, strictly after the
-- cursor (cursor_at, cursor_id).
-- name: ListPersonalAuditEvents :many
SELECT event_id, org_id, occurred_at, source, action, actor_type, actor_id, api_key_id, impersonator_id,
    target_type, target_id, request_id, details
FROM audit_events
WHERE org_id IS NULL AND actor_id = sqlc.arg(user_id)::text
    AND (occurred_at, event_id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY occurred_at DESC, event_id DESC
LIMIT sqlc.arg(lim);
