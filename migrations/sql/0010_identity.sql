-- Identity credentials: email verification tokens, API keys and the record of
-- rotated refresh tokens. Every secret is stored as a SHA-256 hash only; the
-- plaintext is shown to its owner once and never logged.

-- One-time email verification links. A token proves control of `email` at the
-- time it was sent: verifying marks the user verified only while their email
-- is still that address.
CREATE TABLE verification_tokens (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email       text        NOT NULL,
    purpose     text        NOT NULL DEFAULT 'verify_email' CHECK (purpose IN ('verify_email')),
    token_hash  text        NOT NULL UNIQUE,          -- hex SHA-256 of the token
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,                          -- single use
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX verification_tokens_user_idx ON verification_tokens (user_id);

-- Long-lived bearer keys of a person (the CLI). The key is pk_<43 base64url
-- characters> (256 random bits); `prefix` (its first 12 characters) is shown in
-- lists and finds the row, `key_hash` (hex SHA-256 of the whole key) proves it.
-- An org-scoped key (org_id set) acts in that organization whatever the
-- person's active organization is.
CREATE TABLE api_keys (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id        uuid        REFERENCES organizations (id) ON DELETE CASCADE,
    name          text        NOT NULL,
    prefix        text        NOT NULL UNIQUE,
    key_hash      text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,                        -- updated at most once a minute
    expires_at    timestamptz,                        -- NULL: never expires
    revoked_at    timestamptz
);
CREATE INDEX api_keys_user_idx ON api_keys (user_id, created_at DESC, id DESC);

-- Refresh tokens that were rotated away. Presenting one again means it leaked
-- (or a client replayed it): the whole login session is revoked.
CREATE TABLE auth_rotated_refresh_tokens (
    token_hash  text        PRIMARY KEY,              -- hex SHA-256
    session_id  uuid        NOT NULL REFERENCES auth_sessions (id) ON DELETE CASCADE,
    rotated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX auth_rotated_refresh_tokens_session_idx ON auth_rotated_refresh_tokens (session_id);
