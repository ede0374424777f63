-- name: PreviewMemberRole :one
-- The member's role in the organization (the gateway's preview links check
-- membership at every request).
SELECT m.role FROM members m WHERE m.org_id = @org_id AND m.user_id = @user_id;
