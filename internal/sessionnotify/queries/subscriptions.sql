-- name: Subscribe :one
-- Upserts the person's subscription; no row when the (session, user) row
-- exists in another org.
INSERT INTO session_notification_subscriptions
    (org_id, session_id, user_id, slack_installation_id, slack_user_id)
VALUES (@org_id, @session_id, @user_id, @slack_installation_id, @slack_user_id)
ON CONFLICT (session_id, user_id) DO UPDATE SET slack_installation_id = EXCLUDED.slack_installation_id,
    slack_user_id = EXCLUDED.slack_user_id, updated_at = now()
WHERE session_notification_subscriptions.org_id = EXCLUDED.org_id
RETURNING *;

-- name: Unsubscribe :execrows
DELETE FROM session_notification_subscriptions
WHERE org_id = @org_id AND session_id = @session_id AND user_id = @user_id;

-- name: ListSubscriptions :many
-- The session's subscriptions, oldest first.
SELECT * FROM session_notification_subscriptions
WHERE org_id = @org_id AND session_id = @session_id ORDER BY created_at, id;
