package ingest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proliferate/proliferate/producers/ingest"
)

// VerifyHMAC with the "sha256=" scheme accepts exactly the headers that are,
// after trimming and ignoring case, "sha256=" + the hex MAC.
func FuzzVerifyHMAC(f *testing.F) {
	body := []byte(`{"a":1}`)
	f.Add([]byte("secret"), body, "sha256="+ingest.Sign([]byte("secret"), body))
	f.Add([]byte("secret"), body, "  SHA256="+strings.ToUpper(ingest.Sign([]byte("secret"), body))+" ")
	f.Add([]byte("secret"), body, ingest.Sign([]byte("secret"), body))
	f.Add([]byte(""), body, "sha256="+ingest.Sign(nil, body))
	f.Add([]byte("k"), []byte{}, "sha256=")
	f.Add([]byte("k"), []byte("x"), "sha256=zz")
	f.Fuzz(func(t *testing.T, secret, body []byte, header string) {
		got := ingest.VerifyHMAC(secret, body, header, "sha256=", false)
		want := len(secret) > 0 && strings.EqualFold(strings.TrimSpace(header), "sha256="+ingest.Sign(secret, body))
		if got != want {
			t.Fatalf("VerifyHMAC(%q, %q, %q) = %v, want %v", secret, body, header, got, want)
		}
		// Without a prefix (Linear, Sentry, Nango).
		got = ingest.VerifyHMAC(secret, body, header, "", false)
		want = len(secret) > 0 && strings.EqualFold(strings.TrimSpace(header), ingest.Sign(secret, body))
		if got != want {
			t.Fatalf("unprefixed VerifyHMAC(%q, %q, %q) = %v, want %v", secret, body, header, got, want)
		}
	})
}

func FuzzParseSignature(f *testing.F) {
	f.Add("sha256="+strings.Repeat("ab", 32), true)
	f.Add(strings.Repeat("AB", 32), true)
	f.Add("sha256=", false)
	f.Add("sha256="+strings.Repeat("g", 64), false)
	f.Add("Sha256=\t"+strings.Repeat("0", 64), false)
	f.Fuzz(func(t *testing.T, value string, optional bool) {
		sig, ok := ingest.ParseSignature(value, "sha256=", optional)
		if !ok {
			if sig != nil {
				t.Fatal("signature returned with ok=false")
			}
			return
		}
		if len(sig) != 32 {
			t.Fatalf("%d bytes from %q", len(sig), value)
		}
		v := strings.TrimSpace(value)
		hasPrefix := len(v) >= 7 && strings.EqualFold(v[:7], "sha256=")
		if !hasPrefix && !optional {
			t.Fatalf("accepted %q without its prefix", value)
		}
	})
}

func FuzzBearerToken(f *testing.F) {
	f.Add("Bearer abc")
	f.Add("bearer   abc  ")
	f.Add("Bearer")
	f.Add("Basic abc")
	f.Add("BEARER\tx")
	f.Fuzz(func(t *testing.T, header string) {
		tok := ingest.BearerToken(header)
		if tok == "" {
			return
		}
		if tok != strings.TrimSpace(tok) {
			t.Fatalf("token %q not trimmed", tok)
		}
		h := strings.TrimSpace(header)
		if !strings.EqualFold(h[:7], "bearer ") || !strings.HasSuffix(h, tok) {
			t.Fatalf("token %q from %q", tok, header)
		}
	})
}

func FuzzTokenEqual(f *testing.F) {
	f.Add("s3cret", "s3cret")
	f.Add("", "")
	f.Add("a", "ab")
	f.Fuzz(func(t *testing.T, token, secret string) {
		if got, want := ingest.TokenEqual(token, []byte(secret)), token != "" && token == secret; got != want {
			t.Fatalf("TokenEqual(%q, %q) = %v", token, secret, got)
		}
	})
}

