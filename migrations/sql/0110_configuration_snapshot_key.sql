-- Prebuilt configurations (issue #17 item 5; sandbox-providers.md §6
-- snapshot resolution): the version key a configuration snapshot was made
-- for. A session of the configuration boots from the snapshot only when the
-- key of the current repo revisions and toolchain equals it; otherwise it
-- clones fresh. NULL (snapshots recorded before the key existed, or by the
-- builder without one) never matches.
ALTER TABLE configurations ADD COLUMN snapshot_version_key text
    CHECK (snapshot_version_key IS NULL OR snapshot_version_key ~ '^[0-9a-f]{64}$');

-- "Is this snapshot some configuration's current one?" is asked by the
-- snapshot cleaner and quota eviction for every candidate.
CREATE INDEX configurations_snapshot_idx ON configurations (snapshot_id) WHERE snapshot_id IS NOT NULL;
