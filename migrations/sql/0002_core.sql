-- Identity core: users, organizations (tenants) and their members. Every
-- org-scoped table references organizations(id); every API query filters on it.
CREATE TABLE users (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    email             text        NOT NULL,
    name              text        NOT NULL DEFAULT '',
    image             text,
    password_hash     text,                      -- argon2id PHC string; NULL for OAuth-only users
    email_verified    boolean     NOT NULL DEFAULT false,
    is_super_admin    boolean     NOT NULL DEFAULT false,
    active_org_id     uuid,                      -- FK added below (organizations is created after)
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- Emails are compared case-insensitively.
CREATE UNIQUE INDEX users_email_uidx ON users (lower(email));

CREATE TABLE organizations (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name                  text        NOT NULL,
    slug                  text        NOT NULL UNIQUE,
    logo                  text,
    is_personal           boolean     NOT NULL DEFAULT false,
    allowed_domains       text[]      NOT NULL DEFAULT '{}',
    onboarding_complete   boolean     NOT NULL DEFAULT false,
    billing_state         text        NOT NULL DEFAULT 'unconfigured',
    billing_plan          text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX organizations_allowed_domains_idx ON organizations USING gin (allowed_domains);

ALTER TABLE users ADD CONSTRAINT users_active_org_fk
    FOREIGN KEY (active_org_id) REFERENCES organizations (id) ON DELETE SET NULL;

CREATE TABLE members (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id      uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id     uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role        text        NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, user_id)
);
CREATE INDEX members_user_idx ON members (user_id);

-- Security-relevant actions (impersonation, role changes, key creation…).
CREATE TABLE audit_log (
    id           bigserial   PRIMARY KEY,
    org_id       uuid        REFERENCES organizations (id) ON DELETE SET NULL,
    actor_id     uuid        REFERENCES users (id) ON DELETE SET NULL,
    action       text        NOT NULL,
    target_type  text        NOT NULL DEFAULT '',
    target_id    text        NOT NULL DEFAULT '',
    details      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    request_id   text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_org_idx ON audit_log (org_id, id DESC);

-- Login sessions. An access token (a short-lived JWT) names its session; the
-- session must exist, be unexpired and unrevoked for the token to work, so
-- logout and revocation take effect at once. The refresh token is stored
-- hashed only.
CREATE TABLE auth_sessions (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id             uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    refresh_token_hash  text        NOT NULL UNIQUE,
    impersonator_id     uuid        REFERENCES users (id) ON DELETE CASCADE,
    ip_address          text        NOT NULL DEFAULT '',
    user_agent          text        NOT NULL DEFAULT '',
    expires_at          timestamptz NOT NULL,
    revoked_at          timestamptz,
    last_used_at        timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX auth_sessions_user_idx ON auth_sessions (user_id);

-- Repositories an organization works on. The repos feature extends this table;
-- it is here because secrets, integrations and configurations all reference it.
CREATE TABLE repos (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    github_repo_id    text,
    github_repo_name  text        NOT NULL,          -- owner/name
    github_url        text        NOT NULL DEFAULT '',
    default_branch    text        NOT NULL DEFAULT 'main',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, github_repo_name)
);