// ObjectFields agrees with encoding/json on every valid JSON text.
func FuzzObjectFields(f *testing.F) {
	f.Add([]byte(issuesBody), "installation")
	f.Add([]byte(`{"a":"x\"}","b":[1,{"c":"]"}],"a":{"d":null}}`), "a")
	f.Add([]byte(`{"k\u0065y":1, "key" : true }`), "key")
	f.Add([]byte(`{"a\\":"\\\\","b":-1.5e3}`), `a\`)
	f.Add([]byte(` [ {"a":1} ] `), "a")
	f.Add([]byte(`{}`), "")
	f.Add([]byte(`{"":"empty"}`), "")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		if !json.Valid(data) || !utf8.Valid(data) {
			return
		}
		var m map[string]json.RawMessage
		isObj := json.Unmarshal(data, &m) == nil && m != nil
		got := ingest.ObjectFields(data, key)[0]
		if !isObj {
			if got != nil {
				t.Fatalf("field %q of non-object %q: %q", key, data, got)
			}
			return
		}
		want, ok := m[key]
		if !ok {
			if got != nil {
				t.Fatalf("absent field %q of %q: %q", key, data, got)
			}
		} else if !bytes.Equal(got, want) {
			t.Fatalf("field %q of %q: %q, want %q", key, data, got, want)
		}
		// Every member of the object is found.
		for k, v := range m {
			if g := ingest.ObjectFields(data, k)[0]; !bytes.Equal(g, v) {
				t.Fatalf("field %q of %q: %q, want %q", k, data, g, v)
			}
		}
	})
}

// fuzzContentTypes are the Content-Type values FuzzWebhookAnswers sends.
var fuzzContentTypes = []string{
	"", "application/json", "application/json; charset=utf-8", "application/vnd.github+json", "text/plain",
	"application/x-www-form-urlencoded", "application/xml", "multipart/form-data; boundary=b", "text/html",
	"application/json; charset=iso-8859-1", ";;", "application/octet-stream",
}

// fuzzRoutes: the GitHub App route, a GitHub trigger's URL, a custom
// trigger's URL.
const (
	routeGitHubApp = iota
	routeGitHubTrigger
	routeCustom
	numRoutes
)

// jsonOfSize is a GitHub-like JSON object of exactly n bytes (at least its
// minimal size).
func jsonOfSize(n int) []byte {
	b := []byte(`{"action":"opened","installation":{"id":4242},"pad":"`)
	if pad := n - len(b) - 2; pad > 0 {
		b = append(b, bytes.Repeat([]byte("x"), pad)...)
	}
	return append(b, '"', '}')
}

// Whatever the size (0 to twice INGEST_MAX_BODY_BYTES), the content type,
// the route and the body, ingest answers 200, 400, 401, 413 or 415 (422 for
// a GitHub App object without an installation), never 5xx while Kafka is
// up; the error shape is stable; a refused request produces nothing; an
// accepted one produces exactly one record within webhooks.raw's limit whose
// body (inline or by reference) is the JSON that was sent.
func FuzzWebhookAnswers(f *testing.F) {
	e := newEnv(f, envOptions{})
	custom := e.newWebhookTrigger(f, "custom", nil)
	ghTrigger := e.newWebhookTrigger(f, "github", nil)
	for _, size := range []uint32{0, 1, 2, 30, 80, inlineBody - 1, inlineBody, inlineBody + 1, maxBody - 1, maxBody, maxBody + 1, 2 * maxBody} {
		for route := range uint8(numRoutes) {
			f.Add(size, uint8(1), route, uint8(0), true, []byte(nil))
		}
	}
	for ct := range uint8(len(fuzzContentTypes)) {
		f.Add(uint32(4000), ct, uint8(routeGitHubApp), uint8(0), true, []byte(nil))
		f.Add(uint32(4000), ct, uint8(routeCustom), uint8(0), true, []byte(nil))
	}
	for route := range uint8(numRoutes) {
		f.Add(uint32(3000), uint8(5), route, uint8(1), true, []byte(nil))         // a form
		f.Add(uint32(inlineBody*2), uint8(5), route, uint8(1), true, []byte(nil)) // a large form
		f.Add(uint32(3000), uint8(1), route, uint8(0), false, []byte(nil))        // unsigned
		f.Add(uint32(20), uint8(4), route, uint8(2), true, []byte("{}"))
		f.Add(uint32(9), uint8(0), route, uint8(2), true, []byte("[1,"))
		f.Add(uint32(7), uint8(0), route, uint8(2), true, []byte("1"))
	}
	f.Fuzz(func(t *testing.T, size uint32, ctIdx, routeIdx, shape uint8, signed bool, data []byte) {
		n := int(size % (2*maxBody + 1))
		ct := fuzzContentTypes[int(ctIdx)%len(fuzzContentTypes)]
		route := int(routeIdx) % numRoutes
		var body []byte
		switch shape % 3 {
		case 0:
			body = jsonOfSize(n)
		case 1:
			body = formOf(jsonOfSize(n))
		default:
			if len(data) == 0 {
				data = []byte("z")
			}
			body = bytes.Repeat(data, n/len(data)+1)[:n]
		}

		path, secret := "/webhooks/github", githubSecret
		switch route {
		case routeGitHubTrigger:
			path, secret = "/webhooks/t/"+ghTrigger.Path, ghTrigger.Secret
		case routeCustom:
			path, secret = "/webhooks/t/"+custom.Path, custom.Secret
		}
		headers := map[string]string{"X-GitHub-Event": "issues", "X-GitHub-Delivery": "fuzz-delivery"}
		if ct != "" {
			headers["Content-Type"] = ct
		}
		if signed {
			if route == routeCustom {
				headers["X-Webhook-Signature"] = "sha256=" + sign(secret, body)
			} else {
				headers["X-Hub-Signature-256"] = "sha256=" + sign(secret, body)
			}
		}
		want, produced := expectedAnswer(body, ct, route, signed)

		before := e.endOffset(t)
		r := e.post(t, path, headers, body)
		if r.Status != want {
			t.Fatalf("%d-byte body, %q, route %d, signed %v: status %d, want %d: %.300s", len(body), ct, route, signed, r.Status, want, r.Body)
		}
		after := e.endOffset(t)
		if want != http.StatusOK {
			var v struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(r.Body, &v); err != nil || v.Error.Code == "" || v.Error.Message == "" {
				t.Fatalf("error body %q (%v)", r.Body, err)
			}
			if after != before {
				t.Fatalf("a %d answer produced %d records", want, after-before)
			}
			return
		}
		r.accepted(t)
		if after != before+1 {
			t.Fatalf("accepted, %d records produced", after-before)
		}
		rec := e.record(t, after-1)
		if got := e.body(t, rec.Payload); !bytes.Equal(got, produced) {
			t.Fatalf("produced body of %d bytes, want %d", len(got), len(produced))
		}
		if (rec.Payload.BodyRef != nil) != (len(produced) > inlineBody) {
			t.Fatalf("%d-byte body by reference: %v", len(produced), rec.Payload.BodyRef != nil)
		}
	})
}

// expectedAnswer is the status ingest owes a request, and the body it
// produces when it accepts it.
func expectedAnswer(body []byte, ct string, route int, signed bool) (int, []byte) {
	if len(body) > maxBody {
		return http.StatusRequestEntityTooLarge, nil
	}
	form := false
	switch ct {
	case "", "application/json", "application/json; charset=utf-8", "application/vnd.github+json", "text/plain":
	case "application/x-www-form-urlencoded":
		form = true
	default:
		return http.StatusUnsupportedMediaType, nil
	}
	if form && route == routeCustom {
		return http.StatusUnsupportedMediaType, nil
	}
	if !signed {
		return http.StatusUnauthorized, nil
	}
	if form {
		vals, err := url.ParseQuery(string(body))
		if err != nil || len(vals["payload"]) != 1 {
			return http.StatusBadRequest, nil
		}
		body = []byte(vals["payload"][0])
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' || !json.Valid(body) {
			return http.StatusBadRequest, nil
		}
	}
	if !json.Valid(body) {
		return http.StatusBadRequest, nil
	}
	if route == routeCustom {
		return http.StatusOK, body
	}
	var obj map[string]json.RawMessage
	if t := bytes.TrimLeft(body, " \t\r\n"); t[0] != '{' || json.Unmarshal(body, &obj) != nil {
		return http.StatusBadRequest, nil
	}
	if route == routeGitHubApp {
		var inst struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(obj["installation"], &inst)
		if !regexp.MustCompile(`^[1-9][0-9]{0,17}$`).Match(inst.ID) {
			return http.StatusUnprocessableEntity, nil
		}
	}
	return http.StatusOK, body
}
