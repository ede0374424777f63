-- name: Get :one
SELECT run_emails, run_email_statuses, updated_at FROM notification_preferences
WHERE org_id = @org_id AND user_id = @user_id;

-- name: Upsert :one
INSERT INTO notification_preferences (org_id, user_id, run_emails, run_email_statuses, updated_at)
VALUES (@org_id, @user_id, @run_emails, @run_email_statuses::text[], now())
ON CONFLICT (org_id, user_id) DO UPDATE
SET run_emails = EXCLUDED.run_emails, run_email_statuses = EXCLUDED.run_email_statuses, updated_at = now()
RETURNING run_emails, run_email_statuses, updated_at;

-- name: RunEmailRecipients :many
-- The members of the run's organization who want an email for a run of
-- this automation reaching status: every run (all) or the runs of the
-- automations they created (mine). Only verified addresses get mail.
SELECT p.user_id, u.email, p.run_emails, o.name AS org_name
FROM notification_preferences p
JOIN users u ON u.id = p.user_id
JOIN organizations o ON o.id = p.org_id
JOIN automations a ON a.id = @automation_id AND a.org_id = p.org_id
WHERE p.org_id = @org_id AND p.run_emails <> 'off'
  AND @status::text = ANY(p.run_email_statuses)
  AND (p.run_emails = 'all' OR a.created_by = p.user_id)
  AND u.email_verified
ORDER BY p.user_id;
