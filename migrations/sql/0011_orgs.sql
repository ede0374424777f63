-- Organizations: invitations and trial requests (the organizations and members
-- tables themselves are in 0002_core.sql).

-- An invitation to join an organization, addressed to an email. Only the
-- SHA-256 of the token mailed to the invitee is stored. A pending invitation
-- whose expires_at has passed is expired even before its status says so (the
-- status is brought up to date when somebody tries to accept it).
CREATE TABLE invitations (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id       uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email        text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    status       text        NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'accepted', 'revoked', 'expired')),
    token_hash   text        NOT NULL UNIQUE,
    expires_at   timestamptz NOT NULL,
    inviter_id   uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    accepted_at  timestamptz,
    accepted_by  uuid        REFERENCES users (id) ON DELETE SET NULL,
    CHECK ((status = 'accepted') = (accepted_at IS NOT NULL))
);
-- At most one pending invitation per organization and email (a new one
-- replaces the old one).
CREATE UNIQUE INDEX invitations_pending_uidx ON invitations (org_id, lower(email)) WHERE status = 'pending';
-- An organization's invitations, newest first (paginated lists).
CREATE INDEX invitations_org_idx ON invitations (org_id, created_at DESC, id DESC);
-- Pending invitations addressed to a person.
CREATE INDEX invitations_email_idx ON invitations (lower(email)) WHERE status = 'pending';

-- Members of an organization, newest first (paginated lists).
CREATE INDEX members_org_created_idx ON members (org_id, created_at DESC, id DESC);

-- An owner's request to start a trial, recorded once per organization; billing
-- reads it to grant the trial credits.
CREATE TABLE trial_requests (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id        uuid        NOT NULL UNIQUE REFERENCES organizations (id) ON DELETE CASCADE,
    requested_by  uuid        REFERENCES users (id) ON DELETE SET NULL,
    plan          text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
