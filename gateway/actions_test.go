package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/actions"
	actinv "github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// testSource is an external service with one action per policy outcome:
// read_thing (read → allow), write_thing (write → require_approval, needs
// a title), nuke (danger → deny) and broken (read, the remote side fails).
type testSource struct{ executed atomic.Int32 }

func (s *testSource) ID() string          { return "testint" }
func (s *testSource) DisplayName() string { return "Test Integration" }
func (s *testSource) Guide(context.Context, actions.ExecContext) (string, error) {
	return "# Test integration\nUse read_thing.", nil
}

func (s *testSource) ListActions(context.Context, actions.ExecContext) ([]actions.Definition, error) {
	obj := json.RawMessage(`{"type":"object"}`)
	return []actions.Definition{
		{ID: "read_thing", Description: "reads", Risk: actions.RiskRead, Params: obj},
		{ID: "write_thing", Description: "writes", Risk: actions.RiskWrite,
			Params: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"],"additionalProperties":false}`)},
		{ID: "nuke", Description: "destroys", Risk: actions.RiskDanger, Params: obj},
		{ID: "broken", Description: "fails", Risk: actions.RiskRead, Params: obj},
	}, nil
}

func (s *testSource) Execute(_ context.Context, action string, params json.RawMessage, ec actions.ExecContext) (json.RawMessage, error) {
	s.executed.Add(1)
	if action == "broken" {
		return nil, &actions.ExecError{Status: 500, Message: "remote exploded"}
	}
	return json.Marshal(map[string]any{"ok": true, "action": action, "session": ec.SessionID, "params": params})
}

// testSources offers testSource to every session (the catalog's role).
type testSources struct{ src *testSource }

func (c testSources) List(context.Context, sessions.Session) ([]actinv.Available, error) {
	defs, _ := c.src.ListActions(context.Background(), actions.ExecContext{})
	return []actinv.Available{{Integration: c.src.ID(), DisplayName: c.src.DisplayName(), Actions: defs}}, nil
}

func (c testSources) Get(_ context.Context, sess sessions.Session, id string) (actions.Source, actions.ExecContext, *string, error) {
	if id != c.src.ID() {
		return nil, actions.ExecContext{}, nil, actinv.ErrUnknownIntegration
	}
	return c.src, actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID, Token: "secret-token"}, nil, nil
}

func (testSources) Drifted(context.Context, sessions.Session, string, actions.Definition) (actinv.Drift, error) {
	return actinv.Drift{}, nil
}

func (testSources) CurrentDefinition(context.Context, sessions.Session, string, string) (actions.Definition, bool, error) {
	return actions.Definition{}, false, actinv.ErrUnknownIntegration // no connectors here
}

// actionsGW is a gateway instance with the real invocations service (its
// own, notifying through this instance's session frames, as a process).
type actionsGW struct {
	*gw
	svc *actinv.Svc
}

// startActions runs a gateway instance with action routes. now, when set,
// is the service's clock.
func (w *world) startActions(t *testing.T, instance string, src *testSource, now func() time.Time) *actionsGW {
	t.Helper()
	return w.startActionsWith(t, instance, testSources{src: src}, now)
}

// startActionsWith runs a gateway instance whose actions come from srcs.
func (w *world) startActionsWith(t *testing.T, instance string, srcs actinv.Sources, now func() time.Time) *actionsGW {
	t.Helper()
	return w.startActionsGW(t, actionsGWOptions{Instance: instance, Sources: srcs, Now: now})
}

// actionsGWOptions configure startActionsGW.
type actionsGWOptions struct {
	Instance string
	Sources  actinv.Sources
	Now      func() time.Time
	// Redactors: the organizations' redaction (production's); nil: the
	// token formats only.
	Redactors actinv.OrgRedactors
	// Hub adjusts the hub's deps (another provider, an LLM); nil: w's
	// simulated provider.
	Hub func(*hub.Deps)
	// LogLevel of the instance's log [info].
	LogLevel slog.Level
}

