package orgs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
)

type impersonation struct {
	AccessToken string    `json:"access_token"`
	TokenType   string    `json:"token_type"`
	ExpiresAt   time.Time `json:"expires_at"`
	SessionID   string    `json:"session_id"`
	User        struct {
		ID    string `json:"id"`
		Email string `json:"email"`
	} `json:"user"`
	OrgID *string `json:"org_id"`
}

// adminEnv starts the API with an operator configured by email, and returns
// them and an operator flagged in the database.
func adminEnv(t *testing.T) (env *apitest.Env, byEmail, byFlag *apitest.User) {
	t.Helper()
	opsEmail := strings.ToLower(apitest.Unique("ops")) + "@ops.example.org"
	env = newEnv(t, apitest.WithEnv("SUPER_ADMIN_EMAILS", "someone@else.org,"+strings.ToUpper(opsEmail)))
	byEmail = env.NewUser(t)
	env.Exec(t, `UPDATE users SET email = $2 WHERE id = $1`, byEmail.ID, opsEmail)
	byEmail.Email = opsEmail
	byFlag = env.NewUser(t)
	env.Exec(t, `UPDATE users SET is_super_admin = true WHERE id = $1`, byFlag.ID)
	return env, byEmail, byFlag
}

func TestAdminAccess(t *testing.T) {
	env, ops, flagged := adminEnv(t)
	tm := newTeam(t, env)
	routes := []struct{ method, path string }{
		{"GET", "/admin/users"}, {"GET", "/admin/orgs"}, {"POST", "/admin/impersonate"},
	}
	before := env.CountRows(t, "auth_sessions", "impersonator_id IS NOT NULL")
	for _, u := range []*apitest.User{tm.Owner, tm.Admin, tm.Member} {
		for _, r := range routes {
			env.Do(t, r.method, r.path, u.Token, map[string]any{"user_id": tm.Member.ID}).ExpectError(t, 403, httpapi.CodeForbidden)
		}
	}
	if env.CountRows(t, "auth_sessions", "impersonator_id IS NOT NULL") != before {
		t.Fatal("a non-admin impersonated")
	}
	for _, u := range []*apitest.User{ops, flagged} {
		env.Do(t, "GET", "/admin/users", u.Token, nil).Expect(t, 200, nil)
		env.Do(t, "GET", "/admin/orgs", u.Token, nil).Expect(t, 200, nil)
	}
}

