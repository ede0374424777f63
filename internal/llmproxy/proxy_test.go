package llmproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
)

// messages builds a Messages API request; the long cached system prompt
// makes llm-sim report cache tokens too.
func messages(stream bool, prompt string) string {
	b, _ := json.Marshal(map[string]any{
		"model": "claude-sim", "max_tokens": 1024, "stream": stream,
		"system": []any{map[string]any{"type": "text", "text": strings.Repeat("You are a careful agent. ", 100),
			"cache_control": map[string]string{"type": "ephemeral"}}},
		"messages": []any{map[string]any{"role": "user", "content": prompt}},
	})
	return string(b)
}

func anthropicError(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("status %d error body: %v", resp.StatusCode, err)
	}
	if e.Type != "error" || e.Error.Message == "" {
		t.Fatalf("error shape %+v", e)
	}
	return e.Error.Type
}

// checkSpend waits for the one llm.spend event of the organization and checks
// it against the usage upstream reported.
func checkSpend(t *testing.T, w *world, p proxyUnderTest, orgID, sessionID, key string, want llmsim.Usage) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the llm.spend event", func() bool { return len(w.spends(t, orgID)) > 0 })
	p.Wait()
	got := w.spends(t, orgID)
	if len(got) != 1 {
		t.Fatalf("%d llm.spend events, want exactly 1", len(got))
	}
	s := got[0]
	cost := sonnetCost(want)
	if s.Model != "claude-sim" || *s.SessionID != sessionID || s.Source != "llm-proxy" ||
		s.InputTokens != int64(want.InputTokens) || s.OutputTokens != int64(want.OutputTokens) ||
		s.CacheWriteTokens != int64(want.CacheCreationInputTokens) || s.CacheReadTokens != int64(want.CacheReadInputTokens) ||
		s.TotalTokens != int64(want.InputTokens+want.OutputTokens+want.CacheCreationInputTokens+want.CacheReadInputTokens) ||
		s.CostUSDMicros != cost || cost == 0 || s.EndedAt.Before(s.StartedAt) {
		t.Fatalf("spend %+v, want usage %+v at cost %d", s, want, cost)
	}
	if id, err := uuid.Parse(s.RequestID); err != nil || id.Version() != 7 {
		t.Fatalf("request id %q is not a UUIDv7", s.RequestID)
	}
	if n := w.keySpend(t, key); n != cost {
		t.Fatalf("key spend %d, want %d", n, cost)
	}
}

