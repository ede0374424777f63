-- Actions (issue #8, actions.md §4): every request of an agent to act on an
-- external service, with its resolved mode, and the org-level modes.
--
-- Differences from the original:
--   * org_id is (session_id, org_id)-checked against sessions, so an
--     invocation can never point at another organization's session;
--   * status, mode and mode_source are constrained; a pending invocation
--     always has an expiry (the sweeper's index covers exactly those);
--   * drifted records that a connector tool's definition changed since it
--     was reviewed (its allow was downgraded to require_approval).
CREATE TABLE action_invocations (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    session_id      uuid        NOT NULL,
    integration_id  uuid,
    integration     text        NOT NULL CHECK (length(integration) BETWEEN 1 AND 200),
    action          text        NOT NULL CHECK (length(action) BETWEEN 1 AND 200),
    risk_level      text        NOT NULL CHECK (risk_level IN ('read', 'write', 'danger')),
    mode            text        NOT NULL CHECK (mode IN ('allow', 'require_approval', 'deny')),
    mode_source     text        NOT NULL CHECK (mode_source IN ('automation_override', 'org_default', 'inferred_default')),
    drifted         boolean     NOT NULL DEFAULT false,
    params          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'approved', 'executing', 'completed', 'denied', 'failed', 'expired')),
    result          jsonb,
    error           text,
    denied_reason   text,
    duration_ms     bigint,
    approved_by     uuid        REFERENCES users (id) ON DELETE SET NULL,
    approved_at     timestamptz,
    completed_at    timestamptz,
    expires_at      timestamptz,
    automation_id   uuid        REFERENCES automations (id) ON DELETE SET NULL,
    run_id          uuid        REFERENCES automation_runs (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (session_id, org_id) REFERENCES sessions (id, org_id) ON DELETE CASCADE,
    CHECK (status <> 'pending' OR expires_at IS NOT NULL)
);
CREATE INDEX action_invocations_session_idx ON action_invocations (session_id, created_at DESC, id DESC);
CREATE INDEX action_invocations_org_idx ON action_invocations (org_id, created_at DESC, id DESC);
CREATE INDEX action_invocations_org_status_idx ON action_invocations (org_id, status, created_at DESC, id DESC);
CREATE INDEX action_invocations_pending_expiry_idx ON action_invocations (expires_at) WHERE status = 'pending';

-- Org-level modes: {"<integration>:<action>": "allow|require_approval|deny"}
-- (automations.action_modes, the higher priority, exists since 0060).
ALTER TABLE organizations
    ADD COLUMN action_modes jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(action_modes) = 'object');
