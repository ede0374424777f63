package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	actionsapi "github.com/proliferate/proliferate/api/actions"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/actions"
	actinv "github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Credentials an action's params and result may carry under innocuous
// keys: every recognised token format, the organization's secret value,
// values it marked (a regular expression and a literal) and the call's own
// secret param. Each must be redacted in every sink.
var sinkLeaks = map[string]string{
	"github classic":    "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789",
	"github oauth":      "gho_" + "ABCDEFGHIJKLMNOPQRSTUV123456",
	"github user":       "ghu_" + "aaaaaaaaaaaaaaaaaaaaaaaa",
	"github server":     "ghs_" + "bbbbbbbbbbbbbbbbbbbbbbbb",
	"github refresh":    "ghr_" + "cccccccccccccccccccccccc",
	"github fine":       "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop",
	"slack":             "xoxb-" + "1234567890-abcdefghij",
	"stripe live":       "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
	"stripe test":       "sk_test_" + "4eC39HqLyjWDarjtT1zdp7dd",
	"stripe restricted": "rk_live_" + "4eC39HqLyjWDarjtT1zdp7de",
	"aws key id":        "AKIA" + "IOSFODNN7EXAMPLE",
	"aws sts":           "ASIA" + "IOSFODNN7EXAMPLF",
	"jwt":               "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
	"bearer":            "abc.def-ghi_jklmno",     // after "Authorization: Bearer "
	"basic":             "dXNlcjpwYXNzd29yZA",     // after "Basic "
	"private key":       "MIIEowIBAAKCAQEAsecret", // inside a PEM block
	"url userinfo":      "s3cr3t-deploy-pw",       // https://deploy:…@host
	"query password":    "hunter2hunter",          // ?password=…
	"org secret":        "acme-org-secret-9f8e7d",
	"org regex":         "CUST-004242",
	"org literal":       "vault.intranet.corp",
	"call secret":       "call-secret-echo-77",
}

// leakyText holds every entry of sinkLeaks in its natural surroundings
// (but the call's secret, which only the call that sends it knows).
func leakyText() string {
	l := sinkLeaks
	return strings.Join([]string{l["github classic"], l["github oauth"], l["github user"], l["github server"],
		l["github refresh"], l["github fine"], l["slack"], l["stripe live"], l["stripe test"], l["stripe restricted"],
		l["aws key id"], l["aws sts"], l["jwt"], "Authorization: Bearer " + l["bearer"], "Basic " + l["basic"],
		"-----BEGIN RSA PRIVATE KEY-----\n" + l["private key"] + "\n-----END RSA PRIVATE KEY-----",
		"https://deploy:" + l["url userinfo"] + "@git.example.com/a.git", "https://h/p?user=ada&password=" + l["query password"] + "&x=1",
		"org " + l["org secret"], "customer " + l["org regex"], "host " + l["org literal"]}, " | ")
}

// startRedactingActions is a gateway instance whose invocation service
// redacts with the organizations' secrets and patterns, as in production.
func (w *world) startRedactingActions(t *testing.T, src *testSource) *actionsGW {
	t.Helper()
	return w.startActionsGW(t, actionsGWOptions{Instance: "redacting", Sources: testSources{src: src},
		Redactors: redaction.NewCache(w.api.Deps.Pool, w.api.Deps.Box, slog.New(slog.NewJSONHandler(w.logs, nil)))})
}

// invocationRecords relays the outbox to a Kafka broker (kfake, the
// catalog's topics) and returns the actions.invocations records of an
// invocation once one with status final arrived.
type invocationRecords struct {
	seeds []string
}

func startOutboxToKafka(t *testing.T, w *world) invocationRecords {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	seeds := testenv.Kafka(t)
	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topics.Ensure(ctx, kadm.NewClient(cl), -1); err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(w.api.Deps.Pool, cl, outbox.RelayOptions{PollInterval: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
		cl.Close()
	})
	return invocationRecords{seeds: seeds}
}

func (r invocationRecords) until(t *testing.T, codec *schemas.Codec, invocationID, final string) (raw []string, events []*schemas.ActionInvocation) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.ConsumeTopics(topics.ActionsInvocations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no %s record of invocation %s on %s (got %d)", final, invocationID, topics.ActionsInvocations, len(events))
		}
		seen := false
		fs.EachRecord(func(rec *kgo.Record) {
			if string(rec.Key) != invocationID {
				return
			}
			ev, err := codec.Decode(rec.Value)
			if err != nil {
				t.Fatalf("decode record: %v", err)
			}
			p := ev.Payload.(*schemas.ActionInvocation)
			raw = append(raw, string(rec.Value))
			events = append(events, p)
			seen = seen || p.Status == final
		})
		if seen {
			return raw, events
		}
	}
}

