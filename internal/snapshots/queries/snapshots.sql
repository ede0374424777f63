-- The snapshot books: live and deleted provider snapshots of sessions and
-- the organizations' reservations. Every automatic deletion keeps a
-- configuration's current snapshot (the NOT EXISTS over configurations):
-- a setup session's snapshot becomes its configuration's and outlives the
-- session that took it; it is deleted only by hand.

-- LockSnapshotQuota serialises the quota decisions of one organization.
-- name: LockSnapshotQuota :exec
SELECT pg_advisory_xact_lock(hashtextextended('snapshots.quota:' || sqlc.arg(org_id)::text, 0));

-- name: DropExpiredOrgReservations :exec
DELETE FROM session_snapshot_reservations WHERE org_id = $1 AND expires_at <= now();

-- name: DropExpiredReservations :exec
DELETE FROM session_snapshot_reservations WHERE expires_at <= now();

-- SnapshotsUsed counts the organization's live snapshots and reservations.
-- name: SnapshotsUsed :one
SELECT ((SELECT count(*) FROM session_snapshots n WHERE n.org_id = sqlc.arg(org_id) AND n.deleted_at IS NULL) +
    (SELECT count(*) FROM session_snapshot_reservations r WHERE r.org_id = sqlc.arg(org_id)))::bigint AS used;

-- name: ReserveSnapshot :exec
INSERT INTO session_snapshot_reservations (org_id, expires_at) VALUES (sqlc.arg(org_id), now() + sqlc.arg(ttl)::interval);

-- EvictionCandidates: up to max snapshots of the organization to evict
-- (locked): superseded ones past the grace, oldest first, then those
-- referenced only by paused/stopped/failed sessions, oldest first.
-- name: EvictionCandidates :many
SELECT x.provider, x.id FROM session_snapshots x
WHERE x.org_id = sqlc.arg(org_id) AND x.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.org_id = x.org_id AND s.snapshot_id = x.id
                  AND s.status IN ('starting', 'running'))
  AND (x.created_at < now() - sqlc.arg(grace)::interval
       OR EXISTS (SELECT 1 FROM sessions s WHERE s.org_id = x.org_id AND s.snapshot_id = x.id))
  AND NOT EXISTS (SELECT 1 FROM configurations c WHERE c.org_id = x.org_id AND c.snapshot_id = x.id
      AND (c.snapshot_provider IS NULL OR c.snapshot_provider = x.provider))
ORDER BY EXISTS (SELECT 1 FROM sessions s WHERE s.org_id = x.org_id AND s.snapshot_id = x.id), x.created_at, x.id
LIMIT sqlc.arg(max)
FOR UPDATE OF x;

-- MarkSnapshotsDeleted marks the live rows (providers[i], ids[i]) deleted
-- (the two unnests zip the arrays).
-- name: MarkSnapshotsDeleted :exec
UPDATE session_snapshots x SET deleted_at = now(), delete_reason = sqlc.arg(reason)::text
FROM (SELECT unnest(sqlc.arg(providers)::text[]) AS provider, unnest(sqlc.arg(ids)::text[]) AS id) AS r
WHERE x.provider = r.provider AND x.id = r.id AND x.deleted_at IS NULL;

-- name: RecordSnapshot :execrows
INSERT INTO session_snapshots (provider, id, org_id, session_id, kind, bytes)
VALUES (sqlc.arg(provider), sqlc.arg(id), sqlc.arg(org_id), sqlc.arg(session_id), sqlc.arg(kind), sqlc.arg(bytes))
ON CONFLICT (provider, id) DO NOTHING;

-- ConsumeReservation drops the organization's reservation expiring first.
-- name: ConsumeReservation :exec
DELETE FROM session_snapshot_reservations WHERE id = (
    SELECT r.id FROM session_snapshot_reservations r WHERE r.org_id = $1 ORDER BY r.expires_at LIMIT 1
    FOR UPDATE SKIP LOCKED);

-- name: LockLiveSnapshot :many
SELECT provider, id FROM session_snapshots
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id) AND deleted_at IS NULL FOR UPDATE;

-- name: RecordProviderDeleteFailure :exec
UPDATE session_snapshots SET provider_delete_attempts = provider_delete_attempts + 1,
    provider_delete_error = left(sqlc.arg(error)::text, 1000), provider_attempted_at = now()
WHERE provider = sqlc.arg(provider) AND id = sqlc.arg(id);

-- name: RecordProviderDeleted :exec
UPDATE session_snapshots SET provider_deleted_at = now(),
    provider_delete_attempts = provider_delete_attempts + 1, provider_delete_error = NULL,
    provider_attempted_at = now()
WHERE provider = sqlc.arg(provider) AND id = sqlc.arg(id);

-- The cleaner.

