-- Integrations: the external connectivity control plane (specs/integrations.md).
-- Integration records (GitHub App installations and Nango OAuth connections),
-- optional user-scoped connections, the bindings of integrations to repos,
-- automations and sessions, Slack workspace installations and the org-scoped
-- MCP connector catalog. No live OAuth token is stored here except Slack bot
-- tokens, which are sealed with secretbox; Nango owns the others and
-- internal/integrations.GetToken is the only path that yields one.

CREATE TABLE integrations (
    id                      uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                  uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    provider                text        NOT NULL CHECK (provider IN ('github-app', 'nango')),
    -- What the integration connects to (github, sentry, linear…): the preset key.
    integration_id          text        NOT NULL CHECK (integration_id ~ '^[a-z][a-z0-9_-]{0,62}$'),
    -- Nango connection id, or 'github-app-{installation id}'.
    connection_id           text        NOT NULL CHECK (length(connection_id) BETWEEN 1 AND 255),
    -- Nango integration key (provider_config_key); NULL for GitHub App.
    provider_config_key     text        CHECK (length(provider_config_key) BETWEEN 1 AND 255),
    github_installation_id  bigint      CHECK (github_installation_id > 0),
    display_name            text        CHECK (length(display_name) <= 200),
    scopes                  text[]      NOT NULL DEFAULT '{}',
    -- active → expired | revoked | deleted | suspended (transitions checked in
    -- internal/integrations; re-authorization returns to active).
    status                  text        NOT NULL DEFAULT 'active'
                                        CHECK (status IN ('active', 'expired', 'revoked', 'deleted', 'suspended')),
    status_reason           text        NOT NULL DEFAULT '',
    -- org: every member sees it; private: only created_by (enforced in SQL).
    visibility              text        NOT NULL DEFAULT 'org' CHECK (visibility IN ('org', 'private')),
    -- Non-secret facts from the provider (GitHub account login and type…).
    metadata                jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_by              uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, connection_id),
    -- Target of the (integration_id, org_id) foreign keys of the binding
    -- tables, which make a cross-org binding impossible.
    UNIQUE (id, org_id),
    CHECK ((provider = 'github-app') = (github_installation_id IS NOT NULL)),
    CHECK ((provider = 'nango') = (provider_config_key IS NOT NULL))
);
CREATE INDEX integrations_org_idx ON integrations (org_id, created_at DESC, id DESC);
-- A GitHub App installation (one GitHub account's repos) belongs to at most
-- one organization at a time: an installation id is guessable, so another
-- org must not be able to attach it. Deleted records do not count. The
-- GitHub App webhook resolves installations through this index too.
CREATE UNIQUE INDEX integrations_github_installation_uidx ON integrations (github_installation_id)
    WHERE github_installation_id IS NOT NULL AND status <> 'deleted';

-- A person's own credential for a provider (user attribution, e.g. commits
-- authored by the user). GetToken(…, ForUser(id)) prefers it over the org
-- integration of the same provider.
CREATE TABLE user_connections (
    id                   uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id               uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id              uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider             text        NOT NULL DEFAULT 'nango' CHECK (provider IN ('nango')),
    integration_id       text        NOT NULL CHECK (integration_id ~ '^[a-z][a-z0-9_-]{0,62}$'),
    connection_id        text        NOT NULL CHECK (length(connection_id) BETWEEN 1 AND 255),
    provider_config_key  text        NOT NULL CHECK (length(provider_config_key) BETWEEN 1 AND 255),
    status               text        NOT NULL DEFAULT 'active'
                                     CHECK (status IN ('active', 'expired', 'revoked', 'deleted', 'suspended')),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, user_id, integration_id),
    UNIQUE (org_id, connection_id)
);
CREATE INDEX user_connections_user_idx ON user_connections (org_id, user_id, created_at DESC, id DESC);

-- Repos lose access when their last connection goes (disconnect, unbind);
-- they are then flagged, not deleted. The repos feature owns the table; the
-- column is added idempotently here because integrations sets it.
ALTER TABLE repos ADD COLUMN IF NOT EXISTS is_orphaned boolean NOT NULL DEFAULT false;

-- repo_connections references repos (id, org_id) (constraint repos_id_org_key
-- of 0020_repos) and integrations (id, org_id), so a repo can only be bound
-- to an integration of its own organization, whatever the code does.

