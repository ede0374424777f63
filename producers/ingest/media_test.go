package ingest_test

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
)

func formOf(payload []byte) []byte {
	return []byte("payload=" + url.QueryEscape(string(payload)))
}

// JSON in any of its declared forms is accepted; other media types are 415
// (before any signature check) and produce nothing.
func TestContentTypes(t *testing.T) {
	e := newEnv(t, envOptions{})
	tr := e.newWebhookTrigger(t, "custom", nil)
	body := []byte(issuesBody)
	n := 0
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "Application/JSON; charset=UTF-8",
		"application/vnd.github+json", "application/cloudevents+json", "text/plain", "text/plain; charset=us-ascii"} {
		h := githubHeaders(body, githubSecret)
		h["Content-Type"] = ct
		if ct == "" {
			delete(h, "Content-Type")
		}
		e.post(t, "/webhooks/github", h, body).accepted(t)
		e.post(t, "/webhooks/t/"+tr.Path, map[string]string{"Authorization": "Bearer " + tr.Secret, "Content-Type": ct}, body).accepted(t)
		n += 2
	}
	notJSON := []byte("disk full on db-1")
	e.post(t, "/webhooks/t/"+tr.Path, map[string]string{"Authorization": "Bearer " + tr.Secret, "Content-Type": "text/plain"}, notJSON).
		rejected(t, 400, "bad_request")
	for _, ct := range []string{"application/xml", "text/html", "multipart/form-data; boundary=x", "application/octet-stream",
		"application/json; charset=iso-8859-1", "text/plain; charset=utf-16", ";;;", "application/json; =x", "image/png"} {
		h := githubHeaders(body, githubSecret)
		h["Content-Type"] = ct
		e.post(t, "/webhooks/github", h, body).rejected(t, 415, "unsupported_media_type")
		// Before the signature: an unsigned request is refused the same way.
		e.post(t, "/webhooks/t/"+tr.Path, map[string]string{"Content-Type": ct}, body).rejected(t, 415, "unsupported_media_type")
		e.post(t, "/webhooks/nango", map[string]string{"Content-Type": ct, "X-Nango-Hmac-Sha256": sign(nangoSecret, body)}, body).
			rejected(t, 415, "unsupported_media_type")
	}
	// Forms are GitHub's alone.
	form := formOf(body)
	formCT := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	e.post(t, "/webhooks/nango", map[string]string{"Content-Type": formCT["Content-Type"], "X-Nango-Hmac-Sha256": sign(nangoSecret, form)}, form).
		rejected(t, 415, "unsupported_media_type")
	e.post(t, "/webhooks/t/"+tr.Path, map[string]string{"Content-Type": formCT["Content-Type"], "Authorization": "Bearer " + tr.Secret}, form).
		rejected(t, 415, "unsupported_media_type")
	lin := e.newWebhookTrigger(t, "linear", nil)
	h := signedFor("linear", lin.Secret, form)
	h["Content-Type"] = formCT["Content-Type"]
	e.post(t, "/webhooks/direct/linear/"+lin.Path, h, form).rejected(t, 415, "unsupported_media_type")

	recs := e.consume(t, n)
	for _, r := range recs {
		if !bytes.Equal(r.Payload.Body, body) {
			t.Fatalf("body %q", r.Payload.Body)
		}
	}
	if ct := recs[4].Payload.ContentType; ct != "application/json; charset=utf-8" {
		t.Fatalf("content type %q, want the request's", ct)
	}
}