-- MarkOrphanedSnapshots marks up to max live snapshots whose session is
-- gone (deleted, or its organization) deleted with reason.
-- name: MarkOrphanedSnapshots :many
UPDATE session_snapshots u SET deleted_at = now(), delete_reason = sqlc.arg(reason)::text
FROM (SELECT x.provider, x.id FROM session_snapshots x WHERE x.deleted_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = x.session_id)
        AND NOT EXISTS (SELECT 1 FROM configurations c WHERE c.org_id = x.org_id AND c.snapshot_id = x.id
            AND (c.snapshot_provider IS NULL OR c.snapshot_provider = x.provider))
      ORDER BY x.created_at LIMIT sqlc.arg(max) FOR UPDATE OF x SKIP LOCKED) AS v
WHERE u.provider = v.provider AND u.id = v.id AND u.deleted_at IS NULL
RETURNING u.provider, u.id;

-- MarkSupersededSnapshots marks up to max live snapshots no session
-- references, older than grace, deleted with reason.
-- name: MarkSupersededSnapshots :many
UPDATE session_snapshots u SET deleted_at = now(), delete_reason = sqlc.arg(reason)::text
FROM (SELECT x.provider, x.id FROM session_snapshots x WHERE x.deleted_at IS NULL
        AND x.created_at < now() - sqlc.arg(grace)::interval
        AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.org_id = x.org_id AND s.snapshot_id = x.id)
        AND NOT EXISTS (SELECT 1 FROM configurations c WHERE c.org_id = x.org_id AND c.snapshot_id = x.id
            AND (c.snapshot_provider IS NULL OR c.snapshot_provider = x.provider))
      ORDER BY x.created_at LIMIT sqlc.arg(max) FOR UPDATE OF x SKIP LOCKED) AS v
WHERE u.provider = v.provider AND u.id = v.id AND u.deleted_at IS NULL
RETURNING u.provider, u.id;

-- RetentionOrgs: auto_delete_days is at least 1, younger snapshots are
-- never due.
-- name: RetentionOrgs :many
SELECT DISTINCT org_id FROM session_snapshots
WHERE deleted_at IS NULL AND created_at < now() - interval '1 day';

-- RetentionCandidates: the organization's snapshots past retention (the
-- lesser of the session's auto_delete_days and days), except those of
-- live sessions, locked.
-- name: RetentionCandidates :many
SELECT x.provider, x.id FROM session_snapshots x
LEFT JOIN sessions s ON s.id = x.session_id
WHERE x.org_id = sqlc.arg(org_id) AND x.deleted_at IS NULL
  AND x.created_at < now() - make_interval(days => LEAST(s.auto_delete_days, sqlc.narg(days)::int))
  AND NOT EXISTS (SELECT 1 FROM sessions r WHERE r.org_id = x.org_id AND r.snapshot_id = x.id
                  AND r.status IN ('starting', 'running'))
  AND NOT EXISTS (SELECT 1 FROM configurations c WHERE c.org_id = x.org_id AND c.snapshot_id = x.id
      AND (c.snapshot_provider IS NULL OR c.snapshot_provider = x.provider))
ORDER BY x.created_at LIMIT sqlc.arg(max)
FOR UPDATE OF x SKIP LOCKED;

-- PendingProviderDeletions: deleted rows whose provider storage is still
-- there, of the given providers, least recently attempted first.
-- name: PendingProviderDeletions :many
SELECT provider, id FROM session_snapshots
WHERE deleted_at IS NOT NULL AND provider_deleted_at IS NULL AND deleted_at < now() - sqlc.arg(retry_after)::interval
  AND provider = ANY(sqlc.arg(providers)::text[])
ORDER BY provider_attempted_at NULLS FIRST, deleted_at LIMIT sqlc.arg(max);

-- The API.

-- name: ListSnapshots :many
SELECT x.provider, x.id, x.org_id, x.session_id, x.kind, x.bytes, x.created_at,
    EXISTS (SELECT 1 FROM sessions r WHERE r.org_id = x.org_id AND r.snapshot_id = x.id) AS in_use,
    CASE WHEN LEAST(s.auto_delete_days, sqlc.narg(days)::int) IS NOT NULL
        THEN x.created_at + make_interval(days => LEAST(s.auto_delete_days, sqlc.narg(days)::int)) END AS expires_at
FROM session_snapshots x LEFT JOIN sessions s ON s.id = x.session_id
WHERE x.org_id = sqlc.arg(org_id) AND x.deleted_at IS NULL AND (sqlc.narg(session_id)::uuid IS NULL OR x.session_id = sqlc.narg(session_id)::uuid)
  AND (x.created_at, x.id) < (sqlc.arg(at)::timestamptz, sqlc.arg(at_id)::text)
ORDER BY x.created_at DESC, x.id DESC
LIMIT sqlc.arg(max);

-- name: SnapshotUsage :one
SELECT count(*) AS count, COALESCE(sum(bytes), 0)::bigint AS bytes FROM session_snapshots
WHERE org_id = $1 AND deleted_at IS NULL;