func TestAdminLists(t *testing.T) {
	env, ops, _ := adminEnv(t)
	tm := newTeam(t, env)
	var users api.Page[domain.AdminUser]
	env.Do(t, "GET", "/admin/users?q="+strings.ToUpper(tm.Member.Email[:12]), ops.Token, nil).Expect(t, 200, &users)
	if len(users.Items) != 1 || users.Items[0].ID != tm.Member.ID || users.Items[0].OrgCount != 2 {
		t.Fatalf("users %+v", users.Items)
	}
	env.Do(t, "GET", "/admin/users?q="+tm.Admin.ID, ops.Token, nil).Expect(t, 200, &users)
	if len(users.Items) != 1 || users.Items[0].ID != tm.Admin.ID {
		t.Fatalf("by id %+v", users.Items)
	}
	// LIKE wildcards are literal.
	env.Do(t, "GET", "/admin/users?q=%25", ops.Token, nil).Expect(t, 200, &users)
	if len(users.Items) != 0 {
		t.Fatalf("%% matched %d users", len(users.Items))
	}
	env.Do(t, "GET", "/admin/users?q=_", ops.Token, nil).Expect(t, 200, &users)
	if len(users.Items) != 0 {
		t.Fatalf("_ matched %d users", len(users.Items))
	}
	// Pagination over everyone.
	seen := map[string]bool{}
	cursor := ""
	for {
		var p api.Page[domain.AdminUser]
		env.Do(t, "GET", "/admin/users?limit=3&cursor="+cursor, ops.Token, nil).Expect(t, 200, &p)
		for _, u := range p.Items {
			if seen[u.ID] {
				t.Fatal("duplicate")
			}
			seen[u.ID] = true
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if want := env.CountRows(t, "users", "true"); len(seen) != want {
		t.Fatalf("paged %d users, %d exist", len(seen), want)
	}

	var o domain.Membership
	env.Do(t, "GET", "/orgs/current", tm.Owner.Token, nil).Expect(t, 200, &o)
	var orgsPage api.Page[domain.AdminOrg]
	env.Do(t, "GET", "/admin/orgs?q="+o.Slug, ops.Token, nil).Expect(t, 200, &orgsPage)
	if len(orgsPage.Items) != 1 || orgsPage.Items[0].ID != tm.OrgID || orgsPage.Items[0].MemberCount != 3 || orgsPage.Items[0].IsPersonal {
		t.Fatalf("orgs %+v", orgsPage.Items)
	}
	env.Do(t, "GET", "/admin/orgs?q="+strings.Repeat("x", 201), ops.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
}

func TestImpersonation(t *testing.T) {
	env, ops, flagged := adminEnv(t)
	tm := newTeam(t, env)
	target := tm.Member
	// The target's active org is their personal one before.
	var personal string
	if err := env.Deps.Pool.QueryRow(t.Context(), `SELECT o.id::text FROM organizations o JOIN members m ON m.org_id = o.id
		WHERE m.user_id = $1 AND o.is_personal`, target.ID).Scan(&personal); err != nil {
		t.Fatal(err)
	}
	env.Exec(t, `UPDATE users SET active_org_id = $2 WHERE id = $1`, target.ID, personal)

	start := time.Now()
	var imp impersonation
	resp := env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": target.ID, "org_id": tm.OrgID})
	resp.Expect(t, 201, &imp)
	if imp.User.ID != target.ID || imp.OrgID == nil || *imp.OrgID != tm.OrgID || imp.TokenType != "Bearer" ||
		imp.ExpiresAt.After(start.Add(time.Hour+time.Minute)) || imp.ExpiresAt.Before(start) {
		t.Fatalf("impersonation %+v", imp)
	}
	if env.CountRows(t, "auth_sessions", "id = $1 AND user_id = $2 AND impersonator_id = $3 AND expires_at <= now() + interval '1 hour'",
		imp.SessionID, target.ID, ops.ID) != 1 {
		t.Fatal("impersonation session row")
	}
	if env.CountRows(t, "audit_log", "action = 'admin.impersonate' AND actor_id = $1 AND target_type = 'user' AND target_id = $2 AND request_id = $3 AND details->>'session_id' = $4",
		ops.ID, target.ID, resp.Header.Get("X-Request-Id"), imp.SessionID) != 1 {
		t.Fatal("impersonation not audited")
	}
	if strings.Contains(env.Logs.String(), imp.AccessToken) {
		t.Fatal("the impersonation token was logged")
	}

	// The token acts as the target, in the chosen org.
	var cur domain.Membership
	env.Do(t, "GET", "/orgs/current", imp.AccessToken, nil).Expect(t, 200, &cur)
	if cur.ID != tm.OrgID || cur.Role != "member" {
		t.Fatalf("current %+v", cur)
	}
	// Actions are audited as the target with the impersonator recorded.
	env.Do(t, "PUT", "/me/active-org", imp.AccessToken, map[string]any{"org_id": personal}).Expect(t, 200, nil)
	env.Do(t, "POST", "/orgs", imp.AccessToken, map[string]any{"name": "Made while impersonated"}).Expect(t, 201, &cur)
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'org.create' AND actor_id = $2 AND details->>'impersonator_id' = $3",
		cur.ID, target.ID, ops.ID) != 1 {
		t.Fatal("impersonated action not attributed")
	}
	// Never the super-admin routes, even though the admin's identity is behind it.
	for _, r := range []struct{ method, path string }{{"GET", "/admin/users"}, {"GET", "/admin/orgs"}, {"POST", "/admin/impersonate"}} {
		env.Do(t, r.method, r.path, imp.AccessToken, map[string]any{"user_id": tm.Admin.ID}).ExpectError(t, 403, httpapi.CodeForbidden)
	}

	// Stop: the session is revoked, audited; the token stops working.
	env.Do(t, "POST", "/admin/impersonation/stop", ops.Token, nil).ExpectError(t, 409, domain.CodeNotImpersonating)
	resp = env.Do(t, "POST", "/admin/impersonation/stop", imp.AccessToken, nil)
	resp.Expect(t, 204, nil)
	if env.CountRows(t, "auth_sessions", "id = $1 AND revoked_at IS NOT NULL", imp.SessionID) != 1 {
		t.Fatal("session not revoked")
	}
	if env.CountRows(t, "audit_log", "action = 'admin.impersonate.stop' AND actor_id = $1 AND target_id = $2 AND request_id = $3",
		ops.ID, target.ID, resp.Header.Get("X-Request-Id")) != 1 {
		t.Fatal("stop not audited")
	}
	env.Do(t, "GET", "/orgs/current", imp.AccessToken, nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)

	// Without org_id the target's active org stays.
	var imp2 impersonation
	env.Do(t, "POST", "/admin/impersonate", flagged.Token, map[string]any{"user_id": tm.Admin.ID}).Expect(t, 201, &imp2)
	if imp2.OrgID == nil || *imp2.OrgID != tm.OrgID || activeOrg(t, env, tm.Admin.ID) != tm.OrgID {
		t.Fatalf("impersonation %+v", imp2)
	}

	// Refusals: unknown user, an org that is not the target's, malformed
	// ids, oneself, another super-admin. Nothing is written.
	before := env.CountRows(t, "auth_sessions", "impersonator_id IS NOT NULL")
	activeBefore := activeOrg(t, env, target.ID)
	auditBefore := env.CountRows(t, "audit_log", "action = 'admin.impersonate'")
	outsider := newTeam(t, env)
	env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": "00000000-0000-0000-0000-000000000000"}).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": target.ID, "org_id": outsider.OrgID}).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": "nope"}).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": target.ID, "org_id": "nope"}).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": ops.ID}).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "POST", "/admin/impersonate", ops.Token, map[string]any{"user_id": flagged.ID}).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "POST", "/admin/impersonate", flagged.Token, map[string]any{"user_id": ops.ID}).ExpectError(t, 403, httpapi.CodeForbidden)
	if env.CountRows(t, "auth_sessions", "impersonator_id IS NOT NULL") != before ||
		env.CountRows(t, "audit_log", "action = 'admin.impersonate'") != auditBefore {
		t.Fatal("a refused impersonation wrote")
	}
	if activeOrg(t, env, target.ID) != activeBefore {
		t.Fatal("a refused impersonation switched the target's org")
	}
}

// TestImpersonationSessionOfSuperAdmin: even when the impersonated user is
// (or became) a super-admin, an impersonation session stays off the admin
// routes, whether or not its token names the impersonator.
func TestImpersonationSessionOfSuperAdmin(t *testing.T) {
	env, ops, flagged := adminEnv(t)
	var sid string
	if err := env.Deps.Pool.QueryRow(t.Context(), `INSERT INTO auth_sessions (user_id, refresh_token_hash, impersonator_id, expires_at)
		VALUES ($1, $2, $3, now() + interval '1 hour') RETURNING id::text`, flagged.ID, apitest.Unique("h"), ops.ID).Scan(&sid); err != nil {
		t.Fatal(err)
	}
	for _, imp := range []string{ops.ID, ""} {
		tok, _, err := env.Deps.Tokens.Issue(flagged.ID, sid, imp)
		if err != nil {
			t.Fatal(err)
		}
		env.Do(t, "GET", "/admin/users", tok, nil).ExpectError(t, 403, httpapi.CodeForbidden)
		env.Do(t, "POST", "/admin/impersonate", tok, map[string]any{"user_id": ops.ID}).ExpectError(t, 403, httpapi.CodeForbidden)
	}
}
