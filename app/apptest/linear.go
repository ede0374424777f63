package apptest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

// LinearViaNango is Linear's fake (GraphQL: user Ada, team ENG) whose
// token is held by Nango's fake, the way an organization connects Linear:
// the fakes the end-to-end tests of actions share.
type LinearViaNango struct {
	Linear *linearfake.Server
	Nango  *fakes.Nango
	// Token is the Linear token Nango hands out for the connection.
	Token string
}

const linearNangoSecret = "nango-secret"

// NewLinearViaNango starts both fakes; token is the Linear token the
// connection holds.
func NewLinearViaNango(t testing.TB, token string) LinearViaNango {
	t.Helper()
	lin := linearfake.New(t)
	lin.AddToken(token, "user-ada")
	lin.AddUser(linearfake.User{ID: "user-ada", Name: "Ada", Email: "ada@example.com"})
	lin.AddTeam(linearfake.Team{ID: "team-eng", Key: "ENG", Name: "Engineering"})
	nango := fakes.NewNango(t, linearNangoSecret, map[string]string{"linear": "linear"}, nil)
	nango.SetConnectToken("linear", token) // connections made in its Connect UI too
	return LinearViaNango{Linear: lin, Nango: nango, Token: token}
}

// Overrides are the settings (name, value pairs for Config) that point the
// platform at the fakes.
func (l LinearViaNango) Overrides() []string {
	return []string{"LINEAR_API_URL", l.Linear.URL(), "NANGO_URL", l.Nango.URL, "NANGO_SECRET_KEY", linearNangoSecret,
		"NANGO_CONNECT_URL", l.Nango.ConnectUIURL()}
}

// Connect gives the organization its Linear integration, as a finished
// connect flow leaves it (the connection at Nango, the integration row),
// and returns the integration's id.
func (l LinearViaNango) Connect(t testing.TB, pool *pgxpool.Pool, orgID, userID string) string {
	t.Helper()
	connID := "linear-conn-" + orgID
	l.Nango.AddConnection(fakes.NangoConnection{ConnectionID: connID, ConfigKey: "linear", Provider: "linear",
		AccessToken: l.Token, EndUserID: userID, EndUserOrgID: orgID})
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		provider_config_key, created_by) VALUES ($1, 'nango', 'linear', $2, 'linear', $3) RETURNING id::text`,
		orgID, connID, userID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
