-- session_messages (0131) is read per session, (session_id, seq), and
-- searched per organization through the GIN index; the (org_id, seq)
-- index served no query, and without fresh statistics the planner picked
-- it for a session's page and scanned the whole organization (200 ms a
-- page at 100k entries instead of well under one). It also cost every
-- insert.
DROP INDEX session_messages_org;
