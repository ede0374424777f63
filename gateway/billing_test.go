package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

// startGated runs a gateway whose session creation and resumes pass the
// billing gate (as app wires it with BILLING_ENABLED=true).
func (w *world) startGated(t *testing.T) string {
	t.Helper()
	w.store.Admit = billing.Gate{Enabled: true}
	gate := billing.Gate{Enabled: true, Pool: w.api.Deps.Pool}
	return w.startGateway(t, gwOptions{Instance: "gated", Hub: func(d *hub.Deps) { d.Gate = gate.Allow }}).url
}

func (w *world) setBilling(t *testing.T, org, state string, credits int) {
	t.Helper()
	if _, err := w.api.Deps.Pool.Exec(context.Background(), `UPDATE organizations SET billing_state = $2, shadow_balance = $3,
			billing_plan = 'dev' WHERE id = $1`, org, state, credits); err != nil {
		t.Fatal(err)
	}
}

// expectDenial checks a 402 in the stable error shape.
func expectDenial(t *testing.T, status int, body []byte, code, action string) {
	t.Helper()
	if status != http.StatusPaymentRequired {
		t.Fatalf("status %d (%s), want 402", status, body)
	}
	var e httpapi.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(e.Error.Details)
	var details struct {
		Action string `json:"action"`
	}
	_ = json.Unmarshal(raw, &details)
	if e.Error.Code != code || details.Action != action || e.Error.Message == "" || e.Error.RequestID == "" {
		t.Fatalf("denial %s, want code %s action %s", body, code, action)
	}
}

func TestGatewayBillingDenialsAre402(t *testing.T) {
	w := newWorld(t)
	url := w.startGated(t)
	u := w.api.NewUser(t)
	w.setBilling(t, u.OrgID, billing.StateExhausted, 0)

	status, body := call(t, http.MethodPost, url+"/proliferate/sessions", u.Token, map[string]any{"title": "x"}, nil)
	expectDenial(t, status, body, billing.DenyExhausted, "buy_credits")
	var n int
	if err := w.api.Deps.Pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE org_id = $1`, u.OrgID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d sessions inserted on denial (%v)", n, err)
	}

	// With credits the session is created; once paused for the credit limit
	// and the organization exhausted again, resuming it (a prompt) is 402.
	w.setBilling(t, u.OrgID, billing.StateActive, 100)
	status, body = call(t, http.MethodPost, url+"/proliferate/sessions", u.Token, map[string]any{"title": "x"}, nil)
	if status != http.StatusCreated {
		t.Fatalf("create with credits: %d %s", status, body)
	}
	var s struct{ ID string }
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.MarkPaused(context.Background(), s.ID, sessions.PauseCreditLimit, ""); err != nil {
		t.Fatal(err)
	}
	w.setBilling(t, u.OrgID, billing.StateSuspended, 100)
	status, body = call(t, http.MethodPost, url+"/proliferate/"+s.ID+"/message", u.Token, map[string]any{"content": "go on"}, nil)
	expectDenial(t, status, body, billing.DenySuspended, "contact_support")
	if w.prov.Created() != 0 {
		t.Fatal("a sandbox was started for a refused resume")
	}
}

// Only the platform's services may pause with a reason (credit_limit).
func TestGatewayPauseReasonIsForServices(t *testing.T) {
	w := newWorld(t)
	url := w.startGated(t)
	u := w.api.NewUser(t)
	w.setBilling(t, u.OrgID, billing.StateActive, 100)
	status, body := call(t, http.MethodPost, url+"/proliferate/sessions", u.Token, map[string]any{"title": "x"}, nil)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	var s struct{ ID string }
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	status, body = call(t, http.MethodPost, url+"/proliferate/"+s.ID+"/pause", u.Token, map[string]any{"reason": "credit_limit"}, nil)
	if status != http.StatusForbidden {
		t.Fatalf("a person pausing with a reason: %d %s", status, body)
	}
	svc := w.serviceToken(t)
	status, body = call(t, http.MethodPost, url+"/proliferate/"+s.ID+"/pause", svc, map[string]any{"reason": "bogus"}, nil)
	if status != http.StatusUnprocessableEntity {
		t.Fatalf("unknown reason: %d %s", status, body)
	}
	status, body = call(t, http.MethodPost, url+"/proliferate/"+s.ID+"/pause", svc, map[string]any{"reason": "credit_limit"}, nil)
	if status != http.StatusOK {
		t.Fatalf("service pause: %d %s", status, body)
	}
	got, err := w.store.Get(context.Background(), "", s.ID)
	if err != nil || got.Status != sessions.StatusPaused || got.PauseReason == nil || *got.PauseReason != sessions.PauseCreditLimit {
		t.Fatalf("after the service's pause: %+v (%v)", got, err)
	}
	// The manual pause (no body) still works for people.
	status, body = call(t, http.MethodPost, url+"/proliferate/sessions", u.Token, map[string]any{"title": "y"}, nil)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	if status, body = call(t, http.MethodPost, url+"/proliferate/"+s.ID+"/pause", u.Token, nil, nil); status != http.StatusOK {
		t.Fatalf("manual pause: %d %s", status, body)
	}
}
