package orgs_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
)

func TestCreateOrg(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	personal := u.OrgID

	var m domain.Membership
	resp := env.Do(t, "POST", "/orgs", u.Token, map[string]any{"name": "  Acme Robotics, Inc.  "})
	resp.Expect(t, 201, &m)
	if m.Name != "Acme Robotics, Inc." || !strings.HasPrefix(m.Slug, "acme-robotics-inc") || m.Role != auth.RoleOwner || m.IsPersonal || !m.Active {
		t.Fatalf("created %+v", m)
	}
	if activeOrg(t, env, u.ID) != m.ID {
		t.Fatal("active org not switched to the new org")
	}
	if n := env.CountRows(t, "audit_log", "org_id = $1 AND action = 'org.create' AND actor_id = $2 AND request_id = $3",
		m.ID, u.ID, resp.Header.Get("X-Request-Id")); n != 1 {
		t.Fatalf("audit rows %d", n)
	}

	// The same name again: a free slug is derived (random suffix).
	var m2 domain.Membership
	env.Do(t, "POST", "/orgs", u.Token, map[string]any{"name": "Acme Robotics, Inc."}).Expect(t, 201, &m2)
	if m2.Slug == m.Slug || domain.SlugProblem(m2.Slug) != "" {
		t.Fatalf("second slug %q (first %q)", m2.Slug, m.Slug)
	}

	// An explicit slug, then the same slug again: slug_taken, nothing written.
	slug := strings.ToLower(apitest.Unique("team-"))
	var m3 domain.Membership
	env.Do(t, "POST", "/orgs", u.Token, map[string]any{"name": "Team", "slug": slug}).Expect(t, 201, &m3)
	if m3.Slug != slug {
		t.Fatalf("slug %q want %q", m3.Slug, slug)
	}
	other := env.NewUser(t)
	before := env.CountRows(t, "organizations", "true")
	env.Do(t, "POST", "/orgs", other.Token, map[string]any{"name": "Other", "slug": slug}).ExpectError(t, 409, domain.CodeSlugTaken)
	if env.CountRows(t, "organizations", "true") != before || env.CountRows(t, "members", "user_id = $1", other.ID) != 1 {
		t.Fatal("a refused create wrote rows")
	}
	if activeOrg(t, env, other.ID) != other.OrgID {
		t.Fatal("a refused create switched the active org")
	}

	// Names made of symbols still get a valid slug.
	var m4 domain.Membership
	env.Do(t, "POST", "/orgs", u.Token, map[string]any{"name": "🚀"}).Expect(t, 201, &m4)
	if domain.SlugProblem(m4.Slug) != "" {
		t.Fatalf("slug %q", m4.Slug)
	}

	// GET /orgs lists every membership with the role; the active one flagged.
	var page api.Page[domain.Membership]
	env.Do(t, "GET", "/orgs", u.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 5 || page.NextCursor != "" {
		t.Fatalf("orgs %+v", page)
	}
	actives := 0
	for _, o := range page.Items {
		if o.Active {
			actives++
			if o.ID != m4.ID {
				t.Fatalf("active is %s, want %s", o.ID, m4.ID)
			}
		}
		if o.ID == personal && (!o.IsPersonal || o.Role != auth.RoleOwner) {
			t.Fatalf("personal org %+v", o)
		}
	}
	if actives != 1 {
		t.Fatalf("%d active orgs", actives)
	}

	// GET /orgs/current is the active one.
	var cur domain.Membership
	env.Do(t, "GET", "/orgs/current", u.Token, nil).Expect(t, 200, &cur)
	if cur.ID != m4.ID || cur.Role != auth.RoleOwner {
		t.Fatalf("current %+v", cur)
	}
}

func TestListOrgsPaginates(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	for range 4 {
		env.Do(t, "POST", "/orgs", u.Token, map[string]any{"name": "Paged"}).Expect(t, 201, nil)
	}
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		var page api.Page[domain.Membership]
		env.Do(t, "GET", "/orgs?limit=2&cursor="+url.QueryEscape(cursor), u.Token, nil).Expect(t, 200, &page)
		pages++
		for _, o := range page.Items {
			if seen[o.ID] {
				t.Fatalf("org %s twice", o.ID)
			}
			seen[o.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != 5 || pages != 3 {
		t.Fatalf("%d orgs over %d pages", len(seen), pages)
	}
	// Another user's orgs never show.
	other := env.NewUser(t)
	var page api.Page[domain.Membership]
	env.Do(t, "GET", "/orgs", other.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 1 || page.Items[0].ID != other.OrgID {
		t.Fatalf("other's orgs %+v", page.Items)
	}
}

// setEmail gives a user an address at domain (verified or not).
func setEmail(t testing.TB, env *apitest.Env, u *apitest.User, domainName string, verified bool) {
	t.Helper()
	u.Email = strings.ToLower(apitest.Unique("p")) + "@" + domainName
	env.Exec(t, `UPDATE users SET email = $2, email_verified = $3 WHERE id = $1`, u.ID, u.Email, verified)
}

func uniqueDomain() string { return strings.ToLower(apitest.Unique("corp")) + ".io" }

func TestPatchOrg(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	d := uniqueDomain()
	setEmail(t, env, tm.Owner, d, true)

	// Admin: name and logo.
	var m domain.Membership
	env.Do(t, "PATCH", "/orgs/current", tm.Admin.Token, map[string]any{"name": "Renamed", "logo": "https://cdn.example.com/l.png"}).Expect(t, 200, &m)
	if m.Name != "Renamed" || m.Logo == nil || *m.Logo != "https://cdn.example.com/l.png" || m.Role != auth.RoleAdmin {
		t.Fatalf("patched %+v", m)
	}
	env.Do(t, "PATCH", "/orgs/current", tm.Admin.Token, map[string]any{"logo": ""}).Expect(t, 200, &m)
	if m.Logo != nil || m.Name != "Renamed" {
		t.Fatalf("logo not cleared: %+v", m)
	}
	// Admin: not the domains. Member: nothing.
	env.Do(t, "PATCH", "/orgs/current", tm.Admin.Token, map[string]any{"allowed_domains": []string{d}}).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "PATCH", "/orgs/current", tm.Member.Token, map[string]any{"name": "Nope"}).ExpectError(t, 403, httpapi.CodeForbidden)
	if n := env.CountRows(t, "organizations", "id = $1 AND allowed_domains = '{}' AND name = 'Renamed'", tm.OrgID); n != 1 {
		t.Fatal("refused patches changed the org")
	}

	// Owner: domains, normalised and deduplicated.
	env.Do(t, "PATCH", "/orgs/current", tm.Owner.Token, map[string]any{"allowed_domains": []string{strings.ToUpper(d), d}}).Expect(t, 200, &m)
	if len(m.AllowedDomains) != 1 || m.AllowedDomains[0] != d {
		t.Fatalf("domains %v", m.AllowedDomains)
	}
	// A domain no verified owner has an address at: refused, nothing changes.
	body := env.Do(t, "PATCH", "/orgs/current", tm.Owner.Token, map[string]any{"allowed_domains": []string{d, "elsewhere.io"}}).
		ExpectError(t, 422, httpapi.CodeValidation)
	if !strings.Contains(string(mustJSON(t, body)), "allowed_domains[1]") {
		t.Fatalf("error %+v", body)
	}
	// Public email providers and malformed domains: refused with the index.
	for _, bad := range []string{"gmail.com", "not a domain", "-x.com", "x", "a.b1", strings.Repeat("a", 64) + ".com"} {
		b := env.Do(t, "PATCH", "/orgs/current", tm.Owner.Token, map[string]any{"allowed_domains": []string{d, bad}}).
			ExpectError(t, 422, httpapi.CodeValidation)
		if !strings.Contains(string(mustJSON(t, b)), "allowed_domains[1]") {
			t.Fatalf("%q: error %+v", bad, b)
		}
	}
	// A domain stays allowed after its owner changed address.
	setEmail(t, env, tm.Owner, uniqueDomain(), true)
	env.Do(t, "PATCH", "/orgs/current", tm.Owner.Token, map[string]any{"allowed_domains": []string{d}}).Expect(t, 200, &m)
	// An empty list clears.
	env.Do(t, "PATCH", "/orgs/current", tm.Owner.Token, map[string]any{"allowed_domains": []string{}}).Expect(t, 200, &m)
	if len(m.AllowedDomains) != 0 {
		t.Fatalf("domains %v", m.AllowedDomains)
	}
	if n := env.CountRows(t, "audit_log", "org_id = $1 AND action = 'org.update'", tm.OrgID); n != 5 {
		t.Fatalf("%d org.update audit rows, want 5", n)
	}

	// A personal organization allows no domains.
	u := env.NewUser(t)
	setEmail(t, env, u, uniqueDomain(), true)
	env.Do(t, "PATCH", "/orgs/current", u.Token, map[string]any{"allowed_domains": []string{strings.Split(u.Email, "@")[1]}}).
		ExpectError(t, 409, domain.CodePersonalOrg)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSetActiveOrg(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	outsider := env.NewUser(t)

	var m domain.Membership
	env.Do(t, "PUT", "/me/active-org", tm.Member.Token, map[string]any{"org_id": tm.OrgID}).Expect(t, 200, &m)
	if m.ID != tm.OrgID || m.Role != auth.RoleMember || !m.Active {
		t.Fatalf("switched %+v", m)
	}
	// Back to the personal org.
	var page api.Page[domain.Membership]
	env.Do(t, "GET", "/orgs", tm.Member.Token, nil).Expect(t, 200, &page)
	var personal string
	for _, o := range page.Items {
		if o.IsPersonal {
			personal = o.ID
		}
	}
	env.Do(t, "PUT", "/me/active-org", tm.Member.Token, map[string]any{"org_id": personal}).Expect(t, 200, &m)
	if activeOrg(t, env, tm.Member.ID) != personal {
		t.Fatal("not switched")
	}
	// Somebody else's org: 404, nothing changes.
	env.Do(t, "PUT", "/me/active-org", outsider.Token, map[string]any{"org_id": tm.OrgID}).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "PUT", "/me/active-org", outsider.Token, map[string]any{"org_id": "00000000-0000-0000-0000-000000000000"}).ExpectError(t, 404, httpapi.CodeNotFound)
	if activeOrg(t, env, outsider.ID) != outsider.OrgID {
		t.Fatal("a refused switch changed the active org")
	}
}

func TestSuggestionsAndJoin(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	d := uniqueDomain()
	setEmail(t, env, tm.Owner, d, true)
	env.Do(t, "PATCH", "/orgs/current", tm.Owner.Token, map[string]any{"allowed_domains": []string{d}}).Expect(t, 200, nil)

	// A personal org with the domain (set directly) is never suggested.
	colleague := env.NewUser(t)
	setEmail(t, env, colleague, d, true)
	env.Exec(t, `UPDATE organizations o SET allowed_domains = $2 FROM members m
		WHERE m.org_id = o.id AND m.user_id = $1 AND o.is_personal`, tm.Owner.ID, []string{d})

	resp := env.Do(t, "GET", "/orgs/suggestions", colleague.Token, nil)
	var raw struct {
		Items []map[string]any `json:"items"`
	}
	resp.Expect(t, 200, &raw)
	if len(raw.Items) != 1 || raw.Items[0]["id"] != tm.OrgID {
		t.Fatalf("suggestions %s", resp.Body)
	}
	for k := range raw.Items[0] {
		if k != "id" && k != "name" && k != "slug" {
			t.Fatalf("suggestion leaks %q: %s", k, resp.Body)
		}
	}

	// Members of the org, other domains and unverified addresses get none.
	for _, u := range []*apitest.User{tm.Owner, env.NewUser(t)} {
		var p api.Page[domain.Suggestion]
		env.Do(t, "GET", "/orgs/suggestions", u.Token, nil).Expect(t, 200, &p)
		if len(p.Items) != 0 {
			t.Fatalf("suggestions for %s: %+v", u.Email, p.Items)
		}
	}
	unverified := env.NewUser(t)
	setEmail(t, env, unverified, d, false)
	var p api.Page[domain.Suggestion]
	env.Do(t, "GET", "/orgs/suggestions", unverified.Token, nil).Expect(t, 200, &p)
	if len(p.Items) != 0 {
		t.Fatalf("unverified got suggestions %+v", p.Items)
	}
	env.Do(t, "POST", "/orgs/suggestions/"+tm.OrgID+"/join", unverified.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)

	// Joining: member role, switched, audited; twice is already_member.
	var m domain.Membership
	env.Do(t, "POST", "/orgs/suggestions/"+tm.OrgID+"/join", colleague.Token, nil).Expect(t, 200, &m)
	if m.ID != tm.OrgID || m.Role != auth.RoleMember || activeOrg(t, env, colleague.ID) != tm.OrgID {
		t.Fatalf("joined %+v", m)
	}
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'member.join' AND actor_id = $2", tm.OrgID, colleague.ID) != 1 {
		t.Fatal("join not audited")
	}
	env.Do(t, "POST", "/orgs/suggestions/"+tm.OrgID+"/join", colleague.Token, nil).ExpectError(t, 409, domain.CodeAlreadyMember)
	// An org that does not allow my domain, a personal org, junk ids: 404.
	stranger := env.NewUser(t)
	setEmail(t, env, stranger, d, true)
	other := newTeam(t, env)
	env.Do(t, "POST", "/orgs/suggestions/"+other.OrgID+"/join", stranger.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	var ownerPersonal string
	if err := env.Deps.Pool.QueryRow(t.Context(), `SELECT o.id::text FROM organizations o JOIN members m ON m.org_id = o.id
		WHERE m.user_id = $1 AND o.is_personal`, tm.Owner.ID).Scan(&ownerPersonal); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/orgs/suggestions/"+ownerPersonal+"/join", stranger.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "POST", "/orgs/suggestions/not-a-uuid/join", stranger.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	if role(t, env, other.OrgID, stranger.ID) != "" || role(t, env, ownerPersonal, stranger.ID) != "" {
		t.Fatal("a refused join added a membership")
	}

	// Who left may come back by domain; who was removed may not (only by invitation).
	env.Do(t, "POST", "/orgs/current/leave", colleague.Token, nil).Expect(t, 204, nil)
	env.Do(t, "POST", "/orgs/suggestions/"+tm.OrgID+"/join", colleague.Token, nil).Expect(t, 200, nil)
	env.Do(t, "DELETE", "/orgs/current/members/"+colleague.ID, tm.Owner.Token, nil).Expect(t, 204, nil)
	env.Do(t, "GET", "/orgs/suggestions", colleague.Token, nil).Expect(t, 200, &p)
	if len(p.Items) != 0 {
		t.Fatalf("a removed member is offered the org again: %+v", p.Items)
	}
	env.Do(t, "POST", "/orgs/suggestions/"+tm.OrgID+"/join", colleague.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	if role(t, env, tm.OrgID, colleague.ID) != "" {
		t.Fatal("a removed member joined again by domain")
	}
}