// startActionsGW runs a gateway instance with the real invocations
// service, its notifier wired to the session frames.
func (w *world) startActionsGW(t *testing.T, o actionsGWOptions) *actionsGW {
	t.Helper()
	var svc *actinv.Svc
	g := w.startGateway(t, gwOptions{Instance: o.Instance, LogLevel: o.LogLevel, Hub: o.Hub, Gateway: func(d *gateway.Deps) {
		svc = actinv.New(actinv.Deps{Pool: d.Pool, Redis: d.Redis, Codec: w.codec,
			Sources: o.Sources, Validator: actions.NewValidator(64), Log: d.Log, Now: o.Now, Redactors: o.Redactors,
			Notifier: gateway.NewActionNotifier(gateway.NewSessionFrames(d.Hubs, d.Redis, d.Log), d.Log)})
		d.Actions = svc
		d.MaxBodyBytes = 64 << 10
	}})
	return &actionsGW{gw: g, svc: svc}
}

func actionsURL(g *actionsGW, sid, rest string) string {
	return g.url + "/proliferate/" + sid + "/actions/" + rest
}

func invoke(t *testing.T, g *actionsGW, sid, token, action string, params any) (int, gateway.InvocationResponse, []byte) {
	t.Helper()
	st, body := call(t, "POST", actionsURL(g, sid, "invoke"), token,
		map[string]any{"integration": "testint", "action": action, "params": params}, nil)
	var r gateway.InvocationResponse
	_ = json.Unmarshal(body, &r)
	return st, r, body
}

