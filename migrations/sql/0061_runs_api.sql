-- The runs API (automation runs list with a status filter, the org's
-- attention list, "my claimed runs"): indexes for its queries.

-- GET /automations/:id/runs?status=…: one automation's runs of some statuses,
-- newest first, paginated on (created_at, id).
CREATE INDEX automation_runs_automation_status_idx
    ON automation_runs (automation_id, status, created_at DESC, id DESC);

-- GET /runs/attention: an org's failed / needs_human / timed_out runs that
-- ended within a window, most recently ended first.
CREATE INDEX automation_runs_attention_idx
    ON automation_runs (org_id, completed_at DESC, id DESC)
    WHERE status IN ('failed', 'needs_human', 'timed_out');
