-- Configuration rebuilds on demand (issue #17 item 5; repos-prebuilds.md
-- §6.6, §6.8): POST /configurations/{id}/rebuild records a build here; a
-- gateway runs it as a headless setup session (fresh clone, the
-- configuration's service commands, snapshot) and finishes it as ready
-- (its snapshot becomes the configuration's) or failed (with the error; the
-- previous snapshot stays the configuration's).
--
-- At-least-once: the row is the command. A gateway claims it with a
-- compare-and-set on claimed_at, so a duplicate dispatch never builds twice;
-- a build nobody claimed is claimed by a gateway's periodic pass; a build
-- still building at deadline_at (its gateway died) is marked failed by that
-- pass. At most one build per configuration is building (partial unique
-- index).
CREATE TABLE configuration_builds (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    configuration_id  uuid        NOT NULL,
    org_id            uuid        NOT NULL,
    status            text        NOT NULL DEFAULT 'building' CHECK (status IN ('building', 'ready', 'failed')),
    error             text        CHECK (error IS NULL OR char_length(error) <= 4000),
    snapshot_id       text,
    version_key       text        CHECK (version_key IS NULL OR version_key ~ '^[0-9a-f]{64}$'),
    -- The headless setup session that runs the build.
    session_id        uuid        REFERENCES sessions (id) ON DELETE SET NULL,
    requested_by      uuid        REFERENCES users (id) ON DELETE SET NULL,
    -- Which gateway instance runs it, since when.
    claimed_by        text,
    claimed_at        timestamptz,
    deadline_at       timestamptz NOT NULL,
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    FOREIGN KEY (configuration_id, org_id) REFERENCES configurations (id, org_id) ON DELETE CASCADE,
    CONSTRAINT configuration_builds_finished_chk CHECK ((status = 'building') = (finished_at IS NULL)),
    CONSTRAINT configuration_builds_ready_chk CHECK (status <> 'ready' OR snapshot_id IS NOT NULL),
    CONSTRAINT configuration_builds_failed_chk CHECK (status <> 'failed' OR error IS NOT NULL)
);
CREATE UNIQUE INDEX configuration_builds_one_running_uidx ON configuration_builds (configuration_id) WHERE status = 'building';
CREATE INDEX configuration_builds_list_idx ON configuration_builds (configuration_id, started_at DESC, id DESC);
CREATE INDEX configuration_builds_building_idx ON configuration_builds (deadline_at) WHERE status = 'building';
