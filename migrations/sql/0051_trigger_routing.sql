-- Routing indexes for the trigger processor. Every inbound webhook is routed
-- to the webhook triggers of its integration (GitHub App installation, Nango
-- connection, direct provider identity) or of its org and provider, disabled
-- triggers included: they record a skipped event (trigger_disabled), so the
-- partial "WHERE enabled" indexes of 0050 cannot serve these lookups.
CREATE INDEX triggers_webhook_integration_idx ON triggers (integration_id, provider) WHERE trigger_type = 'webhook';
CREATE INDEX triggers_webhook_org_provider_idx ON triggers (org_id, provider) WHERE trigger_type = 'webhook';
-- Nango forward and auth webhooks name a connection id without an org.
CREATE INDEX integrations_connection_idx ON integrations (connection_id);
