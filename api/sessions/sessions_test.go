package sessions_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	sessionsapi "github.com/proliferate/proliferate/api/sessions"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas/schemastest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var codec = schemastest.Codec()

// gateway stands in for the running gateway: it records calls and applies
// their effect through the real store, as the gateway's hubs do.
type gateway struct {
	store *sessions.Store
	mu    sync.Mutex
	calls []string
	fail  error
}

func (g *gateway) record(op, id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, op+":"+id)
	return g.fail
}

func (g *gateway) Start(ctx context.Context, orgID, id string) error {
	if err := g.record("start", id); err != nil {
		return err
	}
	_, err := g.store.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb-" + id})
	return err
}

func (g *gateway) Pause(ctx context.Context, orgID, id string) error {
	if err := g.record("pause", id); err != nil {
		return err
	}
	_, err := g.store.MarkPaused(ctx, id, "", "snap-"+id)
	return err
}

func (g *gateway) Snapshot(ctx context.Context, orgID, id string) (string, error) {
	if err := g.record("snapshot", id); err != nil {
		return "", err
	}
	return "snap-" + id, g.store.SetSnapshot(ctx, id, "snap-"+id)
}

func (g *gateway) Calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

type env struct {
	*apitest.Env
	gw *gateway
}

func newEnv(t *testing.T, withGateway bool, maxConcurrent int) *env {
	t.Helper()
	gw := &gateway{store: &sessions.Store{Pool: testenv.Postgres(t), Codec: codec}}
	o := sessionsapi.Options{Codec: codec, MaxConcurrent: maxConcurrent}
	if withGateway {
		o.Runtime = gw
	}
	return &env{Env: apitest.New(t, []func(*api.Server) error{sessionsapi.RegisterWith(o)}), gw: gw}
}

// org is an organization with an owner, an admin and two members.
type org struct {
	*apitest.Org
	Member2 *apitest.User
}

func newOrg(t *testing.T, e *env) *org {
	t.Helper()
	o := &org{Org: e.NewOrg(t), Member2: e.NewUser(t)}
	e.AddMember(t, o.Member2, o.ID, auth.RoleMember)
	return o
}

