package orgs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
)

// CodeLiveSessions refuses deleting an organization while sessions of it
// are starting or running (their sandboxes would outlive it).
const CodeLiveSessions = "org_has_live_sessions"

// Deleted reports what deleting an organization removed.
type Deleted struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Removed map[string]int `json:"removed" doc:"rows removed with it, by kind (members, invitations, sessions, repos, integrations, secrets, api_keys, automations)"`
}

// deletionCounts are the kinds Deleted.Removed reports, with their tables.
var deletionCounts = []struct{ kind, table string }{
	{"members", "members"}, {"invitations", "invitations"}, {"sessions", "sessions"}, {"repos", "repos"},
	{"integrations", "integrations"}, {"secrets", "secrets"}, {"api_keys", "api_keys"}, {"automations", "automations"},
}

// Delete deletes an organization at once and for good, with everything
// that belongs to it. Only an owner may, confirming with the
// organization's exact name; personal organizations are not deleted (each
// person keeps theirs); an organization with live (starting or running)
// sessions is refused until they are stopped, so no sandbox outlives it.
//
// In one transaction, holding the organization's row lock (a concurrent
// session start waits on it and then fails): an audit row naming the
// organization (kept, its org_id cleared by the foreign key), then the row
// itself, whose ON DELETE CASCADE foreign keys remove its members,
// invitations, sessions and their snapshot records, repos and
// configurations, integrations (with their stored tokens), secrets (the
// sealed values are destroyed), org-scoped API keys, triggers,
// automations, runs and billing rows; members whose active organization it
// was have none (as after leaving) until they pick one.
func (s *Store) Delete(ctx context.Context, a Actor, orgID, confirmName string) (Deleted, error) {
	out := Deleted{ID: orgID, Removed: map[string]int{}}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var personal bool
		err := tx.QueryRow(ctx, `SELECT name, is_personal FROM organizations WHERE id = $1 FOR UPDATE`, orgID).Scan(&out.Name, &personal)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("organization")
		}
		if err != nil {
			return err
		}
		role, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		if role != auth.RoleOwner {
			return forbidden("only owners can delete an organization")
		}
		if personal {
			return conflict(CodePersonalOrg, "a personal organization cannot be deleted")
		}
		if strings.TrimSpace(confirmName) != out.Name {
			return invalid("confirm_name", "must be the organization's name exactly, to confirm the deletion")
		}
		live, err := sessionsdb.New(tx).CountLiveSessions(ctx, orgID)
		if err != nil {
			return err
		}
		if live > 0 {
			return conflict(CodeLiveSessions, fmt.Sprintf("%d session(s) of this organization are starting or running; stop them first", live))
		}
		for _, c := range deletionCounts {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+c.table+` WHERE org_id = $1`, orgID).Scan(&n); err != nil {
				return fmt.Errorf("count %s: %w", c.table, err)
			}
			out.Removed[c.kind] = n
		}
		removed := map[string]any{}
		for k, v := range out.Removed {
			removed[k] = v
		}
		if err := audit(ctx, tx, a, Audit{Action: "org.delete", TargetType: "organization", TargetID: orgID,
			Details: map[string]any{"name": out.Name, "removed": removed}}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM organizations WHERE id = $1`, orgID)
		return err
	})
	return out, err
}
