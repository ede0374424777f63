package ingest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/schemas"
)

const issuesBody = `{"action":"opened","issue":{"id":1001,"number":7,"title":"Crash on start","body":"BODY-MARKER-4d1e"},` +
	`"repository":{"id":55,"full_name":"acme/app"},"installation":{"id":4242,"node_id":"MDIzOk"}}`

func githubHeaders(body []byte, secret string) map[string]string {
	return map[string]string{
		"Content-Type":        "application/json",
		"X-GitHub-Event":      "issues",
		"X-GitHub-Delivery":   "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"X-Hub-Signature-256": "sha256=" + sign(secret, body),
		"User-Agent":          "GitHub-Hookshot/044aadd",
	}
}

func TestGitHubAcceptedAndProduced(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := []byte(issuesBody)
	id := e.post(t, "/webhooks/github", githubHeaders(body, githubSecret), body).accepted(t)

	recs := e.consume(t, 1)
	r := recs[0]
	if r.Key != "github:4242" {
		t.Errorf("key %q", r.Key)
	}
	if r.Headers["event_type"] != schemas.TypeWebhookReceived || r.Headers["event_id"] != id {
		t.Errorf("record headers %v (event id %s)", r.Headers, id)
	}
	p := r.Payload
	if r.Event.EventID != id || r.Event.OrgID != "" || r.Event.CorrelationID != id {
		t.Errorf("envelope %+v", r.Event.Envelope)
	}
	if p.Provider != "github" || p.Route != schemas.WebhookRouteDirect || p.Method != "POST" || p.RequestPath != "/webhooks/github" ||
		!p.SignatureVerified || p.ContentType != "application/json" || !bytes.Equal(p.Body, body) {
		t.Errorf("payload %+v", p)
	}
	if p.DeliveryID == nil || *p.DeliveryID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" ||
		p.ProviderEventType == nil || *p.ProviderEventType != "issues" {
		t.Errorf("delivery %v event type %v", p.DeliveryID, p.ProviderEventType)
	}
	if p.TriggerID != nil || p.IntegrationID != nil || p.ConnectionID != nil || p.WebhookPath != nil {
		t.Errorf("unexpected routing fields %+v", p)
	}
	if p.RemoteAddr == nil || *p.RemoteAddr != "127.0.0.1" {
		t.Errorf("remote addr %v", p.RemoteAddr)
	}
	if p.Headers["x-github-event"] != "issues" || p.Headers["user-agent"] == "" {
		t.Errorf("headers %v", p.Headers)
	}
	if _, ok := p.Headers["x-hub-signature-256"]; ok {
		t.Errorf("signature header kept: %v", p.Headers)
	}
	if p.ReceivedAt.IsZero() {
		t.Error("received_at not set")
	}
	e.noSecrets(t, githubSecret, "BODY-MARKER-4d1e", sign(githubSecret, body))
}