func (e *env) configuration(t *testing.T, orgID string) string {
	t.Helper()
	var id string
	if err := e.Deps.Pool.QueryRow(context.Background(), `INSERT INTO configurations (org_id, name) VALUES ($1, 'cfg') RETURNING id::text`,
		orgID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *env) session(t *testing.T, id string) sessions.Session {
	t.Helper()
	s, err := e.gw.store.Get(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreateScratchConfiguredIdempotentAndImmediate(t *testing.T) {
	e := newEnv(t, true, 0)
	o := newOrg(t, e)
	var s sessionsapi.Session
	e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{"title": "Scratch", "initial_prompt": "hello"}).
		Expect(t, http.StatusCreated, &s)
	if s.ConfigurationID != nil || s.SessionType != "coding" || s.Status != "starting" || s.DisplayStatus != "active" ||
		*s.CreatedBy != o.Member.ID || s.ClientType != "web" || s.SandboxMode != "deferred" || *s.InitialPrompt != "hello" ||
		s.OrgID != o.ID || s.PRURLs == nil {
		t.Fatalf("scratch session %+v", s)
	}
	cfg := e.configuration(t, o.ID)
	var setup sessionsapi.Session
	e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{"configuration_id": cfg, "session_type": "setup"}).
		Expect(t, http.StatusCreated, &setup)
	if *setup.ConfigurationID != cfg || setup.SessionType != "setup" {
		t.Fatalf("setup session %+v", setup)
	}
	// Idempotency-Key: the first creates, repeats return it.
	h := map[string]string{"Idempotency-Key": "create-1"}
	var first, again sessionsapi.Session
	e.DoWith(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{}, h).Expect(t, http.StatusCreated, &first)
	e.DoWith(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{"title": "other"}, h).Expect(t, http.StatusOK, &again)
	if first.ID != again.ID {
		t.Fatalf("idempotent create made %s and %s", first.ID, again.ID)
	}
	// Immediate: started through the gateway.
	var imm sessionsapi.Session
	e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{"sandbox_mode": "immediate"}).Expect(t, http.StatusCreated, &imm)
	if !slices.Contains(e.gw.Calls(), "start:"+imm.ID) || e.session(t, imm.ID).Status != "running" {
		t.Fatalf("immediate session not started: %v", e.gw.Calls())
	}
	if slices.Contains(e.gw.Calls(), "start:"+s.ID) {
		t.Fatal("deferred session started")
	}
	if n := e.CountRows(t, "sessions", "org_id = $1", o.ID); n != 4 {
		t.Fatalf("%d sessions", n)
	}
	var got sessionsapi.Session
	e.Do(t, http.MethodGet, "/sessions/"+s.ID, o.Member2.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != s.ID || got.Title != "Scratch" {
		t.Fatalf("get %+v", got)
	}
	if strings.Contains(string(e.Do(t, http.MethodGet, "/sessions/"+imm.ID, o.Member.Token, nil).Body), "sb-") {
		t.Fatal("sandbox internals exposed")
	}
}

func TestCreateInvalidInputWritesNothing(t *testing.T) {
	e := newEnv(t, false, 0)
	o := newOrg(t, e)
	other := newOrg(t, e)
	foreignCfg := e.configuration(t, other.ID)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"malformed JSON", `{"title":`, 400, httpapi.CodeBadRequest, ""},
		{"unknown field", map[string]any{"color": "red"}, 422, httpapi.CodeValidation, "color"},
		{"wrong type", map[string]any{"title": 5}, 422, httpapi.CodeValidation, "title"},
		{"long title", map[string]any{"title": strings.Repeat("x", 301)}, 422, httpapi.CodeValidation, "title"},
		{"bad mode", map[string]any{"sandbox_mode": "eager"}, 422, httpapi.CodeValidation, "sandbox_mode"},
		{"automation type", map[string]any{"session_type": "automation"}, 422, httpapi.CodeValidation, "session_type"},
		{"setup without configuration", map[string]any{"session_type": "setup"}, 422, httpapi.CodeValidation, "configuration_id"},
		{"malformed configuration", map[string]any{"configuration_id": "nope"}, 422, httpapi.CodeValidation, "configuration_id"},
		{"foreign configuration", map[string]any{"configuration_id": foreignCfg}, 422, httpapi.CodeValidation, "configuration_id"},
		{"huge prompt", map[string]any{"initial_prompt": strings.Repeat("x", 100001)}, 422, httpapi.CodeValidation, "initial_prompt"},
		{"NUL title", map[string]any{"title": "a\x00b"}, 422, httpapi.CodeValidation, "title"},
		{"huge system prompt", map[string]any{"system_prompt": strings.Repeat("x", 20001)}, 422, httpapi.CodeValidation, "system_prompt"},
		{"NUL system prompt", map[string]any{"system_prompt": "a\x00b"}, 422, httpapi.CodeValidation, "system_prompt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := e.Do(t, http.MethodPost, "/sessions", o.Member.Token, c.body).ExpectError(t, c.status, c.code)
			if c.field != "" && !strings.Contains(fmt.Sprint(body.Error.Details), c.field) {
				t.Fatalf("details %v lack %s", body.Error.Details, c.field)
			}
		})
	}
	e.DoWith(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{},
		map[string]string{"Idempotency-Key": strings.Repeat("k", 201)}).ExpectError(t, 422, httpapi.CodeValidation)
	if n := e.CountRows(t, "sessions", "org_id = $1", o.ID); n != 0 {
		t.Fatalf("%d sessions written", n)
	}
	e.Do(t, http.MethodPatch, "/sessions/"+sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Title: "keep"}),
		o.Member.Token, map[string]any{"title": "  "}).ExpectError(t, 422, httpapi.CodeValidation)
	if n := e.CountRows(t, "sessions", "org_id = $1 AND title = 'keep'", o.ID); n != 1 {
		t.Fatal("blank rename written")
	}
}

