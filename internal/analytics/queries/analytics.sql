-- Tool telemetry and usage analytics: the tool-materializer group's writes
-- (consumers/toolmaterializer) and the analytics API's reads.

-- name: LockSessions :exec
-- Transaction-scoped advisory locks of the sessions a batch touches, in key
-- order (no deadlock between batches): batches of different topics and
-- partitions touching one tool call apply one after the other.
SELECT pg_advisory_xact_lock(k) FROM (
    SELECT DISTINCT hashtextextended(s, 137) AS k FROM unnest(sqlc.arg(session_ids)::text[]) AS s ORDER BY k
) AS q;

-- name: ToolCallsOf :many
-- Every source's row of the given tool calls (session_ids[i], call_ids[i]).
SELECT session_id, tool_call_id, source, org_id, tool_name, status, duration_ms, cached, started_at, finished_at, event_id
FROM analytics_tool_calls
WHERE (session_id, tool_call_id) IN (
    SELECT unnest(sqlc.arg(session_ids)::uuid[]), unnest(sqlc.arg(call_ids)::text[])
);

-- name: PutToolCalls :exec
-- Writes tool call rows as the group decided them (duration -1: none;
-- times at the epoch: none).
INSERT INTO analytics_tool_calls AS t (session_id, tool_call_id, source, org_id, tool_name, status, duration_ms, cached, started_at, finished_at, event_id)
SELECT u.session_id, u.tool_call_id, u.source, u.org_id, u.tool_name, u.status, NULLIF(u.duration_ms, -1), u.cached,
    NULLIF(u.started_at, 'epoch'::timestamptz), NULLIF(u.finished_at, 'epoch'::timestamptz), u.event_id
FROM (SELECT unnest(sqlc.arg(session_ids)::uuid[]) AS session_id, unnest(sqlc.arg(call_ids)::text[]) AS tool_call_id,
    unnest(sqlc.arg(sources)::text[]) AS source, unnest(sqlc.arg(org_ids)::uuid[]) AS org_id,
    unnest(sqlc.arg(tool_names)::text[]) AS tool_name, unnest(sqlc.arg(statuses)::text[]) AS status,
    unnest(sqlc.arg(durations_ms)::bigint[]) AS duration_ms, unnest(sqlc.arg(cached)::boolean[]) AS cached,
    unnest(sqlc.arg(started_at)::timestamptz[]) AS started_at, unnest(sqlc.arg(finished_at)::timestamptz[]) AS finished_at,
    unnest(sqlc.arg(event_ids)::uuid[]) AS event_id) AS u
ON CONFLICT (session_id, tool_call_id, source) DO UPDATE SET
    org_id = excluded.org_id, tool_name = excluded.tool_name, status = excluded.status, duration_ms = excluded.duration_ms,
    cached = excluded.cached, started_at = excluded.started_at, finished_at = excluded.finished_at, event_id = excluded.event_id;

-- name: AddToolDaily :exec
-- Adds call and failure deltas to the daily rollup (one row per key in the
-- arrays, sorted by key).
INSERT INTO analytics_tool_daily AS t (org_id, day, tool_name, calls, failures)
SELECT unnest(sqlc.arg(org_ids)::uuid[]), unnest(sqlc.arg(days)::date[]), unnest(sqlc.arg(tool_names)::text[]),
    unnest(sqlc.arg(calls)::bigint[]), unnest(sqlc.arg(failures)::bigint[])
ON CONFLICT (org_id, day, tool_name) DO UPDATE SET calls = t.calls + excluded.calls, failures = t.failures + excluded.failures;

-- name: AddToolDurations :exec
-- Adds histogram count deltas (one row per key in the arrays, sorted).
INSERT INTO analytics_tool_durations AS t (org_id, day, tool_name, bucket, n)
SELECT unnest(sqlc.arg(org_ids)::uuid[]), unnest(sqlc.arg(days)::date[]), unnest(sqlc.arg(tool_names)::text[]),
    unnest(sqlc.arg(buckets)::smallint[]), unnest(sqlc.arg(counts)::bigint[])
ON CONFLICT (org_id, day, tool_name, bucket) DO UPDATE SET n = t.n + excluded.n;

-- name: PutSessions :exec
-- Records whom sessions count for; a value once known stays.
INSERT INTO analytics_sessions AS t (session_id, org_id, automation_id, user_id)
SELECT u.session_id, u.org_id, NULLIF(u.automation_id, ''::text)::uuid, NULLIF(u.user_id, ''::text)::uuid
FROM (SELECT unnest(sqlc.arg(session_ids)::uuid[]) AS session_id, unnest(sqlc.arg(org_ids)::uuid[]) AS org_id,
    unnest(sqlc.arg(automation_ids)::text[]) AS automation_id, unnest(sqlc.arg(user_ids)::text[]) AS user_id) AS u
ON CONFLICT (session_id) DO UPDATE SET
    automation_id = COALESCE(t.automation_id, excluded.automation_id), user_id = COALESCE(t.user_id, excluded.user_id);

-- name: ClaimEvents :many
-- Records usage keys as applied and returns those that were new.
INSERT INTO analytics_applied_events (event_id)
SELECT unnest(sqlc.arg(event_ids)::uuid[])
ON CONFLICT DO NOTHING
RETURNING event_id;

