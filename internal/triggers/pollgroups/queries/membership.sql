-- Poll group membership: the group of an (org, provider, integration) and
-- its interval, kept as the API creates, changes and deletes triggers.

-- name: UpsertPollGroup :one
INSERT INTO trigger_poll_groups (org_id, provider, integration_id)
    VALUES (sqlc.arg(org_id), sqlc.arg(provider), sqlc.narg(integration_id))
    ON CONFLICT (org_id, provider, integration_id) DO UPDATE SET updated_at = now()
    RETURNING id;

-- SetPollGroupInterval sets the smallest interval the group's polling
-- triggers ask for under config_key: a valid integer config value is used,
-- anything else means default_seconds, clamped to min_seconds..max_seconds.
-- name: SetPollGroupInterval :exec
UPDATE trigger_poll_groups g SET interval_seconds = sub.iv, updated_at = now()
    FROM (SELECT least(greatest(coalesce(min(CASE WHEN jsonb_typeof(t.config->sqlc.arg(config_key)::text) = 'number'
            AND (t.config->>sqlc.arg(config_key)::text) ~ '^[0-9]{1,9}$' THEN (t.config->>sqlc.arg(config_key)::text)::int END),
            sqlc.arg(default_seconds)::int), sqlc.arg(min_seconds)::int), sqlc.arg(max_seconds)::int) AS iv
        FROM triggers t WHERE t.poll_group_id = sqlc.arg(id)::uuid AND t.trigger_type = 'polling') sub
    WHERE g.id = sqlc.arg(id)::uuid AND g.org_id = sqlc.arg(org_id)::uuid AND g.interval_seconds IS DISTINCT FROM sub.iv;

-- DeleteEmptyPollGroups deletes the org's groups without an enabled
-- polling trigger.
-- name: DeleteEmptyPollGroups :exec
DELETE FROM trigger_poll_groups g WHERE g.org_id = $1 AND NOT EXISTS (
    SELECT 1 FROM triggers t WHERE t.poll_group_id = g.id AND t.trigger_type = 'polling' AND t.enabled);
