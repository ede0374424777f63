-- Preview share links (issue #17 item 4): a session member shares one
-- port of the session's sandbox with a person outside the organization,
-- read-only (GET and HEAD), until the link expires or is revoked.
--
-- The link carries 256 random bits; only their SHA-256 is stored, so the
-- table never holds a usable link. Revoking sets revoked_at (the row stays
-- for the list and the audit trail). The foreign key cascades: a deleted
-- session leaves no link behind.
CREATE TABLE preview_shares (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash  bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    org_id      uuid        NOT NULL,
    session_id  uuid        NOT NULL,
    port        integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    created_by  uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    revoked_by  uuid        REFERENCES users (id) ON DELETE SET NULL,
    FOREIGN KEY (session_id, org_id) REFERENCES sessions (id, org_id) ON DELETE CASCADE,
    CHECK (expires_at > created_at)
);
-- A session's links, newest first (the list).
CREATE INDEX preview_shares_session_idx ON preview_shares (session_id, created_at DESC);