func TestConcurrentSessionLimit(t *testing.T) {
	e := newEnv(t, false, 2)
	o := newOrg(t, e)
	for range 2 {
		e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{}).Expect(t, http.StatusCreated, nil)
	}
	e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{}).ExpectError(t, http.StatusConflict, "session_limit")
	if n := e.CountRows(t, "sessions", "org_id = $1", o.ID); n != 2 {
		t.Fatalf("%d sessions", n)
	}
	// Another organization has its own budget.
	e.Do(t, http.MethodPost, "/sessions", newOrg(t, e).Member.Token, map[string]any{}).Expect(t, http.StatusCreated, nil)
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t, true, 0)
	a, b := newOrg(t, e), newOrg(t, e)
	id := sessionstest.New(t, e.Deps.Pool, a.ID, sessionstest.Options{CreatedBy: a.Member.ID, Title: "A's", Status: "running", SandboxID: "sb"})
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, ""}, {http.MethodPatch, ""}, {http.MethodDelete, ""}, {http.MethodPost, "/pause"},
		{http.MethodPost, "/snapshot"}, {http.MethodPost, "/notifications"}, {http.MethodDelete, "/notifications"},
	} {
		var body any
		if r.method == http.MethodPatch {
			body = map[string]any{"title": "stolen"}
		}
		if r.path == "/notifications" && r.method == http.MethodPost {
			body = map[string]any{"slack_installation_id": "00000000-0000-0000-0000-000000000001", "slack_user_id": "U1"}
		}
		e.Do(t, r.method, "/sessions/"+id+r.path, b.Owner.Token, body).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		e.Do(t, r.method, "/sessions/not-a-uuid"+r.path, a.Owner.Token, body).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	got := e.session(t, id)
	if got.Title != "A's" || got.Status != "running" || len(e.gw.Calls()) != 0 {
		t.Fatalf("foreign org changed the session: %+v %v", got, e.gw.Calls())
	}
	var page api.Page[sessionsapi.Session]
	e.Do(t, http.MethodGet, "/sessions", b.Owner.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("list leaks %d sessions", len(page.Items))
	}
}

func TestRoleMatrix(t *testing.T) {
	e := newEnv(t, true, 0)
	o := newOrg(t, e)
	mk := func(createdBy string) string {
		return sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: createdBy, Status: "running", SandboxID: "sb"})
	}
	type op struct {
		name string
		do   func(tok, id string) *apitest.Response
		ok   int
	}
	ops := []op{
		{"rename", func(tok, id string) *apitest.Response {
			return e.Do(t, http.MethodPatch, "/sessions/"+id, tok, map[string]any{"title": "renamed"})
		}, 200},
		{"snapshot", func(tok, id string) *apitest.Response {
			return e.Do(t, http.MethodPost, "/sessions/"+id+"/snapshot", tok, nil)
		}, 200},
		{"pause", func(tok, id string) *apitest.Response {
			return e.Do(t, http.MethodPost, "/sessions/"+id+"/pause", tok, nil)
		}, 200},
		{"delete", func(tok, id string) *apitest.Response {
			return e.Do(t, http.MethodDelete, "/sessions/"+id, tok, nil)
		}, 204},
	}
	for _, op := range ops {
		// A member's session: the creator, an admin and the owner may; another member may not.
		for who, tok := range map[string]string{"creator": o.Member.Token, "admin": o.Admin.Token, "owner": o.Owner.Token} {
			id := mk(o.Member.ID)
			if r := op.do(tok, id); r.Status != op.ok {
				t.Errorf("%s by %s: %d %s", op.name, who, r.Status, r.Body)
			}
		}
		id := mk(o.Member.ID)
		before := e.session(t, id)
		op.do(o.Member2.Token, id).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		// A headless session: admins only.
		headless := mk("")
		op.do(o.Member.Token, headless).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		if r := op.do(o.Admin.Token, headless); r.Status != op.ok {
			t.Errorf("%s of headless by admin: %d %s", op.name, r.Status, r.Body)
		}
		after := e.session(t, id)
		if after.Title != before.Title || after.Status != before.Status || after.SnapshotID != nil {
			t.Fatalf("%s: forbidden request changed the session", op.name)
		}
	}
	// Reading is for every member.
	e.Do(t, http.MethodGet, "/sessions/"+mk(o.Member.ID), o.Member2.Token, nil).Expect(t, http.StatusOK, nil)
}

func TestSandboxAndServiceTokensAreRefused(t *testing.T) {
	e := newEnv(t, true, 0)
	o := newOrg(t, e)
	id := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID})
	tok := sessionstest.SandboxToken(t, e.Deps.Pool, id)
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, ""}, {http.MethodGet, ""}, {http.MethodGet, "/" + id}, {http.MethodPatch, "/" + id},
		{http.MethodDelete, "/" + id}, {http.MethodPost, "/" + id + "/pause"}, {http.MethodPost, "/" + id + "/snapshot"},
		{http.MethodPost, "/" + id + "/notifications"}, {http.MethodDelete, "/" + id + "/notifications"},
	} {
		resp := e.Do(t, r.method, "/sessions"+r.path, tok, map[string]any{"title": "x"})
		if resp.Status != http.StatusForbidden && resp.Status != http.StatusUnauthorized {
			t.Errorf("%s %s with a sandbox token: %d", r.method, r.path, resp.Status)
		}
	}
	if n := e.CountRows(t, "sessions", "org_id = $1", o.ID); n != 1 || e.session(t, id).Title != "" {
		t.Fatal("sandbox token changed something")
	}
}