// GitHub's form deliveries: the signature covers the raw form, the JSON of
// its payload field is produced (small or by reference) and the trigger
// processor turns it into the same event as the JSON delivery.
func TestGitHubFormDelivery(t *testing.T) {
	e := newEnv(t, envOptions{})
	installation, _, trigger := e.githubApp(t)
	payload := issueDelivery(t, installation, 3000)
	large := issueDelivery(t, installation, inlineBody*3)
	form := formOf(payload)

	headers := func(body []byte, delivery string) map[string]string {
		h := githubHeaders(body, githubSecret)
		h["Content-Type"] = "application/x-www-form-urlencoded"
		h["X-GitHub-Delivery"] = delivery
		return h
	}
	e.post(t, "/webhooks/github", headers(form, "form-1"), form).accepted(t)
	e.post(t, "/webhooks/github", headers(formOf(large), "form-2"), formOf(large)).accepted(t)
	jsonH := githubHeaders(payload, githubSecret)
	jsonH["X-GitHub-Delivery"] = "json-1"
	e.post(t, "/webhooks/github", jsonH, payload).accepted(t)

	// The signature of the JSON inside does not verify a form, and a form
	// needs exactly one payload field holding a JSON object.
	bad := headers(form, "x")
	bad["X-Hub-Signature-256"] = "sha256=" + sign(githubSecret, payload)
	e.post(t, "/webhooks/github", bad, form).rejected(t, 401, "invalid_signature")
	for _, f := range [][]byte{[]byte("a=1"), []byte("payload=" + url.QueryEscape("[1]")), []byte("payload=%7B"), []byte("payload=%zz"),
		append(append([]byte{}, form...), []byte("&payload=%7B%7D")...), payload} {
		e.post(t, "/webhooks/github", headers(f, "x"), f).rejected(t, 400, "bad_request")
	}

	recs := e.consume(t, 3)
	f, fl, j := recs[0], recs[1], recs[2]
	if !bytes.Equal(f.Payload.Body, payload) || f.Payload.ContentType != "application/json" ||
		f.Payload.Headers["content-type"] != "application/x-www-form-urlencoded" || f.Key != j.Key {
		t.Fatalf("form record %s: %q %q %q", f.Key, f.Payload.ContentType, f.Payload.Headers["content-type"], f.Payload.Body[:40])
	}
	if fl.Payload.BodyRef == nil || !bytes.Equal(e.body(t, fl.Payload), large) {
		t.Fatal("large form payload not by reference")
	}
	e.process(t, recs...)
	rows, err := e.Pool.Query(context.Background(), `SELECT dedup_key, status, provider_event_type, title, parsed_context::text
		FROM trigger_events WHERE trigger_id = $1 ORDER BY dedup_key`, trigger)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][4]string{}
	for rows.Next() {
		var key, status, typ, title, ctx string
		if err := rows.Scan(&key, &status, &typ, &title, &ctx); err != nil {
			t.Fatal(err)
		}
		got[key] = [4]string{status, typ, title, ctx}
	}
	form1, json1 := got["github:delivery:form-1"], got["github:delivery:json-1"]
	if len(got) != 3 || form1[0] != "queued" || form1 != json1 || got["github:delivery:form-2"][0] != "queued" {
		t.Fatalf("events %v", got)
	}

	// A repository webhook of a GitHub trigger may send forms too.
	tr := e.newWebhookTrigger(t, "github", nil)
	h := signedFor("github", tr.Secret, form)
	h["Content-Type"] = "application/x-www-form-urlencoded"
	e.post(t, "/webhooks/t/"+tr.Path, h, form).accepted(t)
	if r := e.consume(t, 4)[3]; !bytes.Equal(r.Payload.Body, payload) || r.Payload.ContentType != "application/json" {
		t.Fatal("trigger route form not unwrapped")
	}
}

// A GitHub App delivery without an installation is refused with a clear
// 422 and a log line, and nothing is produced; GitHub's ping and the App's
// own events are answered 200 and not recorded.
func TestGitHubWithoutInstallation(t *testing.T) {
	e := newEnv(t, envOptions{})
	hdr := func(body []byte, event string) map[string]string {
		h := githubHeaders(body, githubSecret)
		h["X-GitHub-Event"] = event
		return h
	}
	for _, body := range []string{
		`{"action":"opened","issue":{"id":1,"number":1},"repository":{"full_name":"acme/app"}}`,
		`{"action":"opened","issue":{"id":1},"installation":null}`,
		`{"action":"opened","installation":{"node_id":"x"}}`,
		`{"action":"opened","installation":{"id":0}}`,
		`{"action":"opened","installation":{"id":"4242"}}`,
		`{"action":"opened","installation":{"id":-3}}`,
		`{"action":"opened","installation":{"id":1.5}}`,
	} {
		r := e.post(t, "/webhooks/github", hdr([]byte(body), "issues"), []byte(body))
		r.rejected(t, 422, "no_installation")
		if !strings.Contains(string(r.Body), "/webhooks/t/") {
			t.Fatalf("message does not say where the webhook belongs: %s", r.Body)
		}
	}
	if !strings.Contains(e.Logs.String(), "GitHub webhook without an installation refused") {
		t.Fatal("no log line")
	}
	ping := []byte(`{"zen":"Design for failure.","hook_id":109948940,"hook":{"type":"App","id":109948940,"app_id":37},"sender":{"login":"octocat"}}`)
	r := e.post(t, "/webhooks/github", hdr(ping, "ping"), ping)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"status":"pong"`) {
		t.Fatalf("ping: %d %s", r.Status, r.Body)
	}
	auth := []byte(`{"action":"revoked","sender":{"login":"octocat"}}`)
	r = e.post(t, "/webhooks/github", hdr(auth, "github_app_authorization"), auth)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"status":"ignored"`) {
		t.Fatalf("app authorization: %d %s", r.Status, r.Body)
	}
	// Unsigned, they are refused like anything else.
	h := hdr(ping, "ping")
	delete(h, "X-Hub-Signature-256")
	e.post(t, "/webhooks/github", h, ping).rejected(t, 401, "invalid_signature")
	if n := e.endOffset(t); n != 0 {
		t.Fatalf("%d records", n)
	}
	// The same delivery on a GitHub trigger's own URL needs no installation.
	tr := e.newWebhookTrigger(t, "github", nil)
	body := []byte(`{"action":"opened","issue":{"id":1,"number":1},"repository":{"full_name":"acme/app"}}`)
	e.post(t, "/webhooks/t/"+tr.Path, signedFor("github", tr.Secret, body), body).accepted(t)
}
