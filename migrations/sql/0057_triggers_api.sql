-- Triggers API (api/triggers): at most one "Run Now" trigger per automation
-- (get-or-create without races), and the indexes of the API's lists.

-- Every automation has at most one manual trigger; Run Now inserts it with
-- ON CONFLICT DO NOTHING and reuses it.
CREATE UNIQUE INDEX triggers_manual_uidx ON triggers (automation_id) WHERE trigger_type = 'manual';

-- GET /trigger-events: an organization's events, newest first (cursor pages).
CREATE INDEX trigger_events_org_idx ON trigger_events (org_id, created_at DESC, id DESC);

-- Pending (queued) event counts per trigger in GET /triggers.
CREATE INDEX trigger_events_pending_idx ON trigger_events (trigger_id) WHERE status = 'queued';

-- GET /schedules?automation_id=… and an automation's schedules.
CREATE INDEX schedules_automation_idx ON schedules (automation_id);