func TestListFiltersPagesAndDisplayStatus(t *testing.T) {
	e := newEnv(t, false, 0)
	o := newOrg(t, e)
	mine := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Status: "running"})
	idle := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member2.ID, Status: "running"})
	if _, err := e.gw.store.MarkPaused(context.Background(), idle, "inactivity", "snap"); err != nil {
		t.Fatal(err)
	}
	cfg := e.configuration(t, o.ID)
	setup := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{SessionType: "setup", ConfigurationID: cfg, Status: "stopped"})
	var page api.Page[sessionsapi.Session]
	e.Do(t, http.MethodGet, "/sessions?limit=2", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 2 || page.NextCursor == "" || page.Items[0].ID != setup || page.Items[1].ID != idle {
		t.Fatalf("first page %+v", page)
	}
	if page.Items[0].DisplayStatus != "completed" || page.Items[1].DisplayStatus != "idle" || !page.Items[1].HasSnapshot {
		t.Fatalf("display statuses %s %s", page.Items[0].DisplayStatus, page.Items[1].DisplayStatus)
	}
	var next api.Page[sessionsapi.Session]
	e.Do(t, http.MethodGet, "/sessions?limit=2&cursor="+page.NextCursor, o.Member.Token, nil).Expect(t, http.StatusOK, &next)
	if len(next.Items) != 1 || next.Items[0].ID != mine || next.NextCursor != "" || next.Items[0].DisplayStatus != "active" {
		t.Fatalf("second page %+v", next)
	}
	for q, want := range map[string][]string{
		"status=paused": {idle}, "type=setup": {setup}, "mine=true": {mine}, "status=running&mine=true": {mine},
	} {
		var p api.Page[sessionsapi.Session]
		e.Do(t, http.MethodGet, "/sessions?"+q, o.Member.Token, nil).Expect(t, http.StatusOK, &p)
		var got []string
		for _, s := range p.Items {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
	for _, q := range []string{"status=asleep", "type=terminal", "mine=maybe", "limit=0", "cursor=zzz"} {
		e.Do(t, http.MethodGet, "/sessions?"+q, o.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	}
}

func TestPauseAndSnapshot(t *testing.T) {
	t.Run("without gateway", func(t *testing.T) {
		e := newEnv(t, false, 0)
		o := newOrg(t, e)
		deferred := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID})
		var s sessionsapi.Session
		e.Do(t, http.MethodPost, "/sessions/"+deferred+"/pause", o.Member.Token, nil).Expect(t, http.StatusOK, &s)
		if s.Status != "paused" || s.DisplayStatus != "paused" || s.PauseReason != nil {
			t.Fatalf("deferred pause %+v", s)
		}
		running := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Status: "running", SandboxID: "sb"})
		e.Do(t, http.MethodPost, "/sessions/"+running+"/pause", o.Member.Token, nil).ExpectError(t, http.StatusServiceUnavailable, httpapi.CodeUnavailable)
		e.Do(t, http.MethodPost, "/sessions/"+running+"/snapshot", o.Member.Token, nil).ExpectError(t, http.StatusServiceUnavailable, httpapi.CodeUnavailable)
		if e.session(t, running).Status != "running" {
			t.Fatal("live session marked paused without its gateway")
		}
	})
	t.Run("with gateway", func(t *testing.T) {
		e := newEnv(t, true, 0)
		o := newOrg(t, e)
		running := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Status: "running", SandboxID: "sb"})
		var snap sessionsapi.SnapshotResponse
		e.Do(t, http.MethodPost, "/sessions/"+running+"/snapshot", o.Member.Token, nil).Expect(t, http.StatusOK, &snap)
		if snap.SnapshotID != "snap-"+running || e.session(t, running).Status != "running" {
			t.Fatalf("snapshot %+v", snap)
		}
		var s sessionsapi.Session
		e.Do(t, http.MethodPost, "/sessions/"+running+"/pause", o.Member.Token, nil).Expect(t, http.StatusOK, &s)
		if s.Status != "paused" || !slices.Equal(e.gw.Calls(), []string{"snapshot:" + running, "pause:" + running}) {
			t.Fatalf("pause %+v %v", s, e.gw.Calls())
		}
		// Paused again: a no-op; snapshot of a paused session: 409.
		e.Do(t, http.MethodPost, "/sessions/"+running+"/pause", o.Member.Token, nil).Expect(t, http.StatusOK, nil)
		e.Do(t, http.MethodPost, "/sessions/"+running+"/snapshot", o.Member.Token, nil).ExpectError(t, http.StatusConflict, "invalid_transition")
		if len(e.gw.Calls()) != 2 {
			t.Fatalf("calls %v", e.gw.Calls())
		}
		stopped := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Status: "stopped"})
		e.Do(t, http.MethodPost, "/sessions/"+stopped+"/pause", o.Member.Token, nil).ExpectError(t, http.StatusConflict, "invalid_transition")
		// A gateway failure is a 502, and the session is untouched.
		other := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Status: "running", SandboxID: "sb"})
		e.gw.fail = fmt.Errorf("gateway down")
		e.Do(t, http.MethodPost, "/sessions/"+other+"/pause", o.Member.Token, nil).ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable)
		if e.session(t, other).Status != "running" {
			t.Fatal("failed pause changed the session")
		}
	})
}

