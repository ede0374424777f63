-- Sandbox tokens (issue #15): the credential a session's sandbox uses to
-- call the gateway's routes for its own session (tools, actions, git) and
-- the API's sandbox routes.
--
-- Differences from before (its known weaknesses, fixed):
--   * a token was HMAC-SHA256(SERVICE_TOKEN, session id): it never expired,
--     survived every stop, and anybody holding SERVICE_TOKEN (or its public
--     development default) could mint any session's token. Now a token is
--     256 random bits minted for one sandbox boot, and only its SHA-256 is
--     stored;
--   * a token is bound to the session, its organization and the boot (the
--     row) and, once the provider has started the sandbox, to that sandbox:
--     it authenticates only while the session is running on that very
--     sandbox and the row is not revoked. Pausing, stopping, expiry
--     migration, a dead sandbox's replacement and orphan recovery all end
--     it, whichever process moved the session on;
--   * a token minted for a boot whose sandbox was not created (the
--     provider recovered the running sandbox, which keeps its own token;
--     the boot failed) is revoked and was never valid: unbound tokens
--     authenticate nothing.
--
-- One row per boot. The foreign key cascades: a deleted session leaves no
-- credential behind.
CREATE TABLE sandbox_tokens (
    -- the boot
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash    bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    org_id        uuid        NOT NULL,
    session_id    uuid        NOT NULL,
    -- the provider's sandbox id, set once the boot's sandbox exists
    sandbox_id    text        CHECK (length(sandbox_id) BETWEEN 1 AND 256),
    created_at    timestamptz NOT NULL DEFAULT now(),
    bound_at      timestamptz,
    revoked_at    timestamptz,
    revoke_reason text        CHECK (revoke_reason ~ '^[a-z_]{1,40}$'),
    FOREIGN KEY (session_id, org_id) REFERENCES sessions (id, org_id) ON DELETE CASCADE,
    CHECK ((sandbox_id IS NULL) = (bound_at IS NULL)),
    CHECK ((revoked_at IS NULL) = (revoke_reason IS NULL))
);
-- A session's live tokens (bind, revoke).
CREATE INDEX sandbox_tokens_session_live_idx ON sandbox_tokens (session_id) WHERE revoked_at IS NULL;