CREATE TABLE repo_connections (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    repo_id         uuid        NOT NULL,
    integration_id  uuid        NOT NULL,
    created_by      uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (repo_id, integration_id),
    FOREIGN KEY (repo_id, org_id) REFERENCES repos (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (integration_id, org_id) REFERENCES integrations (id, org_id) ON DELETE CASCADE
);
CREATE INDEX repo_connections_integration_idx ON repo_connections (integration_id);

-- automation_id and session_id have no foreign key yet: the automations and
-- sessions tables arrive in later migrations, which should add
--   FOREIGN KEY (automation_id, org_id) REFERENCES automations (id, org_id) ON DELETE CASCADE
--   FOREIGN KEY (session_id, org_id) REFERENCES sessions (id, org_id) ON DELETE CASCADE
-- The integration side is enforced now, same org included.
CREATE TABLE automation_connections (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    automation_id   uuid        NOT NULL,
    integration_id  uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (automation_id, integration_id),
    FOREIGN KEY (integration_id, org_id) REFERENCES integrations (id, org_id) ON DELETE CASCADE
);
CREATE INDEX automation_connections_integration_idx ON automation_connections (integration_id);

CREATE TABLE session_connections (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    session_id      uuid        NOT NULL,
    integration_id  uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, integration_id),
    FOREIGN KEY (integration_id, org_id) REFERENCES integrations (id, org_id) ON DELETE CASCADE
);
CREATE INDEX session_connections_integration_idx ON session_connections (integration_id);

-- Slack workspace installations (own OAuth flow, not Nango). The bot token is
-- sealed with secretbox, additional data "slack:{org_id}:{team_id}", and
-- cleared when the installation is revoked.
CREATE TABLE slack_installations (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    team_id               text        NOT NULL CHECK (length(team_id) BETWEEN 1 AND 64),
    team_name             text        NOT NULL DEFAULT '',
    enterprise_id         text,
    app_id                text        NOT NULL DEFAULT '',
    bot_user_id           text        NOT NULL,
    encrypted_bot_token   text,
    scopes                text[]      NOT NULL DEFAULT '{}',
    installed_by          uuid        REFERENCES users (id) ON DELETE SET NULL,
    status                text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    connect_channel_id    text,
    invite_url            text,
    support_channel_id    text,
    support_channel_name  text,
    support_invite_id     text,
    support_invite_url    text,
    revoked_at            timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, team_id),
    UNIQUE (id, org_id),
    CHECK (status <> 'active' OR encrypted_bot_token IS NOT NULL)
);
CREATE INDEX slack_installations_org_idx ON slack_installations (org_id, created_at DESC, id DESC);
CREATE INDEX slack_installations_team_idx ON slack_installations (team_id);

-- Slack thread ↔ session routing cache (schema only; automations use it).
-- session_id gets its foreign key with the sessions table.
CREATE TABLE slack_conversations (
    id                        uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    slack_installation_id     uuid        NOT NULL REFERENCES slack_installations (id) ON DELETE CASCADE,
    channel_id                text        NOT NULL,
    thread_ts                 text        NOT NULL,
    session_id                uuid,
    repo_id                   uuid        REFERENCES repos (id) ON DELETE SET NULL,
    started_by_slack_user_id  text,
    status                    text        NOT NULL DEFAULT 'active',
    pending_prompt            text,
    created_at                timestamptz NOT NULL DEFAULT now(),
    last_message_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (slack_installation_id, channel_id, thread_ts)
);
CREATE INDEX slack_conversations_thread_idx ON slack_conversations (channel_id, thread_ts);

-- Org-scoped MCP connector catalog. auth references an org-wide secret by key
-- ({"type": "none"} | {"type": "bearer", "secret_key": K} |
-- {"type": "header", "header_name": H, "secret_key": K}); values never live
-- here. tool_risk_overrides: {"<tool>": {"mode": allow|require_approval|deny,
-- "hash": "<definition hash>"}}, enforced by Actions.
CREATE TABLE org_connectors (
    id                   uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id               uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                 text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    transport            text        NOT NULL DEFAULT 'remote_http' CHECK (transport IN ('remote_http', 'sse')),
    url                  text        NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    auth                 jsonb       NOT NULL DEFAULT '{"type": "none"}'::jsonb,
    risk_policy          jsonb       NOT NULL DEFAULT '{"default_mode": "require_approval"}'::jsonb,
    tool_risk_overrides  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    enabled              boolean     NOT NULL DEFAULT true,
    created_by           uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK (jsonb_typeof(auth) = 'object' AND jsonb_typeof(risk_policy) = 'object'
           AND jsonb_typeof(tool_risk_overrides) = 'object')
);
CREATE UNIQUE INDEX org_connectors_org_name_uidx ON org_connectors (org_id, lower(name));
CREATE INDEX org_connectors_org_idx ON org_connectors (org_id, created_at DESC, id DESC);
