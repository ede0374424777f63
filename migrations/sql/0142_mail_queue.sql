-- Email that arrives: a durable mail queue and the run emails people opt
-- into.
--
-- mail_queue: every email the platform sends is a row, inserted in the same
-- transaction as the change that causes it (a signup's verification token,
-- an invitation, a password reset token, a run notification), and drained
-- by the mail sender (internal/mailqueue): claimed with FOR UPDATE SKIP
-- LOCKED under a lease, sent, marked sent; a temporary failure is retried
-- with exponential backoff and jitter (next_attempt_at), a permanent one
-- (or the last attempt) is set aside as status 'failed' with its error. The
-- template's data (which holds one-time links) is sealed with the
-- platform's encryption keys (secretbox, bound to the row's id); the mail
-- is rendered from its template when it is sent.
CREATE TABLE mail_queue (
    id              uuid        PRIMARY KEY,
    -- Producers that may run twice for one cause (a redelivered Kafka
    -- record) give a key; the second insert does nothing.
    dedup_key       text        UNIQUE CHECK (length(dedup_key) <= 300),
    kind            text        NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,63}$'),
    recipient       text        NOT NULL CHECK (length(recipient) BETWEEN 3 AND 320),
    org_id          uuid        REFERENCES organizations (id) ON DELETE CASCADE,
    user_id         uuid        REFERENCES users (id) ON DELETE CASCADE,
    sealed_data     text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- A sender holds the row until then while it talks to the SMTP server;
    -- a sender that died leaves it to be claimed again after the lease.
    locked_until    timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    failed_at       timestamptz
);
CREATE INDEX mail_queue_due_idx ON mail_queue (next_attempt_at) WHERE status = 'pending';
CREATE INDEX mail_queue_failed_idx ON mail_queue (failed_at DESC) WHERE status = 'failed';

-- A member's email notifications in one organization: run_emails off
-- (default), mine (runs of the automations they created) or all (every run
-- of the organization); run_email_statuses the outcomes that send one.
CREATE TABLE notification_preferences (
    org_id             uuid        NOT NULL,
    user_id            uuid        NOT NULL,
    run_emails         text        NOT NULL DEFAULT 'off' CHECK (run_emails IN ('off', 'mine', 'all')),
    run_email_statuses text[]      NOT NULL DEFAULT ARRAY['succeeded', 'failed', 'needs_human', 'timed_out']
                                   CHECK (run_email_statuses <@ ARRAY['succeeded', 'failed', 'needs_human', 'timed_out']),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id),
    FOREIGN KEY (org_id, user_id) REFERENCES members (org_id, user_id) ON DELETE CASCADE
);
CREATE INDEX notification_preferences_runs_idx ON notification_preferences (org_id) WHERE run_emails <> 'off';
