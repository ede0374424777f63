-- audit_log: the security record of who did what (sign-in events, API
-- keys, roles), written in the change's transaction next to audit.Emit.

-- name: InsertAuditLog :exec
-- org_id is NULL for a person's own events (no organization); details is
-- a JSON object.
INSERT INTO audit_log (org_id, actor_id, action, target_type, target_id, details, request_id)
VALUES (sqlc.narg(org_id), sqlc.narg(actor_id), sqlc.arg(action), sqlc.arg(target_type), sqlc.arg(target_id),
    sqlc.arg(details), sqlc.arg(request_id));
