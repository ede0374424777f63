-- Password reset links (POST /auth/password-reset/request). Like
-- verification tokens: only the SHA-256 hash is stored, one hour, single
-- use; requesting a new link withdraws the earlier unused ones, and a reset
-- marks every outstanding link of the person used. `email` is the address
-- the link was sent to: a reset only works while the account still has it.
CREATE TABLE password_reset_tokens (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email       text        NOT NULL,
    token_hash  text        NOT NULL UNIQUE,          -- hex SHA-256 of the token
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX password_reset_tokens_user_idx ON password_reset_tokens (user_id);
