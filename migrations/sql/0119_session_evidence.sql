-- Verification evidence (issue #17 item 8): files of the workspace
-- (screenshots, logs, test reports) the agent uploads with the verify tool.
-- The bytes are in the blob store (blob_ref, under
-- evidence/{org}/{session}/…); a row per file, idempotent by the tool call
-- (session, tool_call_id, position). run_id is the session's run when it
-- has one, so a run's detail lists its evidence. Deleting the session
-- deletes its rows (the blobs stay in the store).
CREATE TABLE session_evidence (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    session_id      uuid        NOT NULL,
    run_id          uuid        REFERENCES automation_runs (id) ON DELETE SET NULL,
    tool_call_id    text        NOT NULL CHECK (length(tool_call_id) BETWEEN 1 AND 200),
    position        integer     NOT NULL CHECK (position >= 0),
    path            text        NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
    content_type    text        NOT NULL,
    size_bytes      bigint      NOT NULL CHECK (size_bytes >= 0),
    sha256          text        NOT NULL CHECK (length(sha256) = 64),
    blob_ref        text        NOT NULL,
    summary         text        NOT NULL DEFAULT '' CHECK (length(summary) <= 4000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, tool_call_id, position),
    FOREIGN KEY (session_id, org_id) REFERENCES sessions (id, org_id) ON DELETE CASCADE
);
CREATE INDEX session_evidence_session_idx ON session_evidence (session_id, created_at, position);
CREATE INDEX session_evidence_run_idx ON session_evidence (run_id) WHERE run_id IS NOT NULL;
