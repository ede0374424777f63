-- A private integration is visible only to its creator, and a personal
-- connection serves only its owner: when a person leaves an organization (left,
-- removed, or their user deleted) nobody can see or clean up what they kept
-- there. Remove those rows in the same transaction as the membership, whatever
-- code path removed it. (Private integrations whose creator was already
-- deleted, created_by NULL, are unreachable too and go with them.)
CREATE FUNCTION member_departure_cleanup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM integrations
     WHERE org_id = OLD.org_id AND visibility = 'private'
       AND (created_by = OLD.user_id OR created_by IS NULL);
    DELETE FROM user_connections WHERE org_id = OLD.org_id AND user_id = OLD.user_id;
    RETURN OLD;
END $$;

CREATE TRIGGER members_departure_cleanup
    AFTER DELETE ON members
    FOR EACH ROW EXECUTE FUNCTION member_departure_cleanup();