func TestStreamedResponseIsByteIdenticalAndBilledOnce(t *testing.T) {
	w := newWorld(t)
	orgID := w.org(t, "1000", "active")
	key, sessionID := issue(t, w.keys(t, true, nil), orgID)
	p := w.proxy(t, nil)

	resp := call(t, context.Background(), p.url+"/v1/messages", key.Value, messages(true, "[[script:hello]] hi"),
		map[string]string{"anthropic-beta": "prompt-caching-2024-07-31"})
	got := readAll(t, resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	path, hdr, sent := w.rec.last(t)
	if !bytes.Equal(got, sent) || !bytes.Contains(got, []byte("message_delta")) {
		t.Fatalf("client got %d bytes, upstream sent %d: not identical", len(got), len(sent))
	}
	if path != "/v1/messages" || hdr.Get("X-Api-Key") != upstreamKey || hdr.Get("Authorization") != "" ||
		hdr.Get("Anthropic-Version") != "2023-06-01" || hdr.Get("Anthropic-Beta") != "prompt-caching-2024-07-31" {
		t.Fatalf("upstream request %s headers %v", path, hdr)
	}
	recs := w.sim.Records()
	if len(recs) != 1 || recs[0].Usage.CacheCreationInputTokens == 0 {
		t.Fatalf("upstream records %+v", recs)
	}
	checkSpend(t, w, p, orgID, sessionID, key.Value, recs[0].Usage)
}

func TestNonStreamedJSONAndCountTokens(t *testing.T) {
	w := newWorld(t)
	orgID := w.org(t, "1000", "active")
	key, sessionID := issue(t, w.keys(t, false, nil), orgID)
	p := w.proxy(t, nil)

	// Bearer auth works as well as x-api-key, and never goes upstream.
	resp := call(t, context.Background(), p.url+"/v1/messages", "", messages(false, "[[script:bash]] go"),
		map[string]string{"Authorization": "Bearer " + key.Value})
	got := readAll(t, resp.Body)
	_, hdr, sent := w.rec.last(t)
	if resp.StatusCode != 200 || !bytes.Equal(got, sent) || !json.Valid(got) {
		t.Fatalf("status %d, body %q, upstream sent %q", resp.StatusCode, got, sent)
	}
	if hdr.Get("X-Api-Key") != upstreamKey || hdr.Get("Authorization") != "" {
		t.Fatalf("upstream headers %v", hdr)
	}
	checkSpend(t, w, p, orgID, sessionID, key.Value, w.sim.Records()[0].Usage)

	resp = call(t, context.Background(), p.url+"/v1/messages/count_tokens", key.Value, messages(false, "count me"), nil)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ct); err != nil || resp.StatusCode != 200 || ct.InputTokens == 0 {
		t.Fatalf("count_tokens: %d %+v %v", resp.StatusCode, ct, err)
	}
	if path, _, _ := w.rec.last(t); path != "/v1/messages/count_tokens" {
		t.Fatalf("count_tokens went to %s", path)
	}
	p.Wait()
	if n := len(w.spends(t, orgID)); n != 1 {
		t.Fatalf("%d llm.spend events after count_tokens, want still 1", n)
	}

	resp, err := http.Get(p.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestRefusedKeys(t *testing.T) {
	w := newWorld(t)
	orgID := w.org(t, "1000", "active")
	keys := w.keys(t, false, nil)
	// Two replicas sharing Postgres and Redis; cache entries live for an
	// hour, so only the revocation broadcast can make b forget a key.
	a := w.proxy(t, nil)
	b := w.proxy(t, func(d *llmproxy.Deps) { d.CacheTTL = time.Hour })
	url := "/v1/messages"
	body := messages(true, "hi")
	status := func(p proxyUnderTest, key string) (int, string) {
		resp := call(t, context.Background(), p.url+url, key, body, nil)
		if resp.StatusCode == 200 {
			readAll(t, resp.Body)
			return 200, ""
		}
		return resp.StatusCode, anthropicError(t, resp)
	}

	live, sessionID := issue(t, keys, orgID)
	other, _ := issue(t, keys, orgID)
	for _, p := range []proxyUnderTest{a, b} {
		if code, typ := status(p, live.Value); code != 200 {
			t.Fatalf("live key refused: %d %s", code, typ)
		}
	}
	if err := keys.RevokeSession(context.Background(), sessionID, "session_paused"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "replica b to refuse the revoked key", func() bool {
		code, _ := status(b, live.Value)
		return code == 401
	})
	if code, typ := status(a, live.Value); code != 401 || typ != "authentication_error" {
		t.Fatalf("revoked key on a: %d %s", code, typ)
	}
	if code, _ := status(b, other.Value); code != 200 {
		t.Fatalf("another session's key was refused: %d", code)
	}
	var reason string
	if err := w.pool.QueryRow(context.Background(), `SELECT revoke_reason FROM llm_virtual_keys
		WHERE session_id = $1 AND revoked_at IS NOT NULL`, sessionID).Scan(&reason); err != nil || reason != "session_paused" {
		t.Fatalf("revoke reason %q: %v", reason, err)
	}
	// Revoking the organization reaches the other session's key too.
	if err := keys.RevokeOrg(context.Background(), orgID, "credit_limit"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "replica b to refuse the org's keys", func() bool {
		code, _ := status(b, other.Value)
		return code == 401
	})

	expired, _ := issue(t, w.keys(t, false, func() time.Time { return time.Now().Add(-25 * time.Hour) }), orgID)
	if code, typ := status(a, expired.Value); code != 401 || typ != "authentication_error" {
		t.Fatalf("expired key: %d %s", code, typ)
	}
	for _, k := range []string{"sk-prlf-unknown", upstreamKey, ""} {
		if code, typ := status(a, k); code != 401 || typ != "authentication_error" {
			t.Fatalf("key %q: %d %s", k, code, typ)
		}
	}
	// Refused requests never reach upstream: 2 + 2 + 1 successful calls
	// (plus the polling ones that succeeded before the broadcast arrived).
	for i := range w.rec.count() {
		w.rec.mu.Lock()
		h := w.rec.reqs[i].header
		w.rec.mu.Unlock()
		if h.Get("X-Api-Key") != upstreamKey {
			t.Fatalf("upstream request %d carried x-api-key %q", i, h.Get("X-Api-Key"))
		}
	}
}

func TestBudgetAndBodyLimit(t *testing.T) {
	w := newWorld(t)
	// 0.1 credit = $0.001 = 1000 micro-dollars of credit value; at the ×3
	// markup the key may spend 333 micro-dollars: one request uses it up.
	orgID := w.org(t, "0.1", "active")
	key, _ := issue(t, w.keys(t, true, nil), orgID)
	if key.MaxBudgetUSDMicros != 333 {
		t.Fatalf("budget %d, want 333", key.MaxBudgetUSDMicros)
	}
	p := w.proxy(t, func(d *llmproxy.Deps) { d.MaxBodyBytes = 64 << 10 })
	resp := call(t, context.Background(), p.url+"/v1/messages", key.Value, messages(true, "[[script:hello]]"), nil)
	readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	resp = call(t, context.Background(), p.url+"/v1/messages", key.Value, messages(true, "again"), nil)
	if typ := anthropicError(t, resp); resp.StatusCode != http.StatusPaymentRequired || typ != "billing_error" {
		t.Fatalf("over budget: %d %s", resp.StatusCode, typ)
	}
	// Another replica (nothing cached) reads the stored spend.
	p.Wait()
	q := w.proxy(t, nil)
	resp = call(t, context.Background(), q.url+"/v1/messages", key.Value, messages(true, "again"), nil)
	if typ := anthropicError(t, resp); resp.StatusCode != http.StatusPaymentRequired || typ != "billing_error" {
		t.Fatalf("over budget on a fresh replica: %d %s", resp.StatusCode, typ)
	}

	key2, _ := issue(t, w.keys(t, false, nil), orgID)
	before := w.rec.count()
	resp = call(t, context.Background(), p.url+"/v1/messages", key2.Value, messages(false, strings.Repeat("x", 70<<10)), nil)
	if typ := anthropicError(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || typ != "request_too_large" {
		t.Fatalf("large body: %d %s", resp.StatusCode, typ)
	}
	if w.rec.count() != before {
		t.Fatal("an oversized request reached upstream")
	}
}

func TestClientLeavingMidStreamIsBilledForWhatWasSeen(t *testing.T) {
	w := newWorld(t)
	orgID := w.org(t, "1000", "active")
	key, sessionID := issue(t, w.keys(t, true, nil), orgID)
	p := w.proxy(t, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := call(t, ctx, p.url+"/v1/messages", key.Value, messages(true, "[[script:slow]]"), nil)
	br := bufio.NewReader(resp.Body)
	for deltas := 0; deltas < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "text_delta") {
			deltas++
		}
	}
	cancel()
	testenv.Eventually(t, 10*time.Second, "upstream to see the request cancelled", func() bool {
		r := w.sim.Records()
		return len(r) == 1 && r[0].Status == 499
	})
	// message_start carried the input usage and output_tokens 1; no
	// message_delta was seen.
	want := w.sim.Records()[0].Usage
	want.OutputTokens = 1
	checkSpend(t, w, p, orgID, sessionID, key.Value, want)
}

func TestIssue(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	billed := w.keys(t, true, nil)
	for _, c := range []struct{ balance, state string }{{"0", "active"}, {"-5", "active"}, {"50", "exhausted"}, {"50", "suspended"}} {
		org := w.org(t, c.balance, c.state)
		if _, err := billed.Issue(ctx, org, uuid.NewString()); !errors.Is(err, llmkeys.ErrNoCredits) {
			t.Fatalf("balance %s state %s: %v, want ErrNoCredits", c.balance, c.state, err)
		}
	}
	org := w.org(t, "12.5", "trial")
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	k, err := w.keys(t, true, func() time.Time { return now }).Issue(ctx, org, uuid.NewString())
	if err != nil {
		t.Fatal(err)
	}
	// 12.5 credits = $0.125 = 125,000 micro-dollars; ÷3 markup.
	if k.MaxBudgetUSDMicros != 41_666 || k.BaseURL != "http://proxy.test/v1" || !k.ExpiresAt.Equal(now.Add(24*time.Hour)) ||
		!strings.HasPrefix(k.Value, "sk-prlf-") || len(k.Value) != len("sk-prlf-")+43 {
		t.Fatalf("key %+v", k)
	}
	h := llmproxy.HashKey(k.Value)
	var budget *int64
	var prefix, alias, session string
	if err := w.pool.QueryRow(ctx, `SELECT max_budget_micros, key_prefix, key_alias, session_id::text
		FROM llm_virtual_keys WHERE key_hash = $1`, h[:]).Scan(&budget, &prefix, &alias, &session); err != nil {
		t.Fatal(err)
	}
	if budget == nil || *budget != 41_666 || prefix != k.Value[:12] || alias != session {
		t.Fatalf("row budget %v prefix %q alias %q session %q", budget, prefix, alias, session)
	}
	var leaked int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM llm_virtual_keys k
		WHERE position($1 in k::text) > 0`, k.Value).Scan(&leaked); err != nil || leaked != 0 {
		t.Fatalf("the key is stored in clear (%d rows, %v)", leaked, err)
	}
	// Without billing: no budget, and an org without credits still gets one.
	free := w.org(t, "0", "unconfigured")
	k, err = w.keys(t, false, nil).Issue(ctx, free, uuid.NewString())
	if err != nil || k.MaxBudgetUSDMicros != 0 {
		t.Fatalf("unbilled key %+v: %v", k, err)
	}
	h = llmproxy.HashKey(k.Value)
	if err := w.pool.QueryRow(ctx, `SELECT max_budget_micros FROM llm_virtual_keys WHERE key_hash = $1`, h[:]).Scan(&budget); err != nil || budget != nil {
		t.Fatalf("unbilled budget %v: %v", budget, err)
	}
	if _, err := billed.Issue(ctx, org, "not-a-uuid"); err == nil {
		t.Fatal("issued a key for a malformed session id")
	}
}