// Every outcome and error of the lifecycle reaches the agent as the
// status and body the spec gives it.
func TestActionRoutesStatusMapping(t *testing.T) {
	w := newWorld(t)
	src := &testSource{}
	g := w.startActions(t, "a", src, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbx := w.sandboxToken(sid)

	// Catalog and guide, for the sandbox and for people of the org.
	for _, tok := range []string{sbx, owner.Token} {
		st, body := call(t, "GET", actionsURL(g, sid, "available"), tok, nil, nil)
		var av gateway.AvailableResponse
		_ = json.Unmarshal(body, &av)
		if st != 200 || len(av.Integrations) != 1 || av.Integrations[0].Integration != "testint" || len(av.Integrations[0].Actions) != 4 {
			t.Fatalf("available: %d %s", st, body)
		}
		st, body = call(t, "GET", actionsURL(g, sid, "guide/testint"), tok, nil, nil)
		var gd gateway.GuideResponse
		_ = json.Unmarshal(body, &gd)
		if st != 200 || gd.Integration != "testint" || !strings.Contains(gd.Guide, "read_thing") {
			t.Fatalf("guide: %d %s", st, body)
		}
	}
	if st, body := call(t, "GET", actionsURL(g, sid, "guide/jira"), sbx, nil, nil); st != 404 || errorCode(t, body) != httpapi.CodeNotFound {
		t.Fatalf("unknown guide: %d %s", st, body)
	}

	// allow → executed: 200 {invocation, result}; the credential never
	// reaches the response.
	st, r, body := invoke(t, g, sid, sbx, "read_thing", map[string]any{"q": 1})
	if st != 200 || r.Invocation.Status != actinv.StatusCompleted || r.Invocation.SessionID != sid ||
		!strings.Contains(string(r.Result), `"ok":true`) || strings.Contains(string(body), "secret-token") {
		t.Fatalf("allow: %d %s", st, body)
	}
	readID := r.Invocation.ID
	// deny → 403 {invocation, error}, nothing executed.
	before := src.executed.Load()
	st, r, body = invoke(t, g, sid, sbx, "nuke", nil)
	if st != 403 || r.Invocation.Status != actinv.StatusDenied || r.Error == "" || src.executed.Load() != before {
		t.Fatalf("deny: %d %s", st, body)
	}
	// remote failure → 502 {invocation, error}.
	st, r, body = invoke(t, g, sid, sbx, "broken", nil)
	if st != 502 || r.Invocation.Status != actinv.StatusFailed || !strings.Contains(r.Error, "remote exploded") {
		t.Fatalf("failed: %d %s", st, body)
	}
	// params failing the action's schema → 422 validation_failed, one
	// {field, problem} per failing value (field: "params" + its JSON
	// pointer), nothing stored.
	st, _, body = invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": 7, "extra": true})
	expectInvalid(t, st, body, "params", "params/title")
	st, _, body = invoke(t, g, sid, sbx, "write_thing", []int{1})
	expectInvalid(t, st, body, "params")
	// require_approval → 202 {invocation, message}.
	st, r, body = invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": "hello"})
	if st != 202 || r.Invocation.Status != actinv.StatusPending || r.Message == "" || r.Invocation.ExpiresAt == nil {
		t.Fatalf("pending: %d %s", st, body)
	}
	pending := r.Invocation.ID
	// Unknown integration or action → 404; a malformed body → 400/422.
	if st, body := call(t, "POST", actionsURL(g, sid, "invoke"), sbx, map[string]any{"integration": "jira", "action": "x"}, nil); st != 404 {
		t.Fatalf("unknown integration: %d %s", st, body)
	}
	if st, _, body := invoke(t, g, sid, sbx, "launch", nil); st != 404 {
		t.Fatalf("unknown action: %d %s", st, body)
	}
	// Validation failures of the body are 422 with the field; only a
	// body that is not JSON is 400.
	st, body = call(t, "POST", actionsURL(g, sid, "invoke"), sbx, map[string]any{"integration": "testint"}, nil)
	expectInvalid(t, st, body, "action")
	st, body = call(t, "POST", actionsURL(g, sid, "invoke"), sbx, map[string]any{"integration": "testint", "action": "read_thing", "extra": 1}, nil)
	expectInvalid(t, st, body, "extra")
	st, body = call(t, "POST", actionsURL(g, sid, "invoke"), sbx, map[string]any{"integration": 5, "action": "read_thing"}, nil)
	expectInvalid(t, st, body, "integration")
	for _, raw := range []string{"", "{", `{"integration":"testint","action":"read_thing"} {}`, "integration=testint"} {
		resp, body := testenv.Request(t, "POST", actionsURL(g, sid, "invoke"), raw, map[string]string{"Authorization": "Bearer " + sbx})
		if resp.StatusCode != 400 || errorCode(t, body) != httpapi.CodeBadRequest {
			t.Fatalf("body %q: %d %s", raw, resp.StatusCode, body)
		}
	}
	// The body is bounded.
	if st, body := call(t, "POST", actionsURL(g, sid, "invoke"), sbx,
		map[string]any{"integration": "testint", "action": "read_thing", "params": map[string]any{"pad": strings.Repeat("x", 70<<10)}}, nil); st != 413 {
		t.Fatalf("large body: %d %s", st, body)
	}

	// Listing and polling.
	st, body = call(t, "GET", actionsURL(g, sid, "invocations"), sbx, nil, nil)
	var list gateway.InvocationsResponse
	_ = json.Unmarshal(body, &list)
	if st != 200 || len(list.Invocations) != 4 || list.Invocations[0].ID != pending {
		t.Fatalf("list: %d %s", st, body)
	}
	if st, body := call(t, "GET", actionsURL(g, sid, "invocations?limit=2"), owner.Token, nil, nil); st != 200 || strings.Count(string(body), `"action":`) != 2 {
		t.Fatalf("limit: %d %s", st, body)
	}
	st, body = call(t, "GET", actionsURL(g, sid, "invocations?limit=0"), owner.Token, nil, nil)
	expectInvalid(t, st, body, "limit")
	st, body = call(t, "GET", actionsURL(g, sid, "invocations/"+readID), sbx, nil, nil)
	_ = json.Unmarshal(body, &r)
	if st != 200 || r.Invocation.ID != readID || r.Invocation.Status != actinv.StatusCompleted {
		t.Fatalf("get: %d %s", st, body)
	}
	for _, id := range []string{uuid.NewString(), "not-a-uuid"} {
		if st, _ := call(t, "GET", actionsURL(g, sid, "invocations/"+id), sbx, nil, nil); st != 404 {
			t.Fatalf("get %s: %d", id, st)
		}
	}

	// Approval: an unknown mode is refused; approve executes (200 with
	// the result); a second approval or a denial after it is 409.
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/approve"), owner.Token, map[string]any{"mode": "forever"}, nil)
	expectInvalid(t, st, body, "mode")
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/approve"), owner.Token, map[string]any{"mode": 1}, nil)
	expectInvalid(t, st, body, "mode")
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/approve"), owner.Token, map[string]any{"always": true}, nil)
	expectInvalid(t, st, body, "always")
	if resp, body := testenv.Request(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/approve"), "{once}",
		map[string]string{"Authorization": "Bearer " + owner.Token}); resp.StatusCode != 400 || errorCode(t, body) != httpapi.CodeBadRequest {
		t.Fatalf("approve with a body that is not JSON: %d %s", resp.StatusCode, body)
	}
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/approve"), owner.Token, map[string]any{"mode": "once"}, nil)
	r = gateway.InvocationResponse{}
	_ = json.Unmarshal(body, &r)
	if st != 200 || r.Invocation.Status != actinv.StatusCompleted || r.Invocation.ApprovedBy == nil ||
		*r.Invocation.ApprovedBy != owner.ID || !strings.Contains(string(r.Result), `"title":"hello"`) {
		t.Fatalf("approve: %d %s", st, body)
	}
	if st, body := call(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/approve"), owner.Token, nil, nil); st != 409 {
		t.Fatalf("second approve: %d %s", st, body)
	}
	if st, body := call(t, "POST", actionsURL(g, sid, "invocations/"+pending+"/deny"), owner.Token, nil, nil); st != 409 {
		t.Fatalf("deny after approve: %d %s", st, body)
	}
	if st, _ := call(t, "POST", actionsURL(g, sid, "invocations/"+uuid.NewString()+"/approve"), owner.Token, nil, nil); st != 404 {
		t.Fatalf("approve unknown: %d", st)
	}

	// Deny resolves a pending invocation without running it.
	_, r, _ = invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": "no"})
	before = src.executed.Load()
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+r.Invocation.ID+"/deny"), owner.Token, nil, nil)
	_ = json.Unmarshal(body, &r)
	if st != 200 || r.Invocation.Status != actinv.StatusDenied || src.executed.Load() != before {
		t.Fatalf("deny: %d %s", st, body)
	}

	// A decision after expiry → 410 expired, before the sweeper marked
	// the invocation (the approval expires it) and after alike.
	_, r, _ = invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": "late"})
	late := r.Invocation.ID
	_, r, _ = invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": "swept"})
	swept := r.Invocation.ID
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `UPDATE action_invocations SET expires_at = now() - interval '1 second' WHERE id = ANY($1)`,
		[]string{late, swept}); err != nil {
		t.Fatal(err)
	}
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+late+"/approve"), owner.Token, nil, nil)
	if st != 410 || errorCode(t, body) != "expired" {
		t.Fatalf("expired approve before the sweep: %d %s", st, body)
	}
	if n, err := g.svc.ExpirePending(context.Background()); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	for _, id := range []string{late, swept} {
		for _, verb := range []string{"approve", "deny"} {
			st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+id+"/"+verb), owner.Token, nil, nil)
			if st != 410 || errorCode(t, body) != "expired" {
				t.Fatalf("%s after the sweep: %d %s", verb, st, body)
			}
		}
	}
	if src.executed.Load() != before {
		t.Fatal("an expired invocation ran")
	}

	// An ended session's sandbox token is dead: it invokes nothing.
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `UPDATE sessions SET status = 'stopped' WHERE id = $1`, sid); err != nil {
		t.Fatal(err)
	}
	if st, _, body := invoke(t, g, sid, sbx, "read_thing", nil); st != 401 || errorCode(t, body) != "unauthenticated" {
		t.Fatalf("ended session: %d %s", st, body)
	}
}

