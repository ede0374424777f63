-- Session lifecycle (issue #7): sandbox lifetimes, snapshot retention and
-- the idle-snapshot circuit breaker.
--
--   * sandbox_expires_at is when the provider ends the current sandbox on
--     its own. It is the durable schedule of expiry migration: every
--     gateway scans it (sessions_expiry_idx), so a migration due while the
--     owning gateway was down is still carried out — no in-process timer
--     is the only record.
--   * auto_delete_days bounds how long the session's snapshots are kept
--     (with the organization's plan retention).
--   * idle_snapshot_failures counts consecutive failed idle snapshots; the
--     third stops the session (a sandbox that cannot be snapshotted must not
--     burn compute forever). Kept in the row so a gateway restart does not
--     reset the breaker.
ALTER TABLE sessions
    ADD COLUMN sandbox_expires_at     timestamptz,
    ADD COLUMN auto_delete_days       integer NOT NULL DEFAULT 7 CHECK (auto_delete_days BETWEEN 1 AND 365),
    ADD COLUMN idle_snapshot_failures integer NOT NULL DEFAULT 0 CHECK (idle_snapshot_failures >= 0);

CREATE INDEX sessions_expiry_idx ON sessions (sandbox_expires_at)
    WHERE status = 'running' AND sandbox_expires_at IS NOT NULL;
