package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"

	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/schemas"
)

// github verifies a GitHub App webhook with GITHUB_WEBHOOK_SECRET. The
// routing id is installation.id, the only body field read. A delivery
// without one is refused (422 no_installation) but for GitHub's ping
// (answered "pong") and the App-level events that never carry one
// (answered "ignored"); neither is produced.
func (s *Server) github(r *http.Request, body []byte, kind bodyKind) (*inbound, *httpapi.Error) {
	secret := s.d.Cfg.GitHubWebhookSecret
	if secret == "" {
		return nil, errNotFound("GitHub webhooks are not configured")
	}
	if !VerifyHMAC([]byte(secret), body, r.Header.Get(headerGitHubSignature), "sha256=", false) {
		return nil, errSignature("missing or invalid " + headerGitHubSignature)
	}
	in := &inbound{
		provider:   "github",
		route:      schemas.WebhookRouteDirect,
		deliveryID: headerPtr(r.Header, "X-GitHub-Delivery"),
	}
	if herr := in.setBody(body, kind); herr != nil {
		return nil, herr
	}
	if !isObject(in.body) || !json.Valid(in.body) {
		return nil, errBadBody("body is not a JSON object")
	}
	in.eventType = headerPtr(r.Header, "X-GitHub-Event")
	if in.eventType == nil {
		return nil, errBadBody("missing X-GitHub-Event")
	}
	event := *in.eventType
	if event == "ping" {
		in.reply = &noticeBody{Status: "pong", Message: "GitHub App webhook verified; pings are not recorded"}
		return in, nil
	}
	if inst := ObjectFields(in.body, "installation")[0]; inst != nil {
		in.routingID = string(ObjectFields(inst, "id")[0]) // a JSON number
	}
	if !isInstallationID(in.routingID) {
		if appLevelEvents[event] {
			in.reply = &noticeBody{Status: "ignored", Message: "GitHub App event " + event + " concerns no installation; nothing is recorded"}
			return in, nil
		}
		s.d.Log.Warn("ingest: GitHub webhook without an installation refused", "event", event, "delivery_id", deref(in.deliveryID))
		return nil, &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: "no_installation", Message: "the " + event + " delivery has no installation.id: /webhooks/github receives GitHub App webhooks; " +
			"a repository or organization webhook belongs on its trigger's own URL (/webhooks/t/{path})"}
	}
	return in, nil
}

// appLevelEvents are the GitHub App events that concern the App itself and
// never carry an installation.
var appLevelEvents = map[string]bool{"github_app_authorization": true, "meta": true}

