-- name: SaveServiceCommands :execrows
-- Replaces the configuration's service commands (the agent's
-- save_service_commands tool); 0 rows when the configuration is gone.
UPDATE configurations SET service_commands = @service_commands, service_commands_updated_at = now(),
    service_commands_updated_by = sqlc.narg('updated_by'), updated_at = now()
WHERE id = @id AND org_id = @org_id;
