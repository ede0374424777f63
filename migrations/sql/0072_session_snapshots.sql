-- Snapshot books (issue #7 item 8; billing-metering.md §6.10): every
-- provider snapshot a session takes, so the platform can enforce per-org
-- count quotas and retention and actually delete provider storage.
--
-- Differences from the original (its known limitations, fixed):
--   * snapshots are rows of their own, not only sessions.snapshot_id, so a
--     superseded snapshot (the session took a newer one) is still known and
--     deleted instead of leaking;
--   * provider deletion is real and durable: a row is marked deleted in the
--     same transaction that clears the session's reference, the provider
--     delete runs after the commit, and provider_deleted_at stays null until
--     it succeeded, so the cleaner retries failures.
--
-- org_id and session_id carry no foreign keys on purpose: sessions (and
-- organizations) are hard-deleted, and the provider snapshot outlives the
-- row. A cascade would erase the bookkeeping of storage that still exists;
-- SET NULL would forget which session it was. The cleaner finds live rows
-- whose session is gone and deletes them (delete_reason 'session_deleted').
CREATE TABLE session_snapshots (
    provider                 text        NOT NULL CHECK (length(provider) BETWEEN 1 AND 64),
    -- the provider's snapshot id (sessions.snapshot_id)
    id                       text        NOT NULL CHECK (length(id) BETWEEN 1 AND 256),
    org_id                   uuid        NOT NULL,
    session_id               uuid        NOT NULL,
    -- manual | pause | idle | expiry | orphan | billing (gateway/hub
    -- Snapshot* kinds); backfill for rows imported below.
    kind                     text        NOT NULL CHECK (kind ~ '^[a-z_]{1,32}$'),
    bytes                    bigint      NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    created_at               timestamptz NOT NULL DEFAULT now(),
    deleted_at               timestamptz,
    delete_reason            text        CHECK (delete_reason IN ('superseded', 'retention', 'quota', 'session_deleted', 'manual')),
    -- set once the provider confirmed the deletion; null on a deleted row
    -- means the provider delete is pending (retried by the cleaner).
    provider_deleted_at      timestamptz,
    provider_delete_attempts integer     NOT NULL DEFAULT 0 CHECK (provider_delete_attempts >= 0),
    provider_delete_error    text,
    provider_attempted_at    timestamptz,
    PRIMARY KEY (provider, id),
    CHECK ((deleted_at IS NULL) = (delete_reason IS NULL)),
    CHECK (provider_deleted_at IS NULL OR deleted_at IS NOT NULL)
);
-- Per-org live counts, eviction order and the API list (newest first).
CREATE INDEX session_snapshots_org_live_idx ON session_snapshots (org_id, created_at, id) WHERE deleted_at IS NULL;
-- Retention and superseded scans across organizations.
CREATE INDEX session_snapshots_live_age_idx ON session_snapshots (created_at) WHERE deleted_at IS NULL;
-- A session's snapshots (API filter, deleted-session scan).
CREATE INDEX session_snapshots_session_idx ON session_snapshots (session_id) WHERE deleted_at IS NULL;
-- Pending provider deletions.
CREATE INDEX session_snapshots_pending_idx ON session_snapshots (deleted_at)
    WHERE deleted_at IS NOT NULL AND provider_deleted_at IS NULL;

-- "Is this snapshot still some session's snapshot?" is asked for every
-- eviction candidate.
CREATE INDEX sessions_snapshot_idx ON sessions (snapshot_id) WHERE snapshot_id IS NOT NULL;

-- Room reserved by Reserve for a snapshot being taken; Record consumes one.
-- Counted with the live snapshots, so two snapshots taken at once cannot
-- both fit into the last free place. Expired reservations (a snapshot that
-- failed) are ignored and removed.
CREATE TABLE session_snapshot_reservations (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id     uuid        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX session_snapshot_reservations_org_idx ON session_snapshot_reservations (org_id, expires_at);

-- Snapshots taken before the books existed.
INSERT INTO session_snapshots (provider, id, org_id, session_id, kind, created_at)
SELECT sandbox_provider, snapshot_id, org_id, id, 'backfill', COALESCE(paused_at, updated_at)
FROM sessions WHERE snapshot_id IS NOT NULL AND length(snapshot_id) <= 256
ON CONFLICT (provider, id) DO NOTHING;