func TestRenameAndDelete(t *testing.T) {
	e := newEnv(t, false, 0)
	o := newOrg(t, e)
	id := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID})
	var s sessionsapi.Session
	e.Do(t, http.MethodPatch, "/sessions/"+id, o.Member.Token, map[string]any{"title": "Renamed"}).Expect(t, http.StatusOK, &s)
	if s.Title != "Renamed" || e.session(t, id).Title != "Renamed" {
		t.Fatalf("rename %+v", s)
	}
	for _, body := range []any{map[string]any{}, map[string]any{"title": strings.Repeat("x", 301)}, map[string]any{"title": 1}, `{`} {
		r := e.Do(t, http.MethodPatch, "/sessions/"+id, o.Member.Token, body)
		if r.Status != 400 && r.Status != 422 {
			t.Fatalf("rename with %v: %d", body, r.Status)
		}
	}
	e.Do(t, http.MethodDelete, "/sessions/"+id, o.Member.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.Do(t, http.MethodGet, "/sessions/"+id, o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodDelete, "/sessions/"+id, o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := e.CountRows(t, "outbox", "key = $1 AND topic = 'sessions.events'", id); n != 1 {
		t.Fatalf("%d deleted events", n)
	}
}

func TestNotifications(t *testing.T) {
	e := newEnv(t, false, 0)
	o, other := newOrg(t, e), newOrg(t, e)
	inst := func(orgID string) string {
		var id string
		if err := e.Deps.Pool.QueryRow(context.Background(), `INSERT INTO slack_installations (org_id, team_id, bot_user_id, encrypted_bot_token)
			VALUES ($1, $2, 'B1', 'sealed') RETURNING id::text`, orgID, apitest.Unique("T")).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	mine, foreign := inst(o.ID), inst(other.ID)
	id := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID})
	path := "/sessions/" + id + "/notifications"
	var sub sessionsapi.Subscription
	// Any member who sees the session may subscribe themselves.
	e.Do(t, http.MethodPost, path, o.Member2.Token, map[string]any{"slack_installation_id": mine, "slack_user_id": "U2"}).
		Expect(t, http.StatusCreated, &sub)
	if sub.UserID != o.Member2.ID || sub.SessionID != id || sub.SlackUserID != "U2" || !slices.Equal(sub.EventTypes, []string{"completed"}) {
		t.Fatalf("subscription %+v", sub)
	}
	e.Do(t, http.MethodPost, path, o.Member2.Token, map[string]any{"slack_installation_id": foreign, "slack_user_id": "U2"}).
		ExpectError(t, 422, httpapi.CodeValidation)
	for _, body := range []any{map[string]any{"slack_user_id": "U2"}, map[string]any{"slack_installation_id": "x", "slack_user_id": "U"},
		map[string]any{"slack_installation_id": mine, "slack_user_id": strings.Repeat("U", 65)}, `{`} {
		r := e.Do(t, http.MethodPost, path, o.Member.Token, body)
		if r.Status != 400 && r.Status != 422 {
			t.Fatalf("subscribe with %v: %d", body, r.Status)
		}
	}
	if n := e.CountRows(t, "session_notification_subscriptions", "session_id = $1", id); n != 1 {
		t.Fatalf("%d subscriptions", n)
	}
	e.Do(t, http.MethodDelete, path, o.Member2.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.Do(t, http.MethodDelete, path, o.Member2.Token, nil).Expect(t, http.StatusNoContent, nil)
	if n := e.CountRows(t, "session_notification_subscriptions", "session_id = $1", id); n != 0 {
		t.Fatalf("%d subscriptions after unsubscribe", n)
	}
}

// A session's custom system prompt is set at creation, stored (the
// gateway resolves it with the mode's critical instructions when the
// sandbox boots, app's sessionPrompt) and shown on the session.
func TestCreateWithCustomSystemPrompt(t *testing.T) {
	e := newEnv(t, false, 0)
	o := newOrg(t, e)
	var s sessionsapi.Session
	e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{"system_prompt": "Only fix typos."}).Expect(t, http.StatusCreated, &s)
	if s.SystemPrompt == nil || *s.SystemPrompt != "Only fix typos." {
		t.Fatalf("created %+v", s)
	}
	if got := e.session(t, s.ID).SystemPrompt; got == nil || *got != "Only fix typos." {
		t.Fatalf("stored %v", got)
	}
	e.Do(t, http.MethodPost, "/sessions", o.Member.Token, map[string]any{}).Expect(t, http.StatusCreated, &s)
	if s.SystemPrompt != nil {
		t.Fatalf("a session without one shows %q", *s.SystemPrompt)
	}
}

