-- Repos and configurations (the original's "prebuilds"): which repositories an
-- organization works on, and the reusable workspace definitions that group one
-- or more of them with service commands, env-file specs and snapshot status.
--
-- Differences from the original schema (its known limitations, fixed):
--   * configurations carry org_id themselves (authorization and listing never
--     traverse configuration_repos -> repos, and a configuration cannot lose
--     its tenant when its repos change);
--   * configuration_repos references both sides with (id, org_id) foreign keys,
--     so a configuration can only ever hold repos of its own organization;
--   * no dead repo_snapshot_* columns on repos;
--   * repo names are unique per organization case-insensitively (GitHub names
--     are), and a GitHub repository id at most once per organization;
--   * snapshot status is provider-agnostic and its transitions are checked;
--     repos_version tells when a snapshot no longer matches the repo list.

ALTER TABLE repos
    ADD COLUMN is_private                   boolean NOT NULL DEFAULT false,
    -- Set by integrations when the repo's last connection goes (it lost
    -- access); shown, never a reason to delete.
    ADD COLUMN IF NOT EXISTS is_orphaned    boolean NOT NULL DEFAULT false,
    ADD COLUMN added_by                     uuid    REFERENCES users (id) ON DELETE SET NULL,
    -- Repo-level service commands [{name, command, cwd?}]: the defaults used
    -- when a configuration has no commands of its own.
    ADD COLUMN service_commands             jsonb   NOT NULL DEFAULT '[]'::jsonb
        CHECK (jsonb_typeof(service_commands) = 'array'),
    ADD COLUMN service_commands_updated_at  timestamptz,
    ADD COLUMN service_commands_updated_by  uuid    REFERENCES users (id) ON DELETE SET NULL,
    -- Target of the (id, org_id) foreign key of configuration_repos.
    ADD CONSTRAINT repos_id_org_key UNIQUE (id, org_id);

CREATE UNIQUE INDEX repos_org_name_ci_uidx ON repos (org_id, lower(github_repo_name));
CREATE UNIQUE INDEX repos_org_github_id_uidx ON repos (org_id, github_repo_id) WHERE github_repo_id IS NOT NULL;
CREATE INDEX repos_org_list_idx ON repos (org_id, created_at DESC, id DESC);

CREATE TABLE configurations (
    id                           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                       uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                         text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    description                  text        NOT NULL DEFAULT '' CHECK (char_length(description) <= 2000),
    -- [{name, command, cwd?, workspace_path?}]; empty = use the repos' commands.
    service_commands             jsonb       NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(service_commands) = 'array'),
    service_commands_updated_at  timestamptz,
    service_commands_updated_by  uuid        REFERENCES users (id) ON DELETE SET NULL,
    -- [{workspace_path, path, format, mode, keys: [{key, required}]}]
    env_files                    jsonb       NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(env_files) = 'array'),
    env_files_updated_at         timestamptz,
    env_files_updated_by         uuid        REFERENCES users (id) ON DELETE SET NULL,
    -- Bumped whenever the set of (repo, workspace_path) changes.
    repos_version                integer     NOT NULL DEFAULT 1,
    -- Configuration snapshot (Layer 2 / finalized), reported by the builder:
    -- none -> building -> default (auto-built) | failed; finalization -> ready.
    snapshot_status              text        NOT NULL DEFAULT 'none'
        CHECK (snapshot_status IN ('none', 'building', 'default', 'ready', 'failed')),
    snapshot_id                  text,
    snapshot_provider            text,
    snapshot_error               text,
    snapshot_built_at            timestamptz,
    snapshot_build_started_at    timestamptz,
    snapshot_updated_at          timestamptz,
    -- repos_version the current snapshot_id was built from, and the one the
    -- build in progress started from.
    snapshot_repos_version       integer,
    building_repos_version       integer,
    created_by                   uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at                   timestamptz NOT NULL DEFAULT now(),
    updated_at                   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT configurations_id_org_key UNIQUE (id, org_id),
    CONSTRAINT configurations_snapshot_id_chk CHECK (snapshot_status NOT IN ('default', 'ready') OR snapshot_id IS NOT NULL),
    CONSTRAINT configurations_snapshot_error_chk CHECK (snapshot_status <> 'failed' OR snapshot_error IS NOT NULL)
);
CREATE INDEX configurations_org_list_idx ON configurations (org_id, created_at DESC, id DESC);

CREATE TABLE configuration_repos (
    configuration_id  uuid        NOT NULL,
    repo_id           uuid        NOT NULL,
    org_id            uuid        NOT NULL,
    -- Where the repo is cloned, relative to the sandbox workspace root.
    workspace_path    text        NOT NULL CHECK (char_length(workspace_path) BETWEEN 1 AND 500
                                                  AND left(workspace_path, 1) <> '/'
                                                  AND workspace_path !~ '(^|/)\.\.(/|$)'),
    position          integer     NOT NULL CHECK (position >= 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (configuration_id, repo_id),
    UNIQUE (configuration_id, workspace_path),
    UNIQUE (configuration_id, position),
    FOREIGN KEY (configuration_id, org_id) REFERENCES configurations (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (repo_id, org_id) REFERENCES repos (id, org_id) ON DELETE CASCADE
);
CREATE INDEX configuration_repos_repo_idx ON configuration_repos (repo_id);
