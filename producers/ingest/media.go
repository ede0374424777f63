package ingest

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/proliferate/proliferate/internal/httpapi"
)

// bodyKind is what a request's Content-Type says its body is.
type bodyKind int

const (
	// bodyJSON: application/json, application/*+json, text/plain (senders
	// that cannot set a type; the body must still be JSON) or no
	// Content-Type at all.
	bodyJSON bodyKind = iota
	// bodyForm: application/x-www-form-urlencoded with the JSON in its
	// payload field, as GitHub sends when a webhook's content type is
	// "application/x-www-form-urlencoded". Accepted on GitHub routes only.
	bodyForm
)

const mediaForm = "application/x-www-form-urlencoded"

// classify reads the request's Content-Type. Other media types, malformed
// values and charsets other than UTF-8 (JSON is UTF-8) are 415.
func classify(contentType string) (bodyKind, *httpapi.Error) {
	if strings.TrimSpace(contentType) == "" {
		return bodyJSON, nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, errMediaType("malformed Content-Type")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
		return 0, errMediaType("charset " + cs + " is not supported: send UTF-8")
	}
	switch {
	case mt == "application/json", mt == "text/plain",
		strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return bodyJSON, nil
	case mt == mediaForm:
		return bodyForm, nil
	}
	return 0, errMediaType("Content-Type " + mt + " is not supported: send application/json")
}

// errFormNotHere answers form bodies on routes of providers that never send
// them.
var errFormNotHere = errMediaType("Content-Type " + mediaForm + " is accepted from GitHub only: send application/json")

func errMediaType(msg string) *httpapi.Error {
	return &httpapi.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: msg}
}

// formPayload returns the JSON of a GitHub form delivery's payload field
// (the body is payload=<URL-encoded JSON>). Its signature is over the raw
// form, so it is called after verification.
func formPayload(body []byte) ([]byte, *httpapi.Error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errBadBody("form body could not be decoded")
	}
	ps := vals["payload"]
	if len(ps) != 1 {
		return nil, errBadBody("form body must have exactly one payload field")
	}
	p := []byte(ps[0])
	if !isObject(p) || !json.Valid(p) {
		return nil, errBadBody("the payload field is not a JSON object")
	}
	return p, nil
}
