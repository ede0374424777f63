-- Integrations: what other packages read of an organization's integrations.

-- NangoConnectionIntegrations are the Nango integrations of a connection
-- (and provider config key, when given), across organizations.
-- name: NangoConnectionIntegrations :many
SELECT id, org_id FROM integrations
WHERE connection_id = sqlc.arg(connection_id)::text AND provider = 'nango'
    AND (sqlc.arg(provider_config_key)::text = '' OR provider_config_key = sqlc.arg(provider_config_key)::text);