// Who may do what: the sandbox invokes (its own session only) but never
// approves; people read and, as admins or owners, approve or deny;
// members, services and other organizations cannot.
func TestActionRoutesAuthorization(t *testing.T) {
	w := newWorld(t)
	src := &testSource{}
	g := w.startActions(t, "a", src, nil)
	owner := w.api.NewUser(t)
	admin, member, stranger := w.api.NewUser(t), w.api.NewUser(t), w.api.NewUser(t)
	w.api.AddMember(t, admin, owner.OrgID, auth.RoleAdmin)
	w.api.AddMember(t, member, owner.OrgID, auth.RoleMember)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	other := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbx, svcTok := w.sandboxToken(sid), w.serviceToken(t)
	memberKey := w.apiKey(t, member)

	// Invoke: the session's sandbox only.
	for name, tc := range map[string]struct {
		tok  string
		want int
	}{
		"owner": {owner.Token, 403}, "admin": {admin.Token, 403}, "member api key": {memberKey, 403},
		"service": {svcTok, 403}, "other session's sandbox": {w.sandboxToken(other), 404}, "nobody": {"", 401},
		"stranger": {stranger.Token, 403},
	} {
		if st, _, body := invoke(t, g, sid, tc.tok, "read_thing", nil); st != tc.want {
			t.Fatalf("invoke as %s: %d %s", name, st, body)
		}
	}
	if src.executed.Load() != 0 {
		t.Fatal("a refused invoke executed")
	}

	// Reads: sandbox and people of the org; others 404; services 403.
	for name, tc := range map[string]struct {
		tok  string
		want int
	}{
		"sandbox": {sbx, 200}, "member": {member.Token, 200}, "member key": {memberKey, 200},
		"stranger": {stranger.Token, 404}, "other sandbox": {w.sandboxToken(other), 404}, "service": {svcTok, 403},
	} {
		for _, path := range []string{"available", "guide/testint", "invocations"} {
			if st, body := call(t, "GET", actionsURL(g, sid, path), tc.tok, nil, nil); st != tc.want {
				t.Fatalf("GET %s as %s: %d %s", path, name, st, body)
			}
		}
	}

	newPending := func() string {
		st, r, body := invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": "t"})
		if st != 202 {
			t.Fatalf("pending: %d %s", st, body)
		}
		return r.Invocation.ID
	}
	p1 := newPending()
	for name, tc := range map[string]struct {
		tok  string
		want int
	}{
		"sandbox": {sbx, 403}, "member": {member.Token, 403}, "member key": {memberKey, 403},
		"service": {svcTok, 403}, "stranger": {stranger.Token, 404},
	} {
		for _, verb := range []string{"approve", "deny"} {
			if st, body := call(t, "POST", actionsURL(g, sid, "invocations/"+p1+"/"+verb), tc.tok, nil, nil); st != tc.want {
				t.Fatalf("%s as %s: %d %s", verb, name, st, body)
			}
		}
	}
	// Through another session's path, the invocation does not exist.
	if st, _ := call(t, "GET", actionsURL(g, other, "invocations/"+p1), owner.Token, nil, nil); st != 404 {
		t.Fatalf("cross-session get: %d", st)
	}
	if st, _ := call(t, "POST", actionsURL(g, other, "invocations/"+p1+"/approve"), owner.Token, nil, nil); st != 404 {
		t.Fatalf("cross-session approve: %d", st)
	}
	var status string
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT status FROM action_invocations WHERE id = $1`, p1).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("refused approvals changed the invocation: %s %v", status, err)
	}
	// An admin approves; "always" makes the action allowed from now on.
	st, body := call(t, "POST", actionsURL(g, sid, "invocations/"+p1+"/approve"), admin.Token, map[string]any{"mode": "always"}, nil)
	if st != 200 {
		t.Fatalf("admin approve: %d %s", st, body)
	}
	if st, r, body := invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": "again"}); st != 200 || r.Invocation.Status != actinv.StatusCompleted {
		t.Fatalf("after always: %d %s", st, body)
	}
	// The owner denies (with an empty body).
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `UPDATE organizations SET action_modes = '{}' WHERE id = $1`, owner.OrgID); err != nil {
		t.Fatal(err)
	}
	p2 := newPending()
	if st, body := call(t, "POST", actionsURL(g, sid, "invocations/"+p2+"/deny"), owner.Token, nil, nil); st != 200 {
		t.Fatalf("owner deny: %d %s", st, body)
	}
}

// The per-minute rate and the pending cap are shared by every gateway
// instance: the 61st invoke in a minute and the 11th pending invocation
// are refused whichever instance they reach.
func TestActionLimitsAcrossInstances(t *testing.T) {
	w := newWorld(t)
	src := &testSource{}
	at := time.Now()
	clock := func() time.Time { return at } // one rate window for the whole test
	g1, g2 := w.startActions(t, "a", src, clock), w.startActions(t, "b", src, clock)
	owner := w.api.NewUser(t)
	gws := []*actionsGW{g1, g2}

	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbx := w.sandboxToken(sid)
	for i := range actinv.RatePerMinute {
		if st, _, body := invoke(t, gws[i%2], sid, sbx, "read_thing", nil); st != 200 {
			t.Fatalf("invoke %d: %d %s", i+1, st, body)
		}
	}
	for _, g := range gws {
		// The window is sliding: every call was at the same instant, so
		// the first slot frees exactly 60 s later.
		resp, body := testenv.Request(t, "POST", actionsURL(g, sid, "invoke"), `{"integration":"testint","action":"read_thing"}`,
			map[string]string{"Authorization": "Bearer " + sbx})
		if resp.StatusCode != 429 || errorCode(t, body) != httpapi.CodeRateLimited || resp.Header.Get("Retry-After") != "60" {
			t.Fatalf("61st invoke: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	}
	if n := src.executed.Load(); n != actinv.RatePerMinute {
		t.Fatalf("%d executions, want %d", n, actinv.RatePerMinute)
	}

	sid2 := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbx2 := w.sandboxToken(sid2)
	for i := range actinv.MaxPendingPerSession {
		if st, _, body := invoke(t, gws[i%2], sid2, sbx2, "write_thing", map[string]any{"title": "t"}); st != 202 {
			t.Fatalf("pending %d: %d %s", i+1, st, body)
		}
	}
	var firstPending string
	for _, g := range gws {
		st, body := call(t, "POST", actionsURL(g, sid2, "invoke"), sbx2,
			map[string]any{"integration": "testint", "action": "write_thing", "params": map[string]any{"title": "t"}}, nil)
		if st != 429 || errorCode(t, body) != gateway.CodePendingLimit {
			t.Fatalf("11th pending: %d %s", st, body)
		}
	}
	// Actions that need no approval still run; resolving one pending
	// invocation makes room for another.
	if st, _, body := invoke(t, g1, sid2, sbx2, "read_thing", nil); st != 200 {
		t.Fatalf("allowed action under the pending cap: %d %s", st, body)
	}
	_, body := call(t, "GET", actionsURL(g2, sid2, "invocations?limit=100"), owner.Token, nil, nil)
	var list gateway.InvocationsResponse
	_ = json.Unmarshal(body, &list)
	for _, inv := range list.Invocations {
		if inv.Status == actinv.StatusPending {
			firstPending = inv.ID
		}
	}
	if st, body := call(t, "POST", actionsURL(g2, sid2, "invocations/"+firstPending+"/deny"), owner.Token, nil, nil); st != 200 {
		t.Fatalf("deny: %d %s", st, body)
	}
	if st, _, body := invoke(t, g1, sid2, sbx2, "write_thing", map[string]any{"title": "t"}); st != 202 {
		t.Fatalf("pending after a denial: %d %s", st, body)
	}
}

// People watching a session see approvals live, whichever instance the
// invocation, the approval or the denial reaches: the client is on
// gateway 1, everything else happens on gateway 2.
func TestLiveApprovalsOverWebSocket(t *testing.T) {
	w := newWorld(t)
	src := &testSource{}
	g1, g2 := w.startActions(t, "a", src, nil), w.startActions(t, "b", src, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	st, c := dialWS(t, g1.gw, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, c, protocol.MsgInit)
	testenv.Eventually(t, 10*time.Second, "sandbox booted", func() bool { return w.prov.Created() == 1 })
	sbx := w.sandboxToken(sid) // the token the boot gave the sandbox

	// Pending → action_approval_request; approved on g2 → action_completed.
	_, r, _ := invoke(t, g2, sid, sbx, "write_thing", map[string]any{"title": "ship it"})
	typ, _, id := frameOf(t, readUntil(t, c, protocol.MsgActionApprovalRequest))
	if typ != protocol.MsgActionApprovalRequest || id != r.Invocation.ID {
		t.Fatalf("request: %s %s", typ, id)
	}
	if st, body := call(t, "POST", actionsURL(g2, sid, "invocations/"+id+"/approve"), owner.Token, nil, nil); st != 200 {
		t.Fatalf("approve: %d %s", st, body)
	}
	_, status, cid := frameOf(t, readUntil(t, c, protocol.MsgActionCompleted))
	if status != actinv.StatusCompleted || cid != id {
		t.Fatalf("completed: %s %s", status, cid)
	}

	// Denied on g2 → action_approval_result denied.
	_, r, _ = invoke(t, g2, sid, sbx, "write_thing", map[string]any{"title": "no"})
	if _, _, rid := frameOf(t, readUntil(t, c, protocol.MsgActionApprovalRequest)); rid != r.Invocation.ID {
		t.Fatalf("second request: %s", rid)
	}
	if st, body := call(t, "POST", actionsURL(g2, sid, "invocations/"+r.Invocation.ID+"/deny"), owner.Token, nil, nil); st != 200 {
		t.Fatalf("deny: %d %s", st, body)
	}
	_, status, did := frameOf(t, readUntil(t, c, protocol.MsgActionApprovalResult))
	if status != actinv.StatusDenied || did != r.Invocation.ID {
		t.Fatalf("denied: %s %s", status, did)
	}

	// Policy denials and failures are announced too.
	invoke(t, g2, sid, sbx, "broken", nil)
	if _, status, _ := frameOf(t, readUntil(t, c, protocol.MsgActionCompleted)); status != actinv.StatusFailed {
		t.Fatalf("failure: %s", status)
	}

	// Expired by the sweeper on g2 → action_approval_result expired.
	_, r, _ = invoke(t, g2, sid, sbx, "write_thing", map[string]any{"title": "later"})
	readUntil(t, c, protocol.MsgActionApprovalRequest)
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `UPDATE action_invocations SET expires_at = now() - interval '1 second' WHERE id = $1`, r.Invocation.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := g2.svc.ExpirePending(context.Background()); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	_, status, eid := frameOf(t, readUntil(t, c, protocol.MsgActionApprovalResult))
	if status != actinv.StatusExpired || eid != r.Invocation.ID {
		t.Fatalf("expired: %s %s", status, eid)
	}
}

// Without an invocations service the routes answer 503, never panic.
func TestActionRoutesWithoutService(t *testing.T) {
	_, g, owner, sid := newSessionWorld(t)
	if st, body := call(t, "GET", g.url+"/proliferate/"+sid+"/actions/available", owner.Token, nil, nil); st != http.StatusServiceUnavailable {
		t.Fatalf("%d %s", st, body)
	}
}
