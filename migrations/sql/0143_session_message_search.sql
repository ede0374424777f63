-- Search of session histories off the session-materializer's hot path
-- (issue #20): computing to_tsvector('english', …) in the inserting
-- statement (0131's generated column) was four fifths of the cost of
-- materializing a transcript event, so the history (the messages API, a
-- session's init) waited for the search index.
--
--   - session_messages keeps the history; its search column goes.
--   - session_message_search_queue holds the seq of every row inserted
--     and not yet indexed: the materializer adds to it in the statement
--     that inserts the rows (one transaction, so no row is ever missed,
--     whatever order concurrent batches commit in).
--   - session_message_search holds each row's full-text vector (and its
--     organization, which the search filters on). The search indexer
--     (transcript.IndexSearch, run next to the session-materializer
--     group) takes queued seqs with FOR UPDATE SKIP LOCKED, computes their
--     vectors and deletes them from the queue in one transaction: any
--     number of workers share the queue, a crash leaves the queue as it
--     was. A deleted session's rows cascade.
CREATE TABLE session_message_search (
    seq    bigint   PRIMARY KEY REFERENCES session_messages (seq) ON DELETE CASCADE,
    org_id uuid     NOT NULL,
    search tsvector NOT NULL
);
CREATE INDEX session_message_search_gin ON session_message_search USING gin (search);

CREATE TABLE session_message_search_queue (
    seq bigint PRIMARY KEY
);

-- The rows materialized so far keep their vectors.
INSERT INTO session_message_search (seq, org_id, search)
SELECT seq, org_id, search FROM session_messages;

ALTER TABLE session_messages DROP COLUMN search;
