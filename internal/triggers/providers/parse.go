package providers

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/proliferate/proliferate/internal/runs"
)

func parse(w Webhook) ([]runs.Event, error) {
	switch w.Provider {
	case GitHub:
		return parseGitHub(w)
	case Linear:
		return parseLinear(w)
	case Sentry:
		return parseSentry(w)
	case PostHog:
		return parsePostHog(w)
	case Custom:
		return parseCustom(w)
	case Nango:
		return parseNango(w)
	}
	return nil, &ParseError{Provider: w.Provider, Reason: "unsupported provider"}
}

// nangoEnvelope is the body Nango posts: auth and sync notifications, and
// "forward" envelopes carrying a provider's webhook payload.
type nangoEnvelope struct {
	Type              string          `json:"type"`
	From              string          `json:"from"`
	ConnectionID      string          `json:"connectionId"`
	ProviderConfigKey string          `json:"providerConfigKey"`
	Operation         string          `json:"operation"`
	Success           *bool           `json:"success"`
	Error             *nangoError     `json:"error"`
	Payload           json.RawMessage `json:"payload"`
}

type nangoError struct {
	Type        string `json:"type"`
	Description string `json:"description"`
}

func decodeNango(body []byte) (nangoEnvelope, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nangoEnvelope{}, &ParseError{Provider: Nango, Reason: "body is not a JSON object"}
	}
	var env nangoEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nangoEnvelope{}, &ParseError{Provider: Nango, Reason: "invalid envelope: " + err.Error()}
	}
	return env, nil
}

// innerProvider maps a forward envelope's "from" or providerConfigKey to the
// trigger provider whose payload it carries. Deployments name their Nango
// integrations freely, so "github-app" or "linear_prod" count as well.
func innerProvider(env nangoEnvelope) string {
	for _, key := range []string{env.From, env.ProviderConfigKey} {
		key = strings.ToLower(key)
		for _, p := range []string{GitHub, Linear, Sentry, PostHog} {
			if key == p || strings.HasPrefix(key, p+"-") || strings.HasPrefix(key, p+"_") {
				return p
			}
		}
	}
	return ""
}

func parseNango(w Webhook) ([]runs.Event, error) {
	env, err := decodeNango(w.Body)
	if err != nil {
		return nil, err
	}
	if env.Type != "forward" {
		return nil, nil // auth and sync notifications carry no trigger event
	}
	p := innerProvider(env)
	if p == "" {
		return nil, &ParseError{Provider: Nango, Reason: "forward from an unsupported provider"}
	}
	if len(env.Payload) == 0 || string(env.Payload) == "null" {
		return nil, &ParseError{Provider: p, Reason: "Nango forward without a payload"}
	}
	inner := w
	inner.Provider = p
	inner.Body = env.Payload
	return parse(inner)
}

func routingOf(w Webhook) Routing {
	r := Routing{Provider: w.Provider}
	switch w.Provider {
	case GitHub:
		// Only installation.id is needed: decode into a struct rather than
		// building the whole payload's map.
		var p struct {
			Installation struct {
				ID json.Number `json:"id"`
			} `json:"installation"`
		}
		if json.Unmarshal(w.Body, &p) == nil {
			if id, err := p.Installation.ID.Int64(); err == nil && id > 0 {
				r.GitHubInstallationID = id
			}
		}
	case Nango:
		if env, err := decodeNango(w.Body); err == nil {
			r.Provider = innerProvider(env)
			r.NangoConnectionID = env.ConnectionID
			r.NangoProviderConfigKey = env.ProviderConfigKey
		} else {
			r.Provider = ""
		}
	}
	return r
}

func installationID(o obj) int64 {
	v, ok := o.obj("installation").num("id")
	if !ok || v <= 0 || v >= 1<<53 || v != float64(int64(v)) {
		return 0
	}
	return int64(v)
}

func lifecycleOf(w Webhook) (*Lifecycle, error) {
	switch w.Provider {
	case GitHub:
		if header(w, "x-github-event") != "installation" {
			return nil, nil
		}
		o, err := decodeObject(GitHub, w.Body)
		if err != nil {
			return nil, err
		}
		status := map[string]string{"deleted": "deleted", "suspend": "suspended", "unsuspend": "active"}[o.str("action")]
		if status == "" {
			return nil, nil // created, new_permissions_accepted: nothing to change
		}
		id := installationID(o)
		if id == 0 {
			return nil, &ParseError{Provider: GitHub, Reason: "installation event without installation.id"}
		}
		reason := "GitHub App installation " + o.str("action")
		if by := o.obj("sender").str("login"); by != "" {
			reason += " by " + by
		}
		return &Lifecycle{GitHubInstallationID: id, Status: status, Reason: truncate(reason, 200)}, nil
	case Nango:
		env, err := decodeNango(w.Body)
		if err != nil {
			return nil, err
		}
		if env.Type != "auth" || env.Success == nil {
			return nil, nil
		}
		var l Lifecycle
		switch {
		case *env.Success && (env.Operation == "creation" || env.Operation == "override"):
			l = Lifecycle{Status: "active", Reason: "Nango connection " + env.Operation}
		case !*env.Success && env.Operation == "refresh":
			l = Lifecycle{Status: "expired", Reason: "Nango token refresh failed"}
			if env.Error != nil && env.Error.Description != "" {
				l.Reason += ": " + env.Error.Description
			}
		default:
			return nil, nil
		}
		if env.ConnectionID == "" {
			return nil, &ParseError{Provider: Nango, Reason: "auth event without connectionId"}
		}
		l.NangoConnectionID, l.NangoProviderConfigKey = env.ConnectionID, env.ProviderConfigKey
		l.Reason = truncate(l.Reason, 200)
		return &l, nil
	}
	return nil, nil
}

func fallbackDedupKey(w Webhook) string {
	if id := deliveryID(w); id != "" {
		return w.Provider + ":delivery:" + id
	}
	return w.Provider + ":body:" + bodyWindowKey(w.Body, w.ReceivedAt)
}

// deliveryID is the provider's id of this delivery, from the ingest record or
// the provider's header.
func deliveryID(w Webhook) string {
	if w.DeliveryID != "" {
		return w.DeliveryID
	}
	for _, h := range []string{"x-github-delivery", "linear-delivery", "request-id", "sentry-hook-request-id"} {
		if v := header(w, h); v != "" {
			return v
		}
	}
	return ""
}
