-- The recorded responses of an automation run's external side effects,
-- keyed by (organization, effect id), so a retried step replays the first
-- response instead of acting twice.

-- name: RecordEffect :one
-- Records the response unless the key is taken; returns it as stored
-- (jsonb-normalized), or no row when another caller recorded it first.
INSERT INTO automation_side_effects (org_id, run_id, effect_id, kind, provider, request_hash, response_json)
VALUES (sqlc.arg(org_id)::uuid, sqlc.narg(run_id)::uuid, sqlc.arg(effect_id), sqlc.arg(kind), sqlc.narg(provider)::text,
    sqlc.arg(request_hash)::text, sqlc.narg(response_json)::jsonb)
ON CONFLICT (org_id, effect_id) DO NOTHING RETURNING response_json;

-- name: Effect :one
SELECT request_hash, response_json FROM automation_side_effects
WHERE org_id = sqlc.arg(org_id)::uuid AND effect_id = sqlc.arg(effect_id);
