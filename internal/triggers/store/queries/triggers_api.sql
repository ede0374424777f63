-- Triggers: what the triggers API (internal/triggers/store) reads and
-- writes, and what pollgroups moves of a trigger's group.

-- A trigger as the API shows it: its schedule, its integration when the
-- caller may see it (org-visible, or private and their own) and its count of
-- queued events.
-- name: GetTrigger :one
SELECT t.id, t.automation_id, t.trigger_type, t.provider, t.enabled, t.config,
        t.integration_id, t.webhook_path, t.poll_group_id, s.id AS schedule_id, t.created_by, t.created_at, t.updated_at,
        i.id AS ref_id, i.integration_id AS ref_kind, i.provider AS ref_provider, i.display_name AS ref_display_name, i.status AS ref_status,
        (SELECT count(*) FROM trigger_events e WHERE e.trigger_id = t.id AND e.status = 'queued')::bigint AS pending_event_count
    FROM triggers t
    LEFT JOIN schedules s ON s.trigger_id = t.id
    LEFT JOIN integrations i ON i.id = t.integration_id AND (i.visibility = 'org' OR i.created_by = sqlc.narg(user_id)::uuid)
    WHERE t.org_id = sqlc.arg(org_id) AND t.id = sqlc.arg(id);

-- ListTriggers is GetTrigger for a page of the organization's triggers,
-- newest first; a NULL filter does not filter.
-- name: ListTriggers :many
SELECT t.id, t.automation_id, t.trigger_type, t.provider, t.enabled, t.config,
        t.integration_id, t.webhook_path, t.poll_group_id, s.id AS schedule_id, t.created_by, t.created_at, t.updated_at,
        i.id AS ref_id, i.integration_id AS ref_kind, i.provider AS ref_provider, i.display_name AS ref_display_name, i.status AS ref_status,
        (SELECT count(*) FROM trigger_events e WHERE e.trigger_id = t.id AND e.status = 'queued')::bigint AS pending_event_count
    FROM triggers t
    LEFT JOIN schedules s ON s.trigger_id = t.id
    LEFT JOIN integrations i ON i.id = t.integration_id AND (i.visibility = 'org' OR i.created_by = sqlc.narg(user_id)::uuid)
    WHERE t.org_id = sqlc.arg(org_id)
    AND (sqlc.narg(automation_id)::uuid IS NULL OR t.automation_id = sqlc.narg(automation_id)::uuid)
    AND (sqlc.narg(provider)::text IS NULL OR t.provider = sqlc.narg(provider)::text)
    AND (sqlc.narg(trigger_type)::text IS NULL OR t.trigger_type = sqlc.narg(trigger_type)::text)
    AND (t.created_at, t.id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
    ORDER BY t.created_at DESC, t.id DESC LIMIT sqlc.arg(max);

-- name: InsertTrigger :exec
INSERT INTO triggers (id, org_id, automation_id, trigger_type, provider, enabled, config,
        integration_id, webhook_path, webhook_secret_sealed, created_by)
    VALUES (sqlc.arg(id), sqlc.arg(org_id), sqlc.arg(automation_id), sqlc.arg(trigger_type), sqlc.arg(provider),
        sqlc.arg(enabled), sqlc.arg(config), sqlc.narg(integration_id), sqlc.narg(webhook_path),
        sqlc.narg(webhook_secret_sealed), sqlc.narg(created_by));

-- InsertScheduleTrigger is a schedule's own trigger.
-- name: InsertScheduleTrigger :exec
INSERT INTO triggers (id, org_id, automation_id, trigger_type, provider, enabled, created_by)
    VALUES (sqlc.arg(id), sqlc.arg(org_id), sqlc.arg(automation_id), 'scheduled', 'scheduled', sqlc.arg(enabled), sqlc.narg(created_by));

-- EnsureManualTrigger creates the automation's Run Now trigger unless it
-- has one.
-- name: EnsureManualTrigger :exec
INSERT INTO triggers (org_id, automation_id, trigger_type, provider, enabled, created_by)
    VALUES (sqlc.arg(org_id), sqlc.arg(automation_id), 'manual', 'manual', true, sqlc.narg(created_by))
    ON CONFLICT (automation_id) WHERE trigger_type = 'manual' DO NOTHING;

-- name: ManualTriggerID :one
SELECT id FROM triggers WHERE automation_id = sqlc.arg(automation_id) AND org_id = sqlc.arg(org_id) AND trigger_type = 'manual';

-- UpdateTrigger changes the config and the enabled flag (NULL keeps
-- either); a trigger that ends up disabled leaves its poll group.
-- name: UpdateTrigger :exec
UPDATE triggers SET config = coalesce(sqlc.narg(config)::jsonb, config), enabled = coalesce(sqlc.narg(enabled)::boolean, enabled),
        poll_group_id = CASE WHEN coalesce(sqlc.narg(enabled)::boolean, enabled) THEN poll_group_id END, updated_at = now()
    WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: LockTrigger :exec
SELECT 1 FROM triggers WHERE id = $1 AND org_id = $2 FOR UPDATE;

-- name: DeleteTrigger :exec
DELETE FROM triggers WHERE id = $1 AND org_id = $2;

-- name: SetTriggerSecret :exec
UPDATE triggers SET webhook_secret_sealed = sqlc.arg(webhook_secret_sealed)::text, updated_at = now()
    WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- SetTriggerEnabled keeps a schedule's trigger enabled exactly when the
-- schedule is.
-- name: SetTriggerEnabled :exec
UPDATE triggers SET enabled = sqlc.arg(enabled)::boolean, updated_at = now()
    WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND enabled <> sqlc.arg(enabled)::boolean;

-- Poll group membership (internal/triggers/pollgroups).

-- name: LockTriggerForPollGroup :one
SELECT org_id, provider, trigger_type, integration_id FROM triggers WHERE id = $1 FOR UPDATE;

-- name: ClearTriggerPollGroup :exec
UPDATE triggers SET poll_group_id = NULL WHERE id = $1 AND poll_group_id IS NOT NULL;

-- name: SetTriggerPollGroup :exec
UPDATE triggers SET poll_group_id = sqlc.arg(poll_group_id)::uuid
    WHERE id = sqlc.arg(id) AND poll_group_id IS DISTINCT FROM sqlc.arg(poll_group_id)::uuid;