// isInstallationID: a positive integer (a JSON number, not a string), as
// GitHub's installation ids are.
func isInstallationID(id string) bool {
	if id == "" || len(id) > 18 || id[0] == '0' {
		return false
	}
	for i := range len(id) {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nango verifies a Nango webhook with NANGO_SECRET_KEY and produces it as
// provider "nango" (the processor unwraps forward envelopes). For envelopes
// (they have providerConfigKey) the routing id is connectionId and the event
// type the envelope's type (forward, auth, sync, …); unwrapped payloads get
// neither.
func (s *Server) nango(r *http.Request, body []byte, kind bodyKind) (*inbound, *httpapi.Error) {
	secret := s.d.Cfg.NangoSecretKey
	if secret == "" {
		return nil, errNotFound("Nango webhooks are not configured")
	}
	if kind == bodyForm {
		return nil, errFormNotHere
	}
	if !VerifyHMAC([]byte(secret), body, r.Header.Get(headerNangoSignature), "", false) {
		return nil, errSignature("missing or invalid " + headerNangoSignature)
	}
	if !isObject(body) || !json.Valid(body) {
		return nil, errBadBody("body is not a JSON object")
	}
	in := &inbound{
		provider: "nango",
		route:    schemas.WebhookRouteNango,
		body:     body,
		// Forwards carry the provider's safe headers (X-GitHub-Delivery, …).
		deliveryID: headerPtr(r.Header, "X-GitHub-Delivery", "Linear-Delivery", "Request-ID"),
	}
	// Nango's envelopes carry providerConfigKey; a payload Nango could not
	// attribute to a connection arrives unwrapped, and its own fields (a
	// Linear "type": "Issue") say nothing about routing.
	f := ObjectFields(body, "providerConfigKey", "type", "connectionId")
	if jsonString(f[0]) == "" {
		return in, nil
	}
	if t := jsonString(f[1]); t != "" {
		in.eventType = &t
	}
	if c := jsonString(f[2]); c != "" {
		in.routingID = c
		in.connectionID = &c
	}
	return in, nil
}

// directProviders are the providers of /webhooks/direct/{provider}.
var directProviders = map[string]bool{"linear": true, "sentry": true, "posthog": true}

// direct handles /webhooks/direct/{provider}[/{path}]: the trigger is named by
// its webhook path (path segment, or ?trigger=) and must be a webhook trigger
// of that provider.
func (s *Server) direct(r *http.Request, body []byte, kind bodyKind) (*inbound, *httpapi.Error) {
	provider := r.PathValue("provider")
	if !directProviders[provider] {
		return nil, errNotFound("unknown webhook provider")
	}
	path := r.PathValue("path")
	if path == "" {
		path = r.URL.Query().Get("trigger")
	}
	return s.forTrigger(r, body, kind, path, provider, schemas.WebhookRouteDirect)
}

// trigger handles /webhooks/t/{path}, verified by the scheme of the
// trigger's provider.
func (s *Server) trigger(r *http.Request, body []byte, kind bodyKind) (*inbound, *httpapi.Error) {
	return s.forTrigger(r, body, kind, r.PathValue("path"), "", schemas.WebhookRouteTrigger)
}

var webhookPathRE = regexp.MustCompile(`^t_[A-Za-z0-9]{16,64}$`)

// forTrigger resolves the trigger of path (404 when there is none, or when it
// is not a webhook trigger of wantProvider), refuses form bodies unless it
// is a GitHub trigger (415), verifies the signature with its secret (401),
// then checks the body is JSON (400).
func (s *Server) forTrigger(r *http.Request, body []byte, kind bodyKind, path, wantProvider, route string) (*inbound, *httpapi.Error) {
	if !webhookPathRE.MatchString(path) {
		return nil, errNotFound("webhook not found")
	}
	t, err := s.lookupTrigger(r.Context(), path)
	if err != nil {
		s.d.Log.Error("ingest: resolve trigger webhook path", "err", err)
		return nil, errUnavailable("the webhook could not be resolved, retry later")
	}
	if t == nil || t.triggerType != "webhook" || (wantProvider != "" && t.provider != wantProvider) {
		return nil, errNotFound("webhook not found")
	}
	if t.secret == nil {
		// The sealed secret could not be opened (a retired key): nobody can
		// sign for this trigger until its secret is rotated.
		return nil, errInternal
	}
	if kind == bodyForm && t.provider != "github" {
		return nil, errFormNotHere
	}
	if !verifyTriggerSignature(t.provider, r.Header, body, t.secret) {
		return nil, errSignature("missing or invalid signature")
	}
	in := &inbound{
		provider:      t.provider,
		route:         route,
		routingID:     t.id,
		orgID:         t.orgID,
		integrationID: t.integrationID,
		triggerID:     &t.id,
		webhookPath:   &path,
	}
	if herr := in.setBody(body, kind); herr != nil {
		return nil, herr
	}
	if t.provider == "custom" || t.provider == "webhook" {
		if !json.Valid(in.body) {
			return nil, errBadBody("body is not JSON")
		}
	} else if !isObject(in.body) || !json.Valid(in.body) {
		return nil, errBadBody("body is not a JSON object")
	}
	switch t.provider {
	case "github":
		in.deliveryID = headerPtr(r.Header, "X-GitHub-Delivery")
		in.eventType = headerPtr(r.Header, "X-GitHub-Event")
	case "linear":
		in.deliveryID = headerPtr(r.Header, "Linear-Delivery")
		in.eventType = headerPtr(r.Header, "Linear-Event")
	case "sentry":
		in.deliveryID = headerPtr(r.Header, "Request-ID")
		in.eventType = headerPtr(r.Header, "Sentry-Hook-Resource")
	case "posthog":
	default:
		in.deliveryID = headerPtr(r.Header, "X-Webhook-Delivery", "Idempotency-Key")
		in.eventType = headerPtr(r.Header, "X-Webhook-Event")
	}
	return in, nil
}

// isObject reports whether a JSON text starts with an object (after
// whitespace); with json.Valid or a successful Unmarshal it is an object.
func isObject(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}