-- name: AddSessionUsage :exec
-- Adds usage deltas per organization, day and session (one row per key in
-- the arrays, sorted).
INSERT INTO analytics_session_usage AS t (org_id, day, session_id, messages, active_seconds, prs, credits_micros,
    input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
SELECT unnest(sqlc.arg(org_ids)::uuid[]), unnest(sqlc.arg(days)::date[]), unnest(sqlc.arg(session_ids)::uuid[]),
    unnest(sqlc.arg(messages)::bigint[]), unnest(sqlc.arg(active_seconds)::bigint[]), unnest(sqlc.arg(prs)::bigint[]),
    unnest(sqlc.arg(credits_micros)::bigint[]), unnest(sqlc.arg(input_tokens)::bigint[]),
    unnest(sqlc.arg(output_tokens)::bigint[]), unnest(sqlc.arg(cache_read_tokens)::bigint[]),
    unnest(sqlc.arg(cache_write_tokens)::bigint[])
ON CONFLICT (org_id, day, session_id) DO UPDATE SET
    messages = t.messages + excluded.messages, active_seconds = t.active_seconds + excluded.active_seconds,
    prs = t.prs + excluded.prs, credits_micros = t.credits_micros + excluded.credits_micros,
    input_tokens = t.input_tokens + excluded.input_tokens, output_tokens = t.output_tokens + excluded.output_tokens,
    cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens;

-- name: SessionUsageTotals :one
-- A session's usage over all days (zeros when none).
SELECT COALESCE(sum(messages), 0)::bigint AS messages, COALESCE(sum(active_seconds), 0)::bigint AS active_seconds,
    COALESCE(sum(prs), 0)::bigint AS prs, COALESCE(sum(credits_micros), 0)::bigint AS credits_micros,
    COALESCE(sum(input_tokens), 0)::bigint AS input_tokens, COALESCE(sum(output_tokens), 0)::bigint AS output_tokens,
    COALESCE(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
    COALESCE(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens
FROM analytics_session_usage
WHERE org_id = sqlc.arg(org_id) AND session_id = sqlc.arg(session_id);

-- name: ToolTotals :many
-- Calls and failures per tool of an organization over [from, to].
SELECT tool_name, sum(calls)::bigint AS calls, sum(failures)::bigint AS failures
FROM analytics_tool_daily
WHERE org_id = sqlc.arg(org_id) AND day BETWEEN sqlc.arg(from_day)::date AND sqlc.arg(to_day)::date
GROUP BY tool_name
HAVING sum(calls) > 0
ORDER BY sum(calls) DESC, tool_name;

-- name: ToolDurationBuckets :many
-- The merged duration histogram per tool of an organization over [from, to].
SELECT tool_name, bucket, sum(n)::bigint AS n
FROM analytics_tool_durations
WHERE org_id = sqlc.arg(org_id) AND day BETWEEN sqlc.arg(from_day)::date AND sqlc.arg(to_day)::date
GROUP BY tool_name, bucket
HAVING sum(n) > 0
ORDER BY tool_name, bucket;

-- name: UsageByKey :many
-- Usage per day and key of an organization over [from, to]: by
-- 'automation' the session's automation ('' for sessions of no
-- automation), by 'person' the person who created it ('' for sessions no
-- person created).
SELECT u.day, COALESCE(CASE sqlc.arg(by)::text WHEN 'automation' THEN s.automation_id WHEN 'person' THEN s.user_id END::text, '')::text AS key,
    sum(u.messages)::bigint AS messages, sum(u.active_seconds)::bigint AS active_seconds,
    sum(u.prs)::bigint AS prs, sum(u.credits_micros)::bigint AS credits_micros
FROM analytics_session_usage u
LEFT JOIN analytics_sessions s ON s.session_id = u.session_id AND s.org_id = u.org_id
WHERE u.org_id = sqlc.arg(org_id) AND u.day BETWEEN sqlc.arg(from_day)::date AND sqlc.arg(to_day)::date
GROUP BY u.day, 2
ORDER BY u.day, 2;

-- name: SessionToolCalls :many
-- A session's tool calls: each call's row of its highest-ranked source.
SELECT DISTINCT ON (tool_call_id) tool_call_id, source, tool_name, status, duration_ms, cached, started_at, finished_at
FROM analytics_tool_calls
WHERE org_id = sqlc.arg(org_id) AND session_id = sqlc.arg(session_id)
ORDER BY tool_call_id, CASE source WHEN 'gateway' THEN 0 WHEN 'sandbox' THEN 1 ELSE 2 END;

-- name: DropEmptyToolRollups :exec
-- Removes the rollup rows of the given keys that a moved call left empty,
-- so the tables are the same whatever order the calls' reports came in.
WITH k AS (
    SELECT unnest(sqlc.arg(org_ids)::uuid[]) AS org_id, unnest(sqlc.arg(days)::date[]) AS day,
        unnest(sqlc.arg(tool_names)::text[]) AS tool_name
), d AS (
    DELETE FROM analytics_tool_durations t USING k
    WHERE t.org_id = k.org_id AND t.day = k.day AND t.tool_name = k.tool_name AND t.n = 0
)
DELETE FROM analytics_tool_daily t USING k
WHERE t.org_id = k.org_id AND t.day = k.day AND t.tool_name = k.tool_name AND t.calls = 0 AND t.failures = 0;