func TestGitHubRejections(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := []byte(issuesBody)
	good := githubHeaders(body, githubSecret)
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for a, b := range good {
			h[a] = b
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	const sigH = "X-Hub-Signature-256"
	hexSig := sign(githubSecret, body)
	cases := []struct {
		name    string
		headers map[string]string
		body    []byte
		status  int
		code    string
	}{
		{"missing signature", with(sigH, ""), body, 401, "invalid_signature"},
		{"wrong secret", with(sigH, "sha256="+sign("other", body)), body, 401, "invalid_signature"},
		{"signature of another body", with(sigH, "sha256="+sign(githubSecret, []byte(`{}`))), body, 401, "invalid_signature"},
		{"no sha256= prefix", with(sigH, hexSig), body, 401, "invalid_signature"},
		{"sha1 scheme", with(sigH, "sha1="+hexSig), body, 401, "invalid_signature"},
		{"truncated", with(sigH, "sha256="+hexSig[:60]), body, 401, "invalid_signature"},
		{"not hex", with(sigH, "sha256="+strings.Repeat("zz", 32)), body, 401, "invalid_signature"},
		{"tampered body", good, append([]byte(nil), bytes.Replace(body, []byte("4242"), []byte("4243"), 1)...), 401, "invalid_signature"},
		{"empty body unsigned", with(sigH, ""), nil, 401, "invalid_signature"},
		{"empty body signed", with(sigH, "sha256="+sign(githubSecret, nil)), nil, 400, "bad_request"},
		{"malformed JSON signed", with(sigH, "sha256="+sign(githubSecret, []byte(`{"installation":`))), []byte(`{"installation":`), 400, "bad_request"},
		{"JSON array signed", with(sigH, "sha256="+sign(githubSecret, []byte(`[1]`))), []byte(`[1]`), 400, "bad_request"},
		{"missing event header", with("X-GitHub-Event", ""), body, 400, "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.post(t, "/webhooks/github", c.headers, c.body).rejected(t, c.status, c.code)
		})
	}

	// Oversized, declared and chunked (no Content-Length), signed correctly.
	big := []byte(`{"installation":{"id":1},"pad":"` + strings.Repeat("x", maxBody) + `"}`)
	e.post(t, "/webhooks/github", githubHeaders(big, githubSecret), big).rejected(t, 413, "body_too_large")
	req, _ := http.NewRequest(http.MethodPost, e.HTTP.URL+"/webhooks/github", io.MultiReader(bytes.NewReader(big)))
	for k, v := range githubHeaders(big, githubSecret) {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || req.ContentLength != 0 {
		t.Fatalf("chunked oversized: status %d (content length %d)", resp.StatusCode, req.ContentLength)
	}
	// Exactly at the limit is fine.
	exact := []byte(`{"installation":{"id":1},"pad":"`)
	exact = append(exact, bytes.Repeat([]byte("y"), maxBody-len(exact)-2)...)
	exact = append(exact, '"', '}')
	e.post(t, "/webhooks/github", githubHeaders(exact, githubSecret), exact).accepted(t)

	if n := e.endOffset(t); n != 1 {
		t.Fatalf("rejected requests produced records: %d in topic, want only the accepted one", n)
	}
	e.noSecrets(t, githubSecret, "BODY-MARKER-4d1e", hexSig)
}

func TestGitHubNotConfigured(t *testing.T) {
	empty := ""
	e := newEnv(t, envOptions{githubSecret: &empty})
	body := []byte(issuesBody)
	e.post(t, "/webhooks/github", githubHeaders(body, ""), body).rejected(t, 404, "not_found")
	if n := e.endOffset(t); n != 0 {
		t.Fatalf("%d records", n)
	}
}

func TestNango(t *testing.T) {
	e := newEnv(t, envOptions{})
	forward := []byte(`{"from":"linear","type":"forward","connectionId":"conn-77","providerConfigKey":"linear",` +
		`"payload":{"action":"create","type":"Issue","data":{"id":"iss-1","title":"BODY-MARKER-4d1e"}}}`)
	auth := []byte(`{"type":"auth","operation":"creation","connectionId":"conn-78","authMode":"OAUTH2",` +
		`"providerConfigKey":"github","provider":"github","environment":"prod","success":true}`)
	unwrapped := []byte(`{"action":"create","type":"Issue"}`)
	hdr := func(b []byte) map[string]string {
		return map[string]string{"X-Nango-Hmac-Sha256": sign(nangoSecret, b), "Content-Type": "application/json", "Linear-Delivery": "ld-1"}
	}
	idF := e.post(t, "/webhooks/nango", hdr(forward), forward).accepted(t)
	idA := e.post(t, "/webhooks/nango", hdr(auth), auth).accepted(t)
	idU := e.post(t, "/webhooks/nango", hdr(unwrapped), unwrapped).accepted(t)

	// Rejections.
	e.post(t, "/webhooks/nango", map[string]string{}, forward).rejected(t, 401, "invalid_signature")
	e.post(t, "/webhooks/nango", map[string]string{"X-Nango-Hmac-Sha256": sign("wrong", forward)}, forward).rejected(t, 401, "invalid_signature")
	e.post(t, "/webhooks/nango", map[string]string{"X-Nango-Hmac-Sha256": "sha256=" + sign(nangoSecret, forward)}, forward).rejected(t, 401, "invalid_signature")
	// The legacy X-Nango-Signature alone is not enough.
	e.post(t, "/webhooks/nango", map[string]string{"X-Nango-Signature": sign(nangoSecret, forward)}, forward).rejected(t, 401, "invalid_signature")
	bad := []byte(`{"type":"forward",`)
	e.post(t, "/webhooks/nango", hdr(bad), bad).rejected(t, 400, "bad_request")
	e.post(t, "/webhooks/nango", hdr(nil), nil).rejected(t, 400, "bad_request")
	big := []byte(`{"type":"forward","pad":"` + strings.Repeat("x", maxBody) + `"}`)
	e.post(t, "/webhooks/nango", hdr(big), big).rejected(t, 413, "body_too_large")

	recs := e.consume(t, 3)
	f, a, u := recs[0], recs[1], recs[2]
	if f.Event.EventID != idF || a.Event.EventID != idA || u.Event.EventID != idU {
		t.Fatal("records out of order")
	}
	if f.Key != "nango:conn-77" || f.Payload.Provider != "nango" || f.Payload.Route != schemas.WebhookRouteNango ||
		f.Payload.ConnectionID == nil || *f.Payload.ConnectionID != "conn-77" ||
		f.Payload.ProviderEventType == nil || *f.Payload.ProviderEventType != "forward" ||
		f.Payload.DeliveryID == nil || *f.Payload.DeliveryID != "ld-1" || !bytes.Equal(f.Payload.Body, forward) {
		t.Errorf("forward: key %s payload %+v", f.Key, f.Payload)
	}
	if a.Key != "nango:conn-78" || *a.Payload.ProviderEventType != "auth" || *a.Payload.ConnectionID != "conn-78" {
		t.Errorf("auth: key %s payload %+v", a.Key, a.Payload)
	}
	if u.Key != "nango:" || u.Payload.ConnectionID != nil || u.Payload.ProviderEventType != nil {
		t.Errorf("unwrapped: key %s payload %+v", u.Key, u.Payload)
	}
	for _, r := range recs {
		if _, ok := r.Payload.Headers["x-nango-hmac-sha256"]; ok {
			t.Errorf("signature header kept")
		}
	}
	e.noSecrets(t, nangoSecret, "BODY-MARKER-4d1e", sign(nangoSecret, forward))
}

// signedFor returns headers that sign body for provider with secret the way
// that provider does.
func signedFor(provider, secret string, body []byte) map[string]string {
	s := sign(secret, body)
	switch provider {
	case "linear":
		return map[string]string{"Linear-Signature": s, "Linear-Event": "Issue", "Linear-Delivery": "lin-d-1"}
	case "sentry":
		return map[string]string{"Sentry-Hook-Signature": s, "Sentry-Hook-Resource": "event_alert", "Request-ID": "sen-r-1"}
	case "posthog":
		return map[string]string{"X-PostHog-Signature": s}
	case "github":
		return map[string]string{"X-Hub-Signature-256": "sha256=" + s, "X-GitHub-Event": "push", "X-GitHub-Delivery": "gh-d-9"}
	default:
		return map[string]string{"X-Webhook-Signature": "sha256=" + s, "X-Webhook-Event": "deploy", "X-Webhook-Delivery": "cus-d-1"}
	}
}

func TestDirectProviders(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := []byte(`{"action":"create","type":"Issue","data":{"id":"x","title":"BODY-MARKER-4d1e"}}`)
	wantEvent := map[string]string{"linear": "Issue", "sentry": "event_alert"}
	wantDelivery := map[string]string{"linear": "lin-d-1", "sentry": "sen-r-1"}
	var secrets []string
	n := 0
	for _, provider := range []string{"linear", "sentry", "posthog"} {
		t.Run(provider, func(t *testing.T) {
			var integ string
			tr := e.newWebhookTrigger(t, provider, func(rt *runstest.Trigger) {
				integ = e.newIntegration(t, rt.OrgID, provider)
				rt.IntegrationID = integ
			})
			secrets = append(secrets, tr.Secret)
			url := "/webhooks/direct/" + provider + "/" + tr.Path
			id := e.post(t, url, signedFor(provider, tr.Secret, body), body).accepted(t)
			n++
			// Identity as a query parameter.
			e.post(t, "/webhooks/direct/"+provider+"?trigger="+tr.Path, signedFor(provider, tr.Secret, body), body).accepted(t)
			n++

			// Wrong secret, missing signature, tampered body: 401.
			e.post(t, url, signedFor(provider, "not-the-secret", body), body).rejected(t, 401, "invalid_signature")
			e.post(t, url, map[string]string{}, body).rejected(t, 401, "invalid_signature")
			e.post(t, url, signedFor(provider, tr.Secret, body), append([]byte(" "), body...)).rejected(t, 401, "invalid_signature")
			// Unknown identity: 404 whatever the signature.
			e.post(t, "/webhooks/direct/"+provider+"/t_"+randomHex(8), signedFor(provider, tr.Secret, body), body).rejected(t, 404, "not_found")
			e.post(t, "/webhooks/direct/"+provider+"/not-a-path", signedFor(provider, tr.Secret, body), body).rejected(t, 404, "not_found")
			e.post(t, "/webhooks/direct/"+provider, signedFor(provider, tr.Secret, body), body).rejected(t, 404, "not_found")
			// Another provider's route for this trigger: 404.
			other := map[string]string{"linear": "sentry", "sentry": "posthog", "posthog": "linear"}[provider]
			e.post(t, "/webhooks/direct/"+other+"/"+tr.Path, signedFor(other, tr.Secret, body), body).rejected(t, 404, "not_found")
			// Verified but malformed, empty, or oversized.
			bad := []byte(`{"action":`)
			e.post(t, url, signedFor(provider, tr.Secret, bad), bad).rejected(t, 400, "bad_request")
			e.post(t, url, signedFor(provider, tr.Secret, nil), nil).rejected(t, 400, "bad_request")
			arr := []byte(`[{"a":1}]`)
			e.post(t, url, signedFor(provider, tr.Secret, arr), arr).rejected(t, 400, "bad_request")
			big := bytes.Repeat([]byte(" "), maxBody+1)
			e.post(t, url, signedFor(provider, tr.Secret, big), big).rejected(t, 413, "body_too_large")

			recs := e.consume(t, n)
			r := recs[n-2]
			p := r.Payload
			if r.Event.EventID != id || r.Key != provider+":"+tr.ID || r.Event.OrgID != tr.OrgID {
				t.Fatalf("record key %s org %s", r.Key, r.Event.OrgID)
			}
			if p.Provider != provider || p.Route != schemas.WebhookRouteDirect || p.TriggerID == nil || *p.TriggerID != tr.ID ||
				p.WebhookPath == nil || *p.WebhookPath != tr.Path || p.IntegrationID == nil || *p.IntegrationID != integ ||
				!p.SignatureVerified || !bytes.Equal(p.Body, body) {
				t.Fatalf("payload %+v", p)
			}
			if got := deref(p.ProviderEventType); got != wantEvent[provider] {
				t.Errorf("event type %q", got)
			}
			if got := deref(p.DeliveryID); got != wantDelivery[provider] {
				t.Errorf("delivery %q", got)
			}
		})
	}
	e.post(t, "/webhooks/direct/jira/t_"+randomHex(8), nil, body).rejected(t, 404, "not_found")
	e.post(t, "/webhooks/direct/github/t_"+randomHex(8), nil, body).rejected(t, 404, "not_found")
	e.noSecrets(t, append(secrets, "BODY-MARKER-4d1e")...)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestPostHogTokenFallback(t *testing.T) {
	e := newEnv(t, envOptions{})
	tr := e.newWebhookTrigger(t, "posthog", nil)
	url := "/webhooks/direct/posthog/" + tr.Path
	body := []byte(`{"event":{"event":"$pageview","uuid":"0190-aa","distinct_id":"u1","properties":{}}}`)
	e.post(t, url, map[string]string{"X-PostHog-Token": tr.Secret}, body).accepted(t)
	e.post(t, url, map[string]string{"Authorization": "Bearer " + tr.Secret}, body).accepted(t)
	e.post(t, url, map[string]string{"X-PostHog-Signature": "sha256=" + sign(tr.Secret, body)}, body).accepted(t)
	e.post(t, url, map[string]string{"X-PostHog-Token": tr.Secret + "x"}, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, map[string]string{"X-PostHog-Token": tr.Secret[:10]}, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, map[string]string{"Authorization": "Basic " + tr.Secret}, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, map[string]string{"Authorization": "Bearer "}, body).rejected(t, 401, "invalid_signature")
	// A signature header that is wrong decides, even with a good token.
	e.post(t, url, map[string]string{"X-PostHog-Signature": sign("x", body), "X-PostHog-Token": tr.Secret}, body).rejected(t, 401, "invalid_signature")
	recs := e.consume(t, 3)
	for _, r := range recs {
		if _, ok := r.Payload.Headers["x-posthog-token"]; ok {
			t.Fatal("token header kept")
		}
		if _, ok := r.Payload.Headers["authorization"]; ok {
			t.Fatal("authorization header kept")
		}
	}
	e.noSecrets(t, tr.Secret)
}

func TestCustomTriggerWebhook(t *testing.T) {
	e := newEnv(t, envOptions{})
	tr := e.newWebhookTrigger(t, "custom", nil)
	url := "/webhooks/t/" + tr.Path
	body := []byte(`{"deploy":{"env":"prod","sha":"BODY-MARKER-4d1e"}}`)

	id := e.post(t, url, signedFor("custom", tr.Secret, body), body).accepted(t)
	e.post(t, url, map[string]string{"Authorization": "Bearer " + tr.Secret}, body).accepted(t)
	arr := []byte(`[1,2,3]`) // any JSON value
	e.post(t, url, signedFor("custom", tr.Secret, arr), arr).accepted(t)

	e.post(t, url, map[string]string{"X-Webhook-Signature": sign(tr.Secret, body)}, body).rejected(t, 401, "invalid_signature") // no prefix
	e.post(t, url, map[string]string{"X-Webhook-Signature": "sha256=" + sign("nope", body)}, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, map[string]string{"X-Webhook-Signature": "sha256=" + sign("nope", body), "Authorization": "Bearer " + tr.Secret}, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, map[string]string{"Authorization": "Bearer wrong"}, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, nil, body).rejected(t, 401, "invalid_signature")
	e.post(t, url, signedFor("custom", tr.Secret, nil), nil).rejected(t, 400, "bad_request")
	notJSON := []byte("a=1&b=2")
	e.post(t, url, signedFor("custom", tr.Secret, notJSON), notJSON).rejected(t, 400, "bad_request")
	big := bytes.Repeat([]byte("1"), maxBody+1)
	e.post(t, url, signedFor("custom", tr.Secret, big), big).rejected(t, 413, "body_too_large")
	e.post(t, "/webhooks/t/t_"+randomHex(8), signedFor("custom", tr.Secret, body), body).rejected(t, 404, "not_found")
	e.post(t, "/webhooks/t/"+strings.ToUpper(tr.Path[2:]), signedFor("custom", tr.Secret, body), body).rejected(t, 404, "not_found")
	e.post(t, "/webhooks/t/", signedFor("custom", tr.Secret, body), body).rejected(t, 404, "not_found")

	recs := e.consume(t, 3)
	r := recs[0]
	if r.Event.EventID != id || r.Key != "custom:"+tr.ID || r.Event.OrgID != tr.OrgID || r.Payload.Route != schemas.WebhookRouteTrigger ||
		deref(r.Payload.TriggerID) != tr.ID || deref(r.Payload.WebhookPath) != tr.Path ||
		deref(r.Payload.DeliveryID) != "cus-d-1" || deref(r.Payload.ProviderEventType) != "deploy" || r.Payload.IntegrationID != nil {
		t.Fatalf("record %s %+v", r.Key, r.Payload)
	}
	e.noSecrets(t, tr.Secret, "BODY-MARKER-4d1e")
}

// A per-trigger path is verified with the scheme of the trigger's provider.
func TestTriggerPathUsesProviderScheme(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := []byte(`{"ref":"refs/heads/main","installation":{"id":9}}`)
	for _, provider := range []string{"github", "linear", "sentry"} {
		tr := e.newWebhookTrigger(t, provider, nil)
		e.post(t, "/webhooks/t/"+tr.Path, signedFor(provider, tr.Secret, body), body).accepted(t)
		// The generic scheme is not accepted for a provider trigger.
		e.post(t, "/webhooks/t/"+tr.Path, signedFor("custom", tr.Secret, body), body).rejected(t, 401, "invalid_signature")
	}
	recs := e.consume(t, 3)
	if p := recs[0].Payload; p.Provider != "github" || deref(p.ProviderEventType) != "push" || deref(p.DeliveryID) != "gh-d-9" {
		t.Fatalf("github trigger path: %+v", p)
	}
}

// Disabled triggers still accept (the processor records a skipped event);
// triggers that are not webhook triggers do not.
func TestDisabledAndNonWebhookTriggers(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := []byte(`{"x":1}`)
	disabled := e.newWebhookTrigger(t, "custom", func(rt *runstest.Trigger) { rt.Disabled = true })
	e.post(t, "/webhooks/t/"+disabled.Path, signedFor("custom", disabled.Secret, body), body).accepted(t)
	polling := e.newWebhookTrigger(t, "linear", func(rt *runstest.Trigger) { rt.Type = "polling" })
	e.post(t, "/webhooks/t/"+polling.Path, signedFor("linear", polling.Secret, body), body).rejected(t, 404, "not_found")
	e.post(t, "/webhooks/direct/linear/"+polling.Path, signedFor("linear", polling.Secret, body), body).rejected(t, 404, "not_found")
	if n := e.endOffset(t); n != 1 {
		t.Fatalf("%d records", n)
	}
}

// A secret sealed for another trigger (copied row) cannot be opened: the
// request fails without producing, and nothing leaks.
func TestSecretBoundToTrigger(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.newWebhookTrigger(t, "custom", nil)
	b := e.newWebhookTrigger(t, "custom", nil)
	if _, err := e.Pool.Exec(t.Context(), `UPDATE triggers SET webhook_secret_sealed = (SELECT webhook_secret_sealed FROM triggers WHERE id = $1) WHERE id = $2`, a.ID, b.ID); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{}`)
	e.post(t, "/webhooks/t/"+b.Path, signedFor("custom", a.Secret, body), body).rejected(t, 500, "internal")
	if n := e.endOffset(t); n != 0 {
		t.Fatalf("%d records", n)
	}
	e.noSecrets(t, a.Secret)
}

func TestRoutesMethodsHealth(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.do(t, http.MethodGet, "/healthz", nil, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"ok"`) {
		t.Fatalf("healthz %d %s", r.Status, r.Body)
	}
	r = e.do(t, http.MethodGet, "/webhooks/github", nil, nil)
	r.rejected(t, 405, "method_not_allowed")
	if r.Header.Get("Allow") != "POST" {
		t.Errorf("Allow %q", r.Header.Get("Allow"))
	}
	e.do(t, http.MethodPut, "/webhooks/t/t_"+randomHex(8), nil, nil).rejected(t, 405, "method_not_allowed")
	for _, p := range []string{"/webhooks/gitlab", "/webhooks", "/", "/webhooks/direct", "/webhooks/t/a/b", "/api/v1/webhooks/github"} {
		e.post(t, p, nil, []byte(`{}`)).rejected(t, 404, "not_found")
	}
}

// Concurrent deliveries to one trigger (through the routing cache) are each
// produced once.
func TestConcurrentDeliveries(t *testing.T) {
	e := newEnv(t, envOptions{})
	tr := e.newWebhookTrigger(t, "custom", nil)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Appendf(nil, `{"i":%d}`, i)
			req, _ := http.NewRequest(http.MethodPost, e.HTTP.URL+"/webhooks/t/"+tr.Path, bytes.NewReader(body))
			for k, v := range signedFor("custom", tr.Secret, body) {
				req.Header.Set(k, v)
			}
			resp, err := e.HTTP.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	recs := e.consume(t, n)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Payload.Body)] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct bodies of %d", len(seen), n)
	}
}
