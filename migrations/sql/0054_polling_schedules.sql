-- Polling and cron: the poller looks for due poll groups every tick and
-- fans each poll out to the group's triggers; DetachEmpty looks for groups
-- without triggers.
CREATE INDEX trigger_poll_groups_due_idx ON trigger_poll_groups (next_poll_at) WHERE enabled;
CREATE INDEX triggers_poll_group_idx ON triggers (poll_group_id) WHERE poll_group_id IS NOT NULL;
