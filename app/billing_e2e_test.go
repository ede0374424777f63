package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

type billingInfo struct {
	State          string `json:"state"`
	Balance        string `json:"balance"`
	UsageBySession []struct {
		SessionID  string `json:"session_id"`
		Credits    string `json:"credits"`
		LLMCostUSD string `json:"llm_cost_usd"`
	} `json:"usage_by_session"`
}

type apiError struct {
	Error struct {
		Code    string         `json:"code"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// The whole billing loop on the dev stack, through its real interfaces:
// an unconfigured organization is refused (402) until it starts its trial;
// the agent's model traffic goes through the LLM proxy with the session's
// own key and its spend reaches the balance (llm.spend → billing-rater →
// billing.usage → billing-ledger); at zero the organization is exhausted,
// the enforcer pauses its running session with credit_limit and new
// sessions get 402; buying credits (Autumn) makes it active again and the
// session resumes.
func TestOrgReachingZeroIsPausedAndResumesAfterBuyingCredits(t *testing.T) {
	dir := t.TempDir()
	fake := autumnfake.New(t)
	cfg := devConfig(t, filepath.Join(dir, "kafka"), "RUN_SESSIONS", "gateway", "BILLING_ENABLED", "true",
		"AUTUMN_URL", fake.URL, "AUTUMN_SECRET_KEY", autumnfake.Key, "METER_INTERVAL", "1s")
	p := &pipeline{dev: startDev(t, cfg)}
	base := "http://" + p.dev.app.APIAddr()
	email := fmt.Sprintf("billing-%d@example.com", time.Now().UnixNano())
	var signup struct {
		AccessToken string `json:"access_token"`
	}
	if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": email, "password": "correct horse battery", "name": "B"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	tok := signup.AccessToken
	pool := testenv.Postgres(t)
	var org string
	if err := pool.QueryRow(context.Background(), `SELECT active_org_id::text FROM users WHERE lower(email) = lower($1)`, email).Scan(&org); err != nil {
		t.Fatal(err)
	}

	// Unconfigured: refused with the action to take, nothing created.
	var denied apiError
	if code := apiCall(t, base, "POST", "/sessions", tok, map[string]any{"title": "too early"}, &denied); code != 402 ||
		denied.Error.Code != billing.DenyNotConfigured || denied.Error.Details["action"] != "start_trial" {
		t.Fatalf("session before the trial: %d %+v", code, denied)
	}
	if code := apiCall(t, base, "POST", "/onboarding/start-trial", tok, map[string]any{"plan": "dev"}, nil); code != 201 {
		t.Fatalf("start trial %d", code)
	}
	var info billingInfo
	if code := apiCall(t, base, "GET", "/billing", tok, nil, &info); code != 200 || info.State != billing.StateTrial || info.Balance != "1000" {
		t.Fatalf("after the trial started: %d %+v", code, info)
	}

	// A session; the agent answers through the proxy; its spend is billed.
	var sess struct {
		ID string `json:"id"`
	}
	if code := apiCall(t, base, "POST", "/sessions", tok, map[string]any{"title": "billed"}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	gw := client.New("http://"+p.dev.app.GatewayAddr(), tok)
	var got frames
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := gw.Connect(ctx, sess.ID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 60*time.Second, "init", func() bool { return got.count(protocol.MsgInit) > 0 })
	if err := conn.Prompt("Say hello. [[script:hello]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "the answer", func() bool { return got.count(protocol.MsgMessageComplete) > 0 })
	testenv.Eventually(t, 60*time.Second, "the LLM spend of the session on the balance", func() bool {
		apiCall(t, base, "GET", "/billing", tok, nil, &info)
		for _, s := range info.UsageBySession {
			if s.SessionID == sess.ID && s.LLMCostUSD != "" && s.LLMCostUSD != "0" && s.LLMCostUSD != "0.000000" {
				return info.Balance != "1000"
			}
		}
		return false
	})
	var spendRows, keys int
	if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM billing_events WHERE organization_id = $1 AND event_type = 'llm'),
			(SELECT count(*) FROM llm_virtual_keys WHERE session_id = $2)`, org, sess.ID).Scan(&spendRows, &keys); err != nil {
		t.Fatal(err)
	}
	if spendRows == 0 || keys != 1 {
		t.Fatalf("llm billing events %d, virtual keys of the session %d", spendRows, keys)
	}

	// Down to zero: an operator's adjustment takes what is left.
	ledger := &billing.Ledger{Pool: pool, Codec: mustCodec(t)}
	acct, err := billing.ReadAccount(context.Background(), pool, org)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ledger.AddCredits(context.Background(), billing.Grant{OrgID: org, Key: "test:zero:" + org,
		CreditsMicros: -acct.BalanceMicros, Type: "manual_adjustment", Reason: "spend it all"})
	if err != nil || res.State != billing.StateExhausted {
		t.Fatalf("to zero: %+v %v", res, err)
	}
	var view struct {
		Status      string  `json:"status"`
		PauseReason *string `json:"pause_reason"`
	}
	testenv.Eventually(t, 120*time.Second, "the session paused for the credit limit", func() bool {
		apiCall(t, base, "GET", "/sessions/"+sess.ID, tok, nil, &view)
		return view.Status == "paused" && view.PauseReason != nil && *view.PauseReason == "credit_limit"
	})
	var revoked int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM llm_virtual_keys WHERE session_id = $1 AND revoked_at IS NOT NULL`, sess.ID).Scan(&revoked); err != nil || revoked != 1 {
		t.Fatalf("revoked keys %d %v", revoked, err)
	}
	denied = apiError{}
	if code := apiCall(t, base, "POST", "/sessions", tok, map[string]any{"title": "no credits"}, &denied); code != 402 ||
		denied.Error.Code != billing.DenyExhausted || denied.Error.Details["action"] != "buy_credits" {
		t.Fatalf("session at zero: %d %+v", code, denied)
	}

	// Buying credits: active again, and the paused session resumes.
	fake.SetCustomer(autumnfake.Customer{ID: org, PaymentMethod: true})
	if code := apiCall(t, base, "POST", "/billing/credits", tok, map[string]any{"packs": 2}, nil); code != 200 && code != 201 {
		t.Fatalf("buy credits %d", code)
	}
	if code := apiCall(t, base, "GET", "/billing", tok, nil, &info); code != 200 || info.State != billing.StateActive {
		t.Fatalf("after buying: %d %+v", code, info)
	}
	if b, _ := strconv.ParseFloat(info.Balance, 64); b != 1000 {
		t.Fatalf("balance after buying 2 packs at zero: %s", info.Balance)
	}
	// The pause ended the stream; the client connects again (resume gate:
	// allowed now) and prompts.
	conn.Close()
	inits, completes := got.count(protocol.MsgInit), got.count(protocol.MsgMessageComplete)
	conn, err = gw.Connect(ctx, sess.ID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 60*time.Second, "init after resuming", func() bool { return got.count(protocol.MsgInit) > inits })
	if err := conn.Prompt("Say hello again. [[script:hello]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "the resumed session's answer", func() bool { return got.count(protocol.MsgMessageComplete) > completes })
	apiCall(t, base, "GET", "/sessions/"+sess.ID, tok, nil, &view)
	if view.Status != "running" {
		t.Fatalf("after resuming: %+v", view)
	}
}

func mustCodec(t *testing.T) *schemas.Codec {
	t.Helper()
	c, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
