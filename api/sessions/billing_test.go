package sessions_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	sessionsapi "github.com/proliferate/proliferate/api/sessions"
	"github.com/proliferate/proliferate/internal/billing"
)

// An exhausted organization's create answers 402 credits_exhausted with the
// action buy_credits, and inserts nothing; with credits it creates.
func TestCreateDeniedByBillingIs402(t *testing.T) {
	o := sessionsapi.Options{Codec: codec, Admit: billing.Gate{Enabled: true}}
	e := apitest.New(t, []func(*api.Server) error{sessionsapi.RegisterWith(o)})
	owner := e.NewUser(t)
	if _, err := e.Deps.Pool.Exec(context.Background(), `UPDATE organizations SET billing_state = 'exhausted', shadow_balance = 0,
			billing_plan = 'dev' WHERE id = $1`, owner.OrgID); err != nil {
		t.Fatal(err)
	}
	body := e.Do(t, http.MethodPost, "/sessions", owner.Token, map[string]any{"title": "x"}).
		ExpectError(t, http.StatusPaymentRequired, billing.DenyExhausted)
	raw, err := json.Marshal(body.Error.Details)
	if err != nil {
		t.Fatal(err)
	}
	var details struct {
		Action string `json:"action"`
	}
	if err := json.Unmarshal(raw, &details); err != nil || details.Action != "buy_credits" {
		t.Fatalf("details %s: want action buy_credits", raw)
	}
	if body.Error.Message == "" {
		t.Fatal("denial without a message")
	}
	if n := e.CountRows(t, "sessions", "org_id = $1", owner.OrgID); n != 0 {
		t.Fatalf("%d sessions inserted on denial", n)
	}
	if _, err := e.Deps.Pool.Exec(context.Background(), `UPDATE organizations SET billing_state = 'active', shadow_balance = 100
		WHERE id = $1`, owner.OrgID); err != nil {
		t.Fatal(err)
	}
	e.Do(t, http.MethodPost, "/sessions", owner.Token, map[string]any{"title": "x"}).Expect(t, http.StatusCreated, nil)
}
