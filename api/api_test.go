package api_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type widgetReq struct {
	Name string   `json:"name" binding:"required,max=10"`
	Size int      `json:"size" binding:"min=1,max=5"`
	Tags []string `json:"tags" binding:"max=2,dive,max=4"`
	// An embedded struct's fields are the request's own in JSON and in
	// error field names.
	WidgetLook
}

type WidgetLook struct {
	Color string `json:"color" binding:"omitempty,oneof=red blue"`
}

func (w widgetReq) Validate() []httpapi.FieldError {
	if w.Name == "forbidden" {
		return []httpapi.FieldError{{Field: "name", Problem: "is reserved"}}
	}
	return nil
}

type widget struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// register is a tiny feature used to exercise the conventions.
func register(s *api.Server) error {
	s.Handle(api.Route{Method: http.MethodPost, Path: "/widgets", Summary: "create", Access: api.OrgMember,
		Request: widgetReq{}, Response: widget{}, Status: http.StatusCreated,
		Handler: func(c *api.Ctx) error {
			var req widgetReq
			if err := c.Bind(&req); err != nil {
				return err
			}
			return c.Reply(http.StatusCreated, widget{ID: "w1", Name: req.Name})
		}})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/widgets", Summary: "list", Access: api.OrgMember,
		Response: api.Page[widget]{}, Query: api.PageQuery,
		Handler: func(c *api.Ctx) error {
			p, err := c.Page()
			if err != nil {
				return err
			}
			// 7 widgets, newest first, served from a fake "table".
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var rows []widget
			at, id := p.CursorArgs()
			for i := 7; i >= 1; i-- {
				w := widget{ID: "00000000-0000-0000-0000-00000000000" + string(rune('0'+i)), CreatedAt: base.Add(time.Duration(i) * time.Hour)}
				if w.CreatedAt.Before(at) || (w.CreatedAt.Equal(at) && w.ID < id) {
					rows = append(rows, w)
				}
			}
			if len(rows) > p.Limit+1 {
				rows = rows[:p.Limit+1]
			}
			return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(w widget) (time.Time, string) { return w.CreatedAt, w.ID }))
		}})
	s.Handle(api.Route{Method: http.MethodDelete, Path: "/widgets/:id", Summary: "delete", Access: api.OrgOwner,
		Handler: func(c *api.Ctx) error {
			if _, err := c.UUIDParam("id", "widget"); err != nil {
				return err
			}
			return c.Reply(http.StatusNoContent, nil)
		}})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/whoami", Summary: "who", Access: api.Person,
		Handler: func(c *api.Ctx) error {
			p := c.Principal()
			return c.Reply(http.StatusOK, map[string]string{"user": p.UserID, "org": p.OrgID, "role": string(p.Role)})
		}})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/sandbox-only", Summary: "sb", Access: api.Sandbox,
		Handler: func(c *api.Ctx) error {
			return c.Reply(http.StatusOK, map[string]string{"session": c.Principal().SessionID})
		}})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/boom", Summary: "panics", Access: api.Public,
		Handler: func(*api.Ctx) error { panic("kaboom with a secret sk-123") }})
	return nil
}

func newEnv(t *testing.T, opts ...apitest.Option) *apitest.Env {
	return apitest.New(t, []func(*api.Server) error{register}, opts...)
}

