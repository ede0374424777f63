package invocations_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/testenv"
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

// failSource is a connector-like source whose "echo" answers result and
// whose "fail" fails with message (the remote's error text).
type failSource struct {
	id      string
	result  json.RawMessage
	message string
	execs   atomic.Int64
}

func (f *failSource) ID() string          { return f.id }
func (f *failSource) DisplayName() string { return "Echo" }
func (f *failSource) Guide(context.Context, actions.ExecContext) (string, error) {
	return "echo", nil
}

func (f *failSource) ListActions(context.Context, actions.ExecContext) ([]actions.Definition, error) {
	obj := json.RawMessage(`{"type":"object"}`)
	return []actions.Definition{{ID: "echo", Risk: actions.RiskRead, Params: obj}, {ID: "fail", Risk: actions.RiskRead, Params: obj}}, nil
}

func (f *failSource) Execute(_ context.Context, action string, _ json.RawMessage, _ actions.ExecContext) (json.RawMessage, error) {
	f.execs.Add(1)
	if action == "fail" {
		return nil, &actions.ExecError{Status: 400, Message: f.message}
	}
	return f.result, nil
}

// The organization's secret values (org-wide and repo-scoped) and the
// patterns it marks are redacted from results, error texts and stored
// params in every sink of the service; a changed secret is honoured by the
// next call; without its rules nothing runs.
func TestOrgSecretsAndPatternsRedacted(t *testing.T) {
	w := newWorld(t)
	raw := make([]byte, 32)
	copy(raw, "redaction-test-key")
	box, err := secretbox.New([]string{"k1:" + base64.StdEncoding.EncodeToString(raw)})
	if err != nil {
		t.Fatal(err)
	}
	var repo string
	if err := w.pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id::text`,
		w.org, "acme/"+uuid.NewString()).Scan(&repo); err != nil {
		t.Fatal(err)
	}
	const (
		orgSecret  = "org-wide-secret-v4lue"
		repoSecret = "repo-scoped-secret-v4lue"
		customer   = "CUST-001234"
		host       = "db7.intranet.corp"
	)
	mk := func(repoID, key, value string) secrets.Secret {
		s, err := secrets.Create(ctx, w.pool, box, secrets.CreateInput{OrgID: w.org, RepoID: repoID, Key: key, Value: value, Persist: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	orgS := mk("", "STRIPE_KEY", orgSecret)
	mk(repo, "DB_PASSWORD", repoSecret)
	if _, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{UserID: w.admin}, []actions.Pattern{
		{Pattern: `(?i)\bcust-[0-9]{6}\b`, Regex: true}, {Pattern: "intranet.corp"}}); err != nil {
		t.Fatal(err)
	}
	src := &failSource{id: "connector:" + uuid.NewString()}
	newSvc := func(r invocations.OrgRedactors) *invocations.Svc {
		return invocations.New(invocations.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Sources: &staticSources{srcs: []actions.Source{src}},
			Validator: actions.NewValidator(0), Notifier: w.notes, Now: w.clock.Now, Redactors: r})
	}
	cache := redaction.NewCache(w.pool, box, nil)
	svc := newSvc(cache)
	sess := w.session(t)
	leaks := []string{orgSecret, repoSecret, customer, "cust-001234", host}

	// sinks gathers what each sink holds of an invocation.
	sinks := func(out invocations.Outcome) map[string]string {
		inv := out.Invocation
		var row string
		if err := w.pool.QueryRow(ctx, `SELECT concat_ws(' ', params::text, result::text, error) FROM action_invocations WHERE id = $1`,
			inv.ID).Scan(&row); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{"agent": string(out.Result), "row": row,
			"returned": string(inv.Params) + string(inv.Result) + deref(inv.Error)}
		for _, e := range w.events(t, inv.ID) {
			m["event"] += deref(e.ParamsJSON) + deref(e.ResultJSON) + deref(e.Error)
		}
		w.notes.mu.Lock()
		for _, n := range w.notes.got {
			if n.ID == inv.ID {
				m["notifier"] += string(n.Params) + string(n.Result) + deref(n.Error)
			}
		}
		w.notes.mu.Unlock()
		return m
	}
	check := func(name string, m map[string]string, leaks ...string) {
		t.Helper()
		for sink, v := range m {
			for _, l := range leaks {
				if strings.Contains(v, l) {
					t.Errorf("%s: %s leaks %q: %s", name, sink, l, v)
				}
			}
		}
	}

	src.result = json.RawMessage(`{"note":"key ` + orgSecret + `","dsn":"postgres at ` + host + ` pw ` + repoSecret + `",` +
		`"customer":"` + customer + `","pin":"ok","` + customer + `":1}`)
	out, err := svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: src.id, Action: "echo",
		Params: json.RawMessage(`{"body":"send ` + orgSecret + ` to cust-001234","host":"` + host + `"}`)})
	if err != nil || out.Invocation.Status != invocations.StatusCompleted {
		t.Fatalf("invoke = %+v, %v", out.Invocation, err)
	}
	check("completed", sinks(out), leaks...)
	if want := `{"note":"key [REDACTED]","dsn":"postgres at db7.[REDACTED] pw [REDACTED]","customer":"[REDACTED]","pin":"ok","[REDACTED]":1}`; string(out.Result) != want {
		t.Fatalf("agent result\n got %s\nwant %s", out.Result, want)
	}
	if want := `{"body": "send [REDACTED] to [REDACTED]", "host": "db7.[REDACTED]"}`; string(out.Invocation.Params) != want {
		t.Fatalf("stored params %s, want %s", out.Invocation.Params, want)
	}

	// A failure's error text (the remote's message) is redacted too.
	src.message = "auth failed for " + orgSecret + " on " + host
	out, err = svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: src.id, Action: "fail", Params: json.RawMessage(`{}`)})
	if err != nil || out.Invocation.Status != invocations.StatusFailed || out.Invocation.Error == nil {
		t.Fatalf("fail = %+v, %v", out.Invocation, err)
	}
	check("failed", sinks(out), leaks...)
	if !strings.Contains(*out.Invocation.Error, "auth failed for [REDACTED] on db7.[REDACTED]") {
		t.Fatalf("error text %q", *out.Invocation.Error)
	}

	// A rotated secret: the next call redacts the new value.
	rotated := "rotated-secret-v4lue"
	if _, err := secrets.Update(ctx, w.pool, box, w.org, orgS.ID, secrets.UpdateInput{Value: &rotated}); err != nil {
		t.Fatal(err)
	}
	src.result = json.RawMessage(`{"v":"` + rotated + `"}`)
	builds := cache.Builds()
	out, err = svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: src.id, Action: "echo", Params: json.RawMessage(`{}`)})
	if err != nil || string(out.Result) != `{"v":"[REDACTED]"}` {
		t.Fatalf("after rotation: %s, %v", out.Result, err)
	}
	if cache.Builds() != builds+1 {
		t.Fatalf("builds %d → %d, want one rebuild", builds, cache.Builds())
	}
	if _, err = svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: src.id, Action: "echo", Params: json.RawMessage(`{}`)}); err != nil || cache.Builds() != builds+1 {
		t.Fatalf("an unchanged org was rebuilt (%d builds): %v", cache.Builds(), err)
	}

	// Without its rules (the database is unreachable) nothing runs and
	// nothing is stored.
	broken, err := pgxpool.New(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	execs := src.execs.Load()
	rows := w.count(t, `SELECT count(*) FROM action_invocations WHERE session_id = $1`, sess.ID)
	if _, err := newSvc(redaction.NewCache(broken, box, nil)).Invoke(ctx, sess, invocations.InvokeInput{Integration: src.id,
		Action: "echo", Params: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("invoke without redaction rules succeeded")
	}
	if src.execs.Load() != execs || w.count(t, `SELECT count(*) FROM action_invocations WHERE session_id = $1`, sess.ID) != rows {
		t.Fatal("an invocation without redaction rules ran or was stored")
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
