-- LLM tokens per session and day (issue #19 item 3: the session page shows
-- its credits and tokens). The tool-materializer group adds them from
-- llm.spend, once per request (the UUID v5 of 'llm.spend:' and the request
-- id, claimed in analytics_applied_events like the other usage keys).
ALTER TABLE analytics_session_usage
    ADD COLUMN input_tokens       bigint NOT NULL DEFAULT 0,
    ADD COLUMN output_tokens      bigint NOT NULL DEFAULT 0,
    ADD COLUMN cache_read_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0;
