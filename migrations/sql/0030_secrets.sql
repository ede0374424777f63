-- Secrets: org-scoped encrypted key/value pairs injected into sandboxes, and
-- bundles (named groups of secrets, optionally written to an env file).
--
-- Scope is org-wide (repo_id NULL) or one repo. A key is unique per scope: two
-- partial unique indexes, because a plain UNIQUE treats NULL repo_ids as
-- distinct and would allow duplicate org-wide keys. (The original schema's
-- unused prebuild_id and secret_type columns are gone.)
--
-- encrypted_value is secretbox output ("v1.<key id>.<base64>") sealed with
-- additional data binding it to org, scope and key, so a ciphertext copied to
-- another row does not decrypt. Values never leave through the API.
CREATE TABLE secrets (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id           uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    repo_id          uuid        REFERENCES repos (id) ON DELETE CASCADE,   -- NULL = org-wide
    key              text        NOT NULL CHECK (key ~ '^[A-Za-z_][A-Za-z0-9_]*$' AND length(key) <= 128),
    encrypted_value  text        NOT NULL,
    description      text        NOT NULL DEFAULT '',
    -- persist=false: delivered to sessions as a process environment variable
    -- only, never written into a bundle's env file on the sandbox's disk (and
    -- so never captured by a snapshot).
    persist          boolean     NOT NULL DEFAULT true,
    created_by       uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, id)  -- target of the bundle membership's same-org foreign key
);
CREATE UNIQUE INDEX secrets_org_key_uidx ON secrets (org_id, key) WHERE repo_id IS NULL;
CREATE UNIQUE INDEX secrets_org_repo_key_uidx ON secrets (org_id, repo_id, key) WHERE repo_id IS NOT NULL;
CREATE INDEX secrets_org_list_idx ON secrets (org_id, created_at DESC, id DESC);
CREATE INDEX secrets_repo_idx ON secrets (repo_id) WHERE repo_id IS NOT NULL;

CREATE TABLE secret_bundles (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id       uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    description  text        NOT NULL DEFAULT '',
    target_path  text        CHECK (target_path IS NULL OR length(target_path) BETWEEN 1 AND 255),
    created_by   uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, id)
);
CREATE UNIQUE INDEX secret_bundles_org_name_uidx ON secret_bundles (org_id, lower(name));
-- Two bundles writing the same file would overwrite each other at boot.
CREATE UNIQUE INDEX secret_bundles_org_target_uidx ON secret_bundles (org_id, target_path) WHERE target_path IS NOT NULL;
CREATE INDEX secret_bundles_org_list_idx ON secret_bundles (org_id, created_at DESC, id DESC);

-- Which secrets a bundle holds. A secret may be in several bundles (the same
-- DATABASE_URL in apps/web/.env and apps/api/.env). The composite foreign keys
-- make a cross-org membership impossible, whatever the code does.
CREATE TABLE secret_bundle_secrets (
    org_id      uuid        NOT NULL,
    bundle_id   uuid        NOT NULL,
    secret_id   uuid        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bundle_id, secret_id),
    FOREIGN KEY (org_id, bundle_id) REFERENCES secret_bundles (org_id, id) ON DELETE CASCADE,
    FOREIGN KEY (org_id, secret_id) REFERENCES secrets (org_id, id) ON DELETE CASCADE
);
CREATE INDEX secret_bundle_secrets_secret_idx ON secret_bundle_secrets (secret_id);