// A tool's result and the params carrying every token format, the org's
// secret value and the values it marked reach no sink in clear: not the
// agent's response, the action_invocations row (params and result), the
// actions.invocations record on Kafka, the WebSocket frames or the inbox
// API — for an allowed action and for an approved one (the approver's
// response too).
func TestRedactionInEverySink(t *testing.T) {
	w := newWorld(t)
	if err := actionsapi.Register(w.api.Server); err != nil { // the inbox and the redaction patterns
		t.Fatal(err)
	}
	ctx := context.Background()
	owner := w.api.NewUser(t)
	if _, err := secrets.Create(ctx, w.api.Deps.Pool, w.api.Deps.Box, secrets.CreateInput{OrgID: owner.OrgID,
		Key: "ACME_API_KEY", Value: sinkLeaks["org secret"], Persist: true}); err != nil {
		t.Fatal(err)
	}
	if st, body := call(t, "PUT", w.api.URL+"/api/v1/actions/redactions", owner.Token, map[string]any{"patterns": []map[string]any{
		{"pattern": `(?i)\bcust-[0-9]{6}\b`, "regex": true}, {"pattern": "vault.intranet.corp"}}},
		map[string]string{"Content-Type": "application/json"}); st != http.StatusOK {
		t.Fatalf("set patterns: %d %s", st, body)
	}
	kafkaRecs := startOutboxToKafka(t, w)
	src := &testSource{}
	g := w.startRedactingActions(t, src)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	st, c := dialWS(t, g.gw, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, c, protocol.MsgInit)
	testenv.Eventually(t, 10*time.Second, "sandbox booted", func() bool { return w.prov.Created() == 1 })
	sbx := w.sandboxToken(sid)
	text := leakyText()

	check := func(t *testing.T, sinks map[string]string) {
		t.Helper()
		for sink, v := range sinks {
			if !strings.Contains(v, actions.Redacted) || !strings.Contains(v, "Bearer "+actions.Redacted) {
				t.Errorf("%s carries no redacted text (did the text reach it?): %.300s", sink, v)
			}
			for name, leak := range sinkLeaks {
				if strings.Contains(v, leak) {
					t.Errorf("%s leaks the %s %q", sink, name, leak)
				}
			}
		}
	}
	inbox := func(id string) (string, string) {
		_, one := call(t, "GET", w.api.URL+"/api/v1/actions/"+id, owner.Token, nil, nil)
		_, list := call(t, "GET", w.api.URL+"/api/v1/actions?status=completed", owner.Token, nil, nil)
		if !strings.Contains(string(list), id) {
			t.Fatalf("inbox list lacks %s: %.300s", id, list)
		}
		return string(one), string(list)
	}
	row := func(id string) (params, result string) {
		if err := w.api.Deps.Pool.QueryRow(ctx, `SELECT params::text, COALESCE(result::text, '') FROM action_invocations WHERE id = $1`,
			id).Scan(&params, &result); err != nil {
			t.Fatal(err)
		}
		return params, result
	}

	t.Run("allowed", func(t *testing.T) {
		// read_thing echoes its params in its result.
		st, r, body := invoke(t, g, sid, sbx, "read_thing", map[string]any{"note": text + " | echo " + sinkLeaks["call secret"],
			"client_secret": sinkLeaks["call secret"]})
		if st != http.StatusOK || r.Invocation.Status != actinv.StatusCompleted {
			t.Fatalf("invoke: %d %s", st, body)
		}
		id := r.Invocation.ID
		frame := readUntil(t, c, protocol.MsgActionCompleted)
		params, result := row(id)
		raw, events := kafkaRecs.until(t, w.codec, id, actinv.StatusCompleted)
		last := events[len(events)-1]
		one, list := inbox(id)
		check(t, map[string]string{"agent response": string(body), "agent result": string(r.Result),
			"row params": params, "row result": result, "kafka record": strings.Join(raw, "\n"),
			"kafka params": *last.ParamsJSON, "kafka result": *last.ResultJSON, "websocket frame": string(frame),
			"inbox invocation": one, "inbox list": list})
		if !strings.Contains(string(r.Result), "Authorization: Bearer [REDACTED]") || !strings.Contains(string(r.Result), "host [REDACTED]") {
			t.Fatalf("agent result: %s", r.Result)
		}
	})

	t.Run("approved", func(t *testing.T) {
		st, r, body := invoke(t, g, sid, sbx, "write_thing", map[string]any{"title": text})
		if st != http.StatusAccepted {
			t.Fatalf("invoke: %d %s", st, body)
		}
		id := r.Invocation.ID
		request := readUntil(t, c, protocol.MsgActionApprovalRequest)
		ast, approved := call(t, "POST", actionsURL(g, sid, "invocations/"+id+"/approve"), owner.Token, map[string]any{"mode": "once"}, nil)
		if ast != http.StatusOK {
			t.Fatalf("approve: %d %s", ast, approved)
		}
		completed := readUntil(t, c, protocol.MsgActionCompleted)
		params, result := row(id)
		raw, events := kafkaRecs.until(t, w.codec, id, actinv.StatusCompleted)
		last := events[len(events)-1]
		one, list := inbox(id)
		var got struct {
			Invocation actinv.Invocation `json:"invocation"`
		}
		if err := json.Unmarshal(completed, &got); err != nil || got.Invocation.Status != actinv.StatusCompleted {
			t.Fatalf("completed frame: %s", completed)
		}
		check(t, map[string]string{"agent response": string(body), "approver response": string(approved),
			"row params": params, "row result": result, "kafka record": strings.Join(raw, "\n"),
			"kafka params": *last.ParamsJSON, "kafka result": *last.ResultJSON,
			"websocket request frame": string(request), "websocket completed frame": string(completed),
			"inbox invocation": one, "inbox list": list})
		if src.executed.Load() != 2 {
			t.Fatalf("executions: %d", src.executed.Load())
		}
	})
}
