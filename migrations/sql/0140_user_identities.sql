-- Sign-in identities at OAuth/OpenID Connect providers (GitHub, Google):
-- the provider's stable subject (GitHub's numeric user id, Google's `sub`)
-- linked to one of our users. A provider account signs in as exactly one
-- user (unique provider, subject), and a user has at most one account per
-- provider (unique provider, user_id): a second GitHub account carrying the
-- same verified email is refused rather than silently added. `email` is the
-- verified address the provider reported when the link was made (shown to
-- the person; sign-in never matches on it once linked).
CREATE TABLE user_identities (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    provider       text        NOT NULL CHECK (provider IN ('github', 'google')),
    subject        text        NOT NULL CHECK (subject <> ''),
    user_id        uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email          text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    last_login_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, subject),
    UNIQUE (provider, user_id)
);
CREATE INDEX user_identities_user_idx ON user_identities (user_id);