func TestBindReportsEachProblemPrecisely(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	cases := []struct {
		name, body, code string
		status           int
		field, problem   string
	}{
		{"malformed", `{"name":`, httpapi.CodeBadRequest, 400, "", ""},
		{"empty", ``, httpapi.CodeBadRequest, 400, "", ""},
		{"trailing", `{"name":"a","size":1} {}`, httpapi.CodeBadRequest, 400, "", ""},
		{"unknown field", `{"name":"a","size":1,"colour":"red"}`, httpapi.CodeValidation, 422, "colour", "unknown field"},
		{"wrong type", `{"name":5,"size":1}`, httpapi.CodeValidation, 422, "name", "must be a string"},
		{"missing", `{"size":1}`, httpapi.CodeValidation, 422, "name", "is required"},
		{"too long", `{"name":"abcdefghijk","size":1}`, httpapi.CodeValidation, 422, "name", "must be at most 10 characters"},
		{"range", `{"name":"a","size":9}`, httpapi.CodeValidation, 422, "size", "must be at most 5"},
		{"nested", `{"name":"a","size":1,"tags":["ok","toolong"]}`, httpapi.CodeValidation, 422, "tags[1]", "must be at most 4 characters"},
		{"enum", `{"name":"a","size":1,"color":"green"}`, httpapi.CodeValidation, 422, "color", "must be one of red, blue"},
		{"embedded wrong type", `{"name":"a","size":1,"color":5}`, httpapi.CodeValidation, 422, "color", "must be a string"},
		{"custom", `{"name":"forbidden","size":1}`, httpapi.CodeValidation, 422, "name", "is reserved"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := env.Do(t, "POST", "/widgets", u.Token, c.body).ExpectError(t, c.status, c.code)
			if c.field == "" {
				return
			}
			details, _ := body.Error.Details.([]any)
			if len(details) != 1 {
				t.Fatalf("details %v", body.Error.Details)
			}
			d := details[0].(map[string]any)
			if d["field"] != c.field || d["problem"] != c.problem {
				t.Fatalf("got %v, want %s: %s", d, c.field, c.problem)
			}
		})
	}
	// Wrong content type and oversized bodies.
	r := env.DoWith(t, "POST", "/widgets", u.Token, `{"name":"a","size":1}`, map[string]string{"Content-Type": "text/plain"})
	r.ExpectError(t, 415, httpapi.CodeUnsupportedMedia)
	big := `{"name":"` + strings.Repeat("x", 2<<20) + `","size":1}`
	env.Do(t, "POST", "/widgets", u.Token, big).ExpectError(t, 413, httpapi.CodeBodyTooLarge)
	env.Do(t, "POST", "/widgets", u.Token, `{"name":"ok","size":2}`).Expect(t, 201, nil)
}

