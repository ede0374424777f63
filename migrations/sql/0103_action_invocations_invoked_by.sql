-- Actions from a person's terminal (issue #16): `proliferate actions` in a
-- terminal a person opened in a session's sandbox acts as that person (a
-- per-terminal credential the gateway mints), not as the agent. invoked_by
-- records who: NULL for the agent's own invocations.
ALTER TABLE action_invocations
    ADD COLUMN invoked_by uuid REFERENCES users (id) ON DELETE SET NULL;
