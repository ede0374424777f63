-- A person's own security events that belong to no organization (issue
-- #20): a personal API key created or revoked, a password reset, a
-- refresh token presented again after rotation (the session is revoked).
-- They are audit.events records with an empty org id, keyed by the
-- person's id; the action-materializer stores them with a null org_id and
-- the person as actor_id, and GET /api/v1/me/audit pages them for that
-- person alone (an organization's trail, GET /api/v1/audit, never lists
-- them).
ALTER TABLE audit_events ALTER COLUMN org_id DROP NOT NULL;
CREATE INDEX audit_events_personal_idx ON audit_events (actor_id, occurred_at DESC, event_id DESC) WHERE org_id IS NULL;
