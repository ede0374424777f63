-- Deleting an organization is scheduled, not immediate: its owner asks
-- (DELETE /api/v1/orgs/{id}), the organization is marked with when it was
-- asked and when it will be deleted (ORG_DELETION_GRACE later), and until
-- then an owner may restore it (POST /api/v1/orgs/{id}/restore). While the
-- mark stands, its sessions are paused (reason org_deletion), nothing new
-- starts (sessions, runs, trigger events are skipped with
-- org_pending_deletion), API keys cannot act in it, and its people may only
-- read. After delete_after the scheduler's org-deletion job finalizes:
-- integrations disconnected, the row deleted with everything that cascades
-- from it, and audit.events gets org.deleted.
ALTER TABLE organizations
    ADD COLUMN deletion_scheduled_at timestamptz,
    ADD COLUMN delete_after          timestamptz,
    ADD COLUMN deletion_scheduled_by uuid REFERENCES users (id) ON DELETE SET NULL,
    ADD CONSTRAINT organizations_deletion_check CHECK ((deletion_scheduled_at IS NULL) = (delete_after IS NULL));
-- The org-deletion job's scans: pending organizations, due first.
CREATE INDEX organizations_delete_after_idx ON organizations (delete_after) WHERE delete_after IS NOT NULL;

-- Trigger events of an organization scheduled for deletion are recorded
-- as skipped, never queued.
ALTER TABLE trigger_events DROP CONSTRAINT trigger_events_skip_reason_check;
ALTER TABLE trigger_events ADD CONSTRAINT trigger_events_skip_reason_check
    CHECK (skip_reason IN ('filter_mismatch', 'trigger_disabled', 'automation_disabled', 'manual', 'duplicate',
                           'llm_filter_rejected', 'llm_filter_failed', 'org_pending_deletion'));