// Origin (automation or manual), needs input (an action waiting for
// approval) and the automation's name on its sessions.
func TestListOriginNeedsInputAndAutomationName(t *testing.T) {
	e := newEnv(t, false, 0)
	o := newOrg(t, e)
	other := newOrg(t, e)
	ctx := context.Background()
	var auto string
	if err := e.Deps.Pool.QueryRow(ctx, `INSERT INTO automations (org_id, name) VALUES ($1, 'Nightly triage') RETURNING id::text`, o.ID).Scan(&auto); err != nil {
		t.Fatal(err)
	}
	manual := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{CreatedBy: o.Member.ID, Status: "running"})
	automated := sessionstest.New(t, e.Deps.Pool, o.ID, sessionstest.Options{SessionType: "automation", AutomationID: auto, ClientType: "automation", Status: "running"})
	foreign := sessionstest.New(t, e.Deps.Pool, other.ID, sessionstest.Options{CreatedBy: other.Member.ID, Status: "running"})
	for _, st := range []struct{ org, session, status string }{{o.ID, manual, "pending"}, {o.ID, automated, "completed"}, {other.ID, foreign, "pending"}} {
		if _, err := e.Deps.Pool.Exec(ctx, `INSERT INTO action_invocations (org_id, session_id, integration, action, risk_level, mode,
				mode_source, params, status, expires_at) VALUES ($1, $2, 'linear', 'create_issue', 'write', 'require_approval', 'inferred_default', '{}', $3::text,
				CASE WHEN $3::text = 'pending' THEN now() + interval '1 hour' END)`,
			st.org, st.session, st.status); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(q string) []string {
		var p api.Page[sessionsapi.Session]
		e.Do(t, http.MethodGet, "/sessions?"+q, o.Member.Token, nil).Expect(t, http.StatusOK, &p)
		out := []string{}
		for _, s := range p.Items {
			out = append(out, s.ID)
			if s.ID == automated && (s.AutomationName == nil || *s.AutomationName != "Nightly triage") {
				t.Errorf("%s: automation_name %v", q, s.AutomationName)
			}
		}
		return out
	}
	for q, want := range map[string][]string{
		"origin=automation": {automated}, "origin=manual": {manual}, "needs_input=true": {manual},
		"needs_input=true&origin=automation": {}, "needs_input=false": {automated, manual},
	} {
		if got := ids(q); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
	var one sessionsapi.Session
	e.Do(t, http.MethodGet, "/sessions/"+automated, o.Member.Token, nil).Expect(t, http.StatusOK, &one)
	if one.AutomationName == nil || *one.AutomationName != "Nightly triage" {
		t.Fatalf("GET: automation_name %v", one.AutomationName)
	}
	// An organization with nothing pending has no session needing input.
	third := newOrg(t, e)
	sessionstest.New(t, e.Deps.Pool, third.ID, sessionstest.Options{CreatedBy: third.Member.ID, Status: "running"})
	var none api.Page[sessionsapi.Session]
	e.Do(t, http.MethodGet, "/sessions?needs_input=true", third.Member.Token, nil).Expect(t, http.StatusOK, &none)
	if len(none.Items) != 0 {
		t.Fatalf("needs_input=true with nothing pending: %d sessions", len(none.Items))
	}
	for _, q := range []string{"origin=slack", "needs_input=yes"} {
		e.Do(t, http.MethodGet, "/sessions?"+q, o.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	}
}
