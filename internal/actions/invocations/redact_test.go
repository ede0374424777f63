package invocations_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions/invocations"
)

// A result holding credentials under innocuous keys (a GitHub token, a
// Stripe key in a bearer header, a form password, the integration's own
// credential) and the tool's echo of a client_secret param is redacted in
// what the agent gets, the row, the topic and the notifier.
func TestContentRedactionInEverySink(t *testing.T) {
	w := newWorld(t)
	sess := w.session(t)
	const (
		ghp    = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
		stripe = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
		echoed = "cs-echoed-value-42"
	)
	w.conn.result = json.RawMessage(`{"note":"use ` + ghp + `","body":"Authorization: Bearer ` + stripe +
		`","form":"user=ada&password=hunter2","echo":"got ` + echoed + `","cred":"` + linearToken + `","title":"ok"}`)
	out, err := w.svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: w.conn.id, Action: "search",
		Params: json.RawMessage(`{"query":"q","client_secret":"` + echoed + `","note":"` + ghp + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	inv := out.Invocation
	if inv.Status != invocations.StatusCompleted {
		t.Fatalf("status %s", inv.Status)
	}
	if string(w.conn.last) != `{"query":"q","client_secret":"`+echoed+`","note":"`+ghp+`"}` {
		t.Fatalf("the tool got %s, not the original params", w.conn.last)
	}
	var storedResult, storedParams string
	if err := w.pool.QueryRow(ctx, `SELECT result::text, params::text FROM action_invocations WHERE id = $1`, inv.ID).
		Scan(&storedResult, &storedParams); err != nil {
		t.Fatal(err)
	}
	sinks := map[string]string{"agent": string(out.Result), "returned row": string(inv.Result),
		"stored result": storedResult, "stored params": storedParams, "returned params": string(inv.Params)}
	for _, e := range w.events(t, inv.ID) {
		if e.ResultJSON != nil {
			sinks["event result"] += *e.ResultJSON
		}
		if e.ParamsJSON != nil {
			sinks["event params"] += *e.ParamsJSON
		}
	}
	w.notes.mu.Lock()
	for _, n := range w.notes.got {
		if n.ID == inv.ID {
			sinks["notifier"] += string(n.Result) + string(n.Params)
		}
	}
	w.notes.mu.Unlock()
	for name, v := range sinks {
		for _, leak := range []string{ghp, stripe, "hunter2", echoed, linearToken} {
			if strings.Contains(v, leak) {
				t.Errorf("%s leaks %q: %s", name, leak, v)
			}
		}
	}
	want := `{"note":"use [REDACTED]","body":"Authorization: Bearer [REDACTED]","form":"user=ada&password=[REDACTED]",` +
		`"echo":"got [REDACTED]","cred":"[REDACTED]","title":"ok"}`
	if string(out.Result) != want {
		t.Fatalf("agent result\n got %s\nwant %s", out.Result, want)
	}
	if _, ok := sinks["event result"]; !ok {
		t.Fatal("no event carried the result")
	}
}
