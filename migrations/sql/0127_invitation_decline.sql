-- Invitations can be declined by the person they are addressed to
-- (POST /invitations/decline, /invitations/{id}/decline): the status
-- 'declined' with the time, so admins see the answer and the invitation can
-- no longer be accepted. Inviting the address again makes a new invitation.
ALTER TABLE invitations DROP CONSTRAINT invitations_status_check;
ALTER TABLE invitations ADD CONSTRAINT invitations_status_check
    CHECK (status IN ('pending', 'accepted', 'revoked', 'expired', 'declined'));
ALTER TABLE invitations ADD COLUMN declined_at timestamptz;