func TestAccessLevels(t *testing.T) {
	env := newEnv(t)
	owner := env.NewUser(t)
	member := env.NewUser(t)
	env.AddMember(t, member, owner.OrgID, auth.RoleMember)
	id := "00000000-0000-0000-0000-000000000001"

	env.Do(t, "DELETE", "/widgets/"+id, "", nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)
	env.Do(t, "DELETE", "/widgets/"+id, "garbage", nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)
	env.Do(t, "DELETE", "/widgets/"+id, member.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "DELETE", "/widgets/"+id, owner.Token, nil).Expect(t, 204, nil)
	env.Do(t, "DELETE", "/widgets/not-a-uuid", owner.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)

	// Sandbox tokens work on sandbox routes only; forged ones (the old form
	// derived from SERVICE_TOKEN) not at all.
	sid := sessionstest.New(t, env.Deps.Pool, owner.OrgID, sessionstest.Options{})
	sbx := sessionstest.SandboxToken(t, env.Deps.Pool, sid)
	env.Do(t, "GET", "/whoami", sbx, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "GET", "/widgets", sbx, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	var sb map[string]string
	env.Do(t, "GET", "/sandbox-only", sbx, nil).Expect(t, 200, &sb)
	if sb["session"] != sid {
		t.Fatalf("sandbox principal %v", sb)
	}
	forged := sessionstest.DerivedSandboxToken(env.Deps.Cfg.ServiceToken, sid)
	env.Do(t, "GET", "/sandbox-only", forged, nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)
	env.Do(t, "GET", "/sandbox-only", owner.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)

	// Removing the member takes effect at once, token or not.
	if _, err := env.Deps.Pool.Exec(context.Background(), "DELETE FROM members WHERE user_id = $1 AND org_id = $2", member.ID, owner.OrgID); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "GET", "/widgets", member.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	var who map[string]string
	env.Do(t, "GET", "/whoami", member.Token, nil).Expect(t, 200, &who)
	if who["org"] != "" {
		t.Fatalf("a removed member still has an active org: %v", who)
	}
}

func TestAccessTokensExpireRevokeAndRotate(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	env.Do(t, "GET", "/whoami", u.Token, nil).Expect(t, 200, nil)

	// Revoking the login session kills the token immediately.
	sid, tok := env.Login(t, u.ID)
	env.Do(t, "GET", "/whoami", tok, nil).Expect(t, 200, nil)
	if _, err := env.Deps.Pool.Exec(context.Background(), "UPDATE auth_sessions SET revoked_at = now() WHERE id = $1", sid); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "GET", "/whoami", tok, nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)

	// An expired token is refused.
	past, err := auth.NewTokens(env.Deps.Cfg.AuthSigningKeys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	past.SetClock(func() time.Time { return time.Now().Add(-time.Hour) })
	expired, _, _ := past.Issue(u.ID, u.SessionID, "")
	env.Do(t, "GET", "/whoami", expired, nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)

	// Tampering with the payload breaks the signature; alg=none is refused.
	parts := strings.Split(u.Token, ".")
	env.Do(t, "GET", "/whoami", parts[0]+"."+parts[1]+"x."+parts[2], nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"dev"}`))
	env.Do(t, "GET", "/whoami", none+"."+parts[1]+".", nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)

	// Rotation: a new key signs; tokens of the old key (now second) still verify.
	newKey := "k2:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 32)))
	rotated := newEnv(t, apitest.WithEnv("AUTH_SIGNING_KEYS", newKey+","+strings.Join(env.Deps.Cfg.AuthSigningKeys, ",")))
	rotated.Do(t, "GET", "/whoami", u.Token, nil).Expect(t, 200, nil)
	only := newEnv(t, apitest.WithEnv("AUTH_SIGNING_KEYS", newKey))
	only.Do(t, "GET", "/whoami", u.Token, nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)
}

func TestPagination(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	var ids []string
	path := "/widgets?limit=3"
	for pages := 0; ; pages++ {
		var page api.Page[widget]
		env.Do(t, "GET", path, u.Token, nil).Expect(t, 200, &page)
		for _, w := range page.Items {
			ids = append(ids, w.ID[len(w.ID)-1:])
		}
		if page.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination never ends")
		}
		path = "/widgets?limit=3&cursor=" + page.NextCursor
	}
	if strings.Join(ids, "") != "7654321" {
		t.Fatalf("pages gave %v", ids)
	}
	env.Do(t, "GET", "/widgets?limit=101", u.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "GET", "/widgets?limit=0", u.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "GET", "/widgets?cursor=bogus", u.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
}

func TestRequestIDsCORSAndUnknownRoutes(t *testing.T) {
	env := newEnv(t)
	r := env.DoWith(t, "GET", "/openapi.json", "", nil, map[string]string{"X-Request-Id": "my-trace-id-123", "Origin": "https://evil.example.com"})
	if r.Header.Get("X-Request-Id") != "my-trace-id-123" {
		t.Fatalf("request id not echoed: %q", r.Header.Get("X-Request-Id"))
	}
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS allowed an unconfigured origin")
	}
	r = env.DoWith(t, "GET", "/openapi.json", "", nil, map[string]string{"X-Request-Id": "bad id with spaces", "Origin": "https://app.example.com"})
	if id := r.Header.Get("X-Request-Id"); id == "" || strings.Contains(id, " ") {
		t.Fatalf("unsafe request id accepted: %q", id)
	}
	if r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatal("CORS refused a configured origin")
	}
	env.Do(t, "GET", "/nope", "", nil).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "PUT", "/widgets", "", nil).ExpectError(t, 405, httpapi.CodeMethodNotAllowed)
	// A panic is a 500 in the error shape that reveals nothing.
	body := env.Do(t, "GET", "/boom", "", nil).ExpectError(t, 500, httpapi.CodeInternal)
	if strings.Contains(body.Error.Message, "kaboom") {
		t.Fatal("a panic leaked into the response")
	}
}

// Every route the engine serves is in the OpenAPI document, with its method.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	env := newEnv(t)
	AssertOpenAPIComplete(t, env)
}

// AssertOpenAPIComplete fails when a served route is missing from the document.
func AssertOpenAPIComplete(t *testing.T, env *apitest.Env) {
	t.Helper()
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	env.Do(t, "GET", "/openapi.json", "", nil).Expect(t, 200, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	for _, r := range env.Server.Engine().Routes() {
		if r.Path == api.Prefix+"/openapi.json" {
			continue
		}
		p := api.OpenAPIPath(r.Path)
		if _, ok := doc.Paths[p][strings.ToLower(r.Method)]; !ok {
			t.Errorf("%s %s is served but missing from the OpenAPI document", r.Method, p)
		}
	}
	create := doc.Paths[api.Prefix+"/widgets"]["post"]
	if create == nil {
		t.Fatal("POST /widgets missing")
	}
	schema := create["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
	if req, _ := schema["required"].([]any); len(req) != 1 || req[0] != "name" {
		t.Errorf("request schema required = %v", schema["required"])
	}
}
