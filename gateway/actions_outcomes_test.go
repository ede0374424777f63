package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/internal/actions"
	actinv "github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// expectInvalid checks a 422 validation_failed answer in the one error
// shape whose details name exactly fields, in order.
func expectInvalid(t *testing.T, st int, body []byte, fields ...string) {
	t.Helper()
	var eb struct {
		Error struct {
			Code      string               `json:"code"`
			Message   string               `json:"message"`
			Details   []httpapi.FieldError `json:"details"`
			RequestID string               `json:"request_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || st != http.StatusUnprocessableEntity ||
		eb.Error.Code != httpapi.CodeValidation || eb.Error.RequestID == "" || eb.Error.Message == "" {
		t.Fatalf("want 422 %s: %d %s", httpapi.CodeValidation, st, body)
	}
	var got []string
	for _, d := range eb.Error.Details {
		if d.Problem == "" {
			t.Fatalf("a detail without its problem: %s", body)
		}
		got = append(got, d.Field)
	}
	if !slices.Equal(got, fields) {
		t.Fatalf("details name %v, want %v: %s", got, fields, body)
	}
}

const linearTestToken = "lin_oauth_gateway_test_token"

// linearSources offers Linear, against the local fake, to every session.
type linearSources struct{ src *linear.Source }

func (l linearSources) List(ctx context.Context, _ sessions.Session) ([]actinv.Available, error) {
	defs, err := l.src.ListActions(ctx, actions.ExecContext{})
	return []actinv.Available{{Integration: l.src.ID(), DisplayName: l.src.DisplayName(), Actions: defs}}, err
}

func (l linearSources) Get(_ context.Context, sess sessions.Session, id string) (actions.Source, actions.ExecContext, *string, error) {
	if id != l.src.ID() {
		return nil, actions.ExecContext{}, nil, actinv.ErrUnknownIntegration
	}
	return l.src, actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID, Token: linearTestToken}, nil, nil
}

func (linearSources) Drifted(context.Context, sessions.Session, string, actions.Definition) (actinv.Drift, error) {
	return actinv.Drift{}, nil
}

func (linearSources) CurrentDefinition(context.Context, sessions.Session, string, string) (actions.Definition, bool, error) {
	return actions.Definition{}, false, actinv.ErrUnknownIntegration // no connectors here
}

// An admin approves a Linear issue creation and Linear fails: the
// approval is answered 200 with the invocation failed and Linear's error
// (not 502: the approval worked, the action did not); the failure is
// recorded, and the agent polling its invocation gets it too.
func TestApprovedExecutionFailureAnswers200(t *testing.T) {
	w := newWorld(t)
	fake := linearfake.New(t)
	fake.AddToken(linearTestToken, "user-ada")
	fake.AddUser(linearfake.User{ID: "user-ada", Name: "Ada", Email: "ada@example.com"})
	fake.AddTeam(linearfake.Team{ID: "team-eng", Key: "ENG", Name: "Engineering"})
	g := w.startActionsWith(t, "a", linearSources{src: linear.New(linear.Options{BaseURL: fake.URL()})}, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbx := w.sandboxToken(sid)

	st, body := call(t, "POST", actionsURL(g, sid, "invoke"), sbx, map[string]any{"integration": "linear", "action": "create_issue",
		"params": map[string]any{"teamId": "team-eng", "title": "Crash on start"}}, nil)
	var r gateway.InvocationResponse
	if err := json.Unmarshal(body, &r); err != nil || st != http.StatusAccepted || r.Invocation.Status != actinv.StatusPending {
		t.Fatalf("invoke: %d %s", st, body)
	}
	id := r.Invocation.ID

	fake.FailNext(1, http.StatusServiceUnavailable)
	st, body = call(t, "POST", actionsURL(g, sid, "invocations/"+id+"/approve"), owner.Token, map[string]any{"mode": "once"}, nil)
	r = gateway.InvocationResponse{}
	if err := json.Unmarshal(body, &r); err != nil || st != http.StatusOK {
		t.Fatalf("approve: %d %s", st, body)
	}
	inv := r.Invocation
	if inv.ID != id || inv.Status != actinv.StatusFailed || inv.Error == nil || !strings.Contains(*inv.Error, "linear") ||
		r.Error != *inv.Error || inv.ApprovedBy == nil || *inv.ApprovedBy != owner.ID || len(r.Result) != 0 {
		t.Fatalf("approve answered %s", body)
	}
	if strings.Contains(string(body), linearTestToken) {
		t.Fatal("the answer carries the credential")
	}
	if len(fake.Issues()) != 0 {
		t.Fatal("Linear created the issue")
	}
	var status, stored string
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT status, error FROM action_invocations WHERE id = $1`, id).
		Scan(&status, &stored); err != nil || status != actinv.StatusFailed || stored != *inv.Error {
		t.Fatalf("stored %s %q %v", status, stored, err)
	}
	// The agent waiting on the invocation sees the failure.
	st, body = call(t, "GET", actionsURL(g, sid, "invocations/"+id), sbx, nil, nil)
	r = gateway.InvocationResponse{}
	if err := json.Unmarshal(body, &r); err != nil || st != http.StatusOK || r.Invocation.Status != actinv.StatusFailed ||
		r.Invocation.Error == nil || *r.Invocation.Error != *inv.Error {
		t.Fatalf("poll: %d %s", st, body)
	}
	// It was decided: approving again is 409.
	if st, body := call(t, "POST", actionsURL(g, sid, "invocations/"+id+"/approve"), owner.Token, nil, nil); st != http.StatusConflict || errorCode(t, body) != httpapi.CodeConflict {
		t.Fatalf("second approve: %d %s", st, body)
	}
}

// downSource is an integration whose server fails: it cannot list its
// actions or give its guide; its one reachable action has a schema that
// does not compile.
type downSource struct{ listing bool }

func (downSource) ID() string          { return "downint" }
func (downSource) DisplayName() string { return "Down" }
func (downSource) Guide(context.Context, actions.ExecContext) (string, error) {
	return "", errors.New("connection refused")
}

func (d downSource) ListActions(context.Context, actions.ExecContext) ([]actions.Definition, error) {
	if !d.listing {
		return nil, errors.New("connection refused")
	}
	return []actions.Definition{{ID: "odd", Risk: actions.RiskRead, Params: json.RawMessage(`{"type":5}`)}}, nil
}

func (downSource) Execute(context.Context, string, json.RawMessage, actions.ExecContext) (json.RawMessage, error) {
	return nil, errors.New("unreachable")
}

type downSources struct{ src downSource }

func (d downSources) List(context.Context, sessions.Session) ([]actinv.Available, error) {
	return nil, nil
}
func (d downSources) Get(_ context.Context, sess sessions.Session, id string) (actions.Source, actions.ExecContext, *string, error) {
	if id != d.src.ID() {
		return nil, actions.ExecContext{}, nil, actinv.ErrUnknownIntegration
	}
	return d.src, actions.ExecContext{OrgID: sess.OrgID, SessionID: sess.ID}, nil, nil
}

func (downSources) Drifted(context.Context, sessions.Session, string, actions.Definition) (actinv.Drift, error) {
	return actinv.Drift{}, nil
}

func (downSources) CurrentDefinition(context.Context, sessions.Session, string, string) (actions.Definition, bool, error) {
	return actions.Definition{}, false, actinv.ErrUnknownIntegration
}

// An integration that fails is the integration's fault, not the caller's
// and not an internal error: 502 unavailable, nothing stored.
func TestUnreachableIntegrationIs502(t *testing.T) {
	w := newWorld(t)
	owner := w.api.NewUser(t)
	for _, listing := range []bool{false, true} {
		g := w.startActionsWith(t, "a", downSources{src: downSource{listing: listing}}, nil)
		sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
		sbx := w.sandboxToken(sid)
		action := "odd"
		if !listing {
			st, body := call(t, "GET", actionsURL(g, sid, "guide/downint"), sbx, nil, nil)
			if st != http.StatusBadGateway || errorCode(t, body) != httpapi.CodeUnavailable {
				t.Fatalf("guide: %d %s", st, body)
			}
			action = "anything"
		}
		st, body := call(t, "POST", actionsURL(g, sid, "invoke"), sbx, map[string]any{"integration": "downint", "action": action}, nil)
		if st != http.StatusBadGateway || errorCode(t, body) != httpapi.CodeUnavailable {
			t.Fatalf("invoke (listing %v): %d %s", listing, st, body)
		}
		var n int
		if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT count(*) FROM action_invocations WHERE session_id = $1`, sid).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d invocations stored, %v", n, err)
		}
	}
}
