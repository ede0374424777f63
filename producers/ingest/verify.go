package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
)

// ParseSignature decodes a hex HMAC-SHA256 signature header value. prefix is
// the scheme tag the header must carry ("sha256=" for GitHub and custom
// webhooks, "" for Linear, Sentry and Nango); when optionalPrefix is set the
// tag may be absent. Surrounding spaces are ignored and the tag and hex digits
// are case-insensitive. ok is false unless the value is exactly 32 bytes of
// hex.
func ParseSignature(value, prefix string, optionalPrefix bool) (sig []byte, ok bool) {
	v := strings.TrimSpace(value)
	if prefix != "" {
		if len(v) >= len(prefix) && strings.EqualFold(v[:len(prefix)], prefix) {
			v = v[len(prefix):]
		} else if !optionalPrefix {
			return nil, false
		}
	}
	if len(v) != 2*sha256.Size {
		return nil, false
	}
	sig, err := hex.DecodeString(v)
	if err != nil {
		return nil, false
	}
	return sig, true
}

// Sign is the hex HMAC-SHA256 of body with secret (the signature senders put
// in their headers).
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyHMAC reports whether header carries the HMAC-SHA256 of body with
// secret, compared in constant time. An empty secret never verifies.
func VerifyHMAC(secret, body []byte, header, prefix string, optionalPrefix bool) bool {
	if len(secret) == 0 {
		return false
	}
	sig, ok := ParseSignature(header, prefix, optionalPrefix)
	if !ok {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(m.Sum(nil), sig)
}

// BearerToken returns the credential of an "Authorization: Bearer …" value
// (scheme case-insensitive), or "" when there is none.
func BearerToken(authorization string) string {
	v := strings.TrimSpace(authorization)
	const scheme = "bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(v[len(scheme):])
}

// TokenEqual compares a presented token with the secret in constant time,
// whatever their lengths (both are hashed first). An empty token or secret
// never matches.
func TokenEqual(token string, secret []byte) bool {
	if token == "" || len(secret) == 0 {
		return false
	}
	a := sha256.Sum256([]byte(token))
	b := sha256.Sum256(secret)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Header names of the signature schemes.
const (
	headerGitHubSignature  = "X-Hub-Signature-256"
	headerNangoSignature   = "X-Nango-Hmac-Sha256"
	headerLinearSignature  = "Linear-Signature"
	headerSentrySignature  = "Sentry-Hook-Signature"
	headerPostHogSignature = "X-PostHog-Signature"
	headerPostHogToken     = "X-PostHog-Token"
	headerCustomSignature  = "X-Webhook-Signature"
)

// verifyTriggerSignature checks a request addressed to one trigger against
// the trigger's secret, with the scheme of the trigger's provider (see the
// package documentation).
func verifyTriggerSignature(provider string, h http.Header, body, secret []byte) bool {
	switch provider {
	case "github":
		return VerifyHMAC(secret, body, h.Get(headerGitHubSignature), "sha256=", false)
	case "linear":
		return VerifyHMAC(secret, body, h.Get(headerLinearSignature), "", false)
	case "sentry":
		return VerifyHMAC(secret, body, h.Get(headerSentrySignature), "", false)
	case "posthog":
		if sig := h.Get(headerPostHogSignature); sig != "" {
			return VerifyHMAC(secret, body, sig, "sha256=", true)
		}
		if tok := strings.TrimSpace(h.Get(headerPostHogToken)); tok != "" {
			return TokenEqual(tok, secret)
		}
		return TokenEqual(BearerToken(h.Get("Authorization")), secret)
	default:
		if sig := h.Get(headerCustomSignature); sig != "" {
			return VerifyHMAC(secret, body, sig, "sha256=", false)
		}
		return TokenEqual(BearerToken(h.Get("Authorization")), secret)
	}
}

// Limits of the headers kept on the event: at most maxKeptHeaders of them,
// names of at most maxKeptHeaderName bytes, values of at most
// maxKeptHeaderValue, maxKeptHeaderBytes of names and values in all (so a
// record's metadata stays far below webhooks.raw's limit whatever the
// request carried).
const (
	maxKeptHeaders     = 64
	maxKeptHeaderName  = 256
	maxKeptHeaderValue = 2048
	maxKeptHeaderBytes = 16 << 10
)

// dropHeaders are never copied to the event: credentials and transport.
var dropHeaders = map[string]bool{
	"authorization":       true,
	"proxy-authorization": true,
	"cookie":              true,
	"set-cookie":          true,
	"connection":          true,
	"keep-alive":          true,
	"te":                  true,
	"trailer":             true,
	"transfer-encoding":   true,
	"upgrade":             true,
	"content-length":      true,
	"accept-encoding":     true,
	"expect":              true,
}

// keepHeader says whether a (lower-case) header name may be recorded:
// nothing that is or may carry a credential or a signature.
func keepHeader(name string) bool {
	if dropHeaders[name] {
		return false
	}
	for _, s := range []string{"signature", "hmac", "token", "secret", "auth", "api-key", "apikey", "password", "cookie"} {
		if strings.Contains(name, s) {
			return false
		}
	}
	return true
}

// priorityHeaders are kept before any other, so that a sender with very many
// headers cannot push out the ones the processor reads.
var priorityHeaders = []string{
	"content-type", "user-agent",
	"x-github-event", "x-github-delivery", "x-github-hook-id",
	"x-github-hook-installation-target-id", "x-github-hook-installation-target-type",
	"linear-event", "linear-delivery",
	"sentry-hook-resource", "sentry-hook-timestamp", "request-id",
	"x-webhook-event", "x-webhook-delivery", "idempotency-key",
}

// selectHeaders returns the request headers worth keeping for the
// processor: names lower-cased, multiple values joined with ", ", values
// valid UTF-8, at most maxKeptHeaders of them (priority ones first, then in
// name order), names longer than maxKeptHeaderName and values longer than
// maxKeptHeaderValue left out, and none past maxKeptHeaderBytes in all.
func selectHeaders(h http.Header) map[string]string {
	out := make(map[string]string, min(len(h), maxKeptHeaders))
	total := 0
	add := func(name string, vs []string) {
		if len(out) >= maxKeptHeaders || len(name) > maxKeptHeaderName || !keepHeader(name) {
			return
		}
		if _, dup := out[name]; dup {
			return
		}
		v := strings.Join(vs, ", ")
		if len(v) > maxKeptHeaderValue || total+len(name)+len(v) > maxKeptHeaderBytes {
			return
		}
		total += len(name) + len(v)
		out[name] = strings.ToValidUTF8(v, "\uFFFD")
	}
	for _, name := range priorityHeaders {
		if vs := h.Values(name); len(vs) > 0 {
			add(name, vs)
		}
	}
	if len(h) > len(out) {
		names := make([]string, 0, len(h))
		for k := range h {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			add(strings.ToLower(k), h[k])
		}
	}
	return out
}

// headerPtr is the trimmed value of the first of names present, or nil.
func headerPtr(h http.Header, names ...string) *string {
	for _, n := range names {
		if v := strings.TrimSpace(h.Get(n)); v != "" {
			if len(v) > 255 {
				v = v[:255]
			}
			v = strings.ToValidUTF8(v, "\uFFFD")
			return &v
		}
	}
	return nil
}
