-- action_redactions: the patterns an organization marks for redaction in
-- its actions' params and results.

-- name: GetRedactions :one
SELECT patterns, updated_at, updated_by FROM action_redactions WHERE org_id = sqlc.arg(org_id);

-- name: PutRedactions :one
INSERT INTO action_redactions (org_id, patterns, updated_by) VALUES (sqlc.arg(org_id), sqlc.arg(patterns), sqlc.narg(updated_by))
ON CONFLICT (org_id) DO UPDATE SET patterns = EXCLUDED.patterns, updated_by = EXCLUDED.updated_by, updated_at = now()
RETURNING patterns, updated_at, updated_by;

-- RedactionVersion is the organization's redaction version, in one
-- statement (one snapshot): its secrets' count and the sum of their
-- ciphertexts' hashes (a new nonce per write, so any change shows), and a
-- hash of its pattern list (empty without one).
-- name: RedactionVersion :one
SELECT
    (SELECT count(*)::text || '.' || COALESCE(sum(hashtextextended(s.encrypted_value, 0)), 0)::text
        FROM secrets s WHERE s.org_id = sqlc.arg(org_id))::text AS secrets_version,
    COALESCE((SELECT md5(r.patterns::text) FROM action_redactions r WHERE r.org_id = sqlc.arg(org_id)), '')::text AS patterns_version;
