-- Session transcripts: the materialized history (session_messages), its
-- tombstones, and the full-text search index and its queue. The search
-- document of a row m is what people read: the text, the tool's name,
-- title and output (first 16 KiB), the error.

-- Apply's batch insert stays hand-written in store.go: it passes nullable
-- columns as parallel arrays with NULL elements, which sqlc cannot type.

-- DeleteTranscript removes a deleted session's history and tombstones it.
-- name: DeleteTranscript :exec
WITH t AS (INSERT INTO session_message_tombstones (session_id) VALUES (sqlc.arg(session_id)) ON CONFLICT DO NOTHING)
DELETE FROM session_messages WHERE session_messages.session_id = sqlc.arg(session_id);

-- name: TranscriptCursor :one
SELECT seq FROM session_messages WHERE event_id = sqlc.arg(event_id) AND session_id = sqlc.arg(session_id) AND org_id = sqlc.arg(org_id);

-- name: ListTranscript :many
SELECT * FROM session_messages
WHERE session_id = sqlc.arg(session_id) AND org_id = sqlc.arg(org_id) AND seq > sqlc.arg(after)::bigint ORDER BY seq LIMIT sqlc.arg(max);

-- name: LastTranscript :many
SELECT * FROM (SELECT * FROM session_messages
    WHERE session_id = sqlc.arg(session_id) AND org_id = sqlc.arg(org_id) ORDER BY seq DESC LIMIT sqlc.arg(max)) last ORDER BY seq;

-- IndexSearch indexes up to max queued rows (oldest first) and returns how
-- many it took from the queue; a row whose session is being deleted is
-- waited for and then skipped, instead of failing the foreign key.
-- name: IndexSearch :one
WITH q AS (
        DELETE FROM session_message_search_queue WHERE seq IN (
            SELECT sq.seq FROM session_message_search_queue sq ORDER BY sq.seq LIMIT sqlc.arg(max) FOR UPDATE SKIP LOCKED)
        RETURNING seq),
    ins AS (
        INSERT INTO session_message_search (seq, org_id, search)
        SELECT m.seq, m.org_id, to_tsvector('english', coalesce(m.text, '') || ' ' || coalesce(m.tool_name, '') || ' ' ||
            coalesce(m.tool_title, '') || ' ' || coalesce(left(m.tool_output, 16384), '') || ' ' || coalesce(m.tool_error, ''))
        FROM session_messages m JOIN q ON q.seq = m.seq
        FOR KEY SHARE OF m
        ON CONFLICT (seq) DO NOTHING)
SELECT count(*) FROM q;

-- SearchTranscripts: the organization's messages matching query (web
-- search syntax), best first, after (rank, seq), in sessions that still
-- exist in the organization.
-- name: SearchTranscripts :many
WITH q AS (SELECT websearch_to_tsquery('english', sqlc.arg(query)::text) AS q),
    hits AS (
        SELECT m.seq, m.session_id, m.event_id, m.kind, m.occurred_at, ts_rank(x.search, q.q) AS rank,
            coalesce(m.text, '') || ' ' || coalesce(m.tool_name, '') || ' ' || coalesce(m.tool_title, '') || ' ' ||
            coalesce(left(m.tool_output, 16384), '') || ' ' || coalesce(m.tool_error, '') AS doc
        FROM session_message_search x JOIN session_messages m ON m.seq = x.seq, q
        WHERE x.org_id = sqlc.arg(org_id) AND x.search @@ q.q)
SELECT h.seq, h.session_id, coalesce(s.title, '')::text AS title, h.event_id, h.kind, h.occurred_at, h.rank::real AS rank,
    ts_headline('english', h.doc, q.q, 'StartSel=**, StopSel=**, MaxWords=30, MinWords=10, MaxFragments=2')::text AS snippet
FROM hits h JOIN sessions s ON s.id = h.session_id AND s.org_id = sqlc.arg(org_id), q
WHERE (h.rank, h.seq) < (sqlc.arg(after_rank)::real, sqlc.arg(after_seq)::bigint)
ORDER BY h.rank DESC, h.seq DESC
LIMIT sqlc.arg(max);
