// Package s3fake is an in-process S3-compatible object store for tests:
// path-style PutObject and GetObject (/{bucket}/{key}) with AWS Signature
// Version 4 verification (header auth, signed payload hash checked against
// the body), S3's XML error bodies (NoSuchBucket, NoSuchKey,
// SignatureDoesNotMatch, InvalidAccessKeyId, XAmzContentSHA256Mismatch), and
// programmable failures (the next N requests answer 500 InternalError).
//
// The signature check is written independently of the client in
// internal/blobstore, from the AWS documentation, so the two cross-check.
package s3fake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Object is a stored object.
type Object struct {
	Data        []byte
	ContentType string
}

// Server is the fake. Create it with New.
type Server struct {
	srv                  *httptest.Server
	accessKey, secretKey string

	mu       sync.Mutex
	buckets  map[string]map[string]Object
	failNext int
	puts     int
}

// New starts a fake with one bucket and one credential, closed when the test
// ends.
func New(t testing.TB, bucket, accessKey, secretKey string) *Server {
	s := &Server{accessKey: accessKey, secretKey: secretKey,
		buckets: map[string]map[string]Object{bucket: {}}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the endpoint URL (S3_ENDPOINT_URL).
func (s *Server) URL() string { return s.srv.URL }

// FailNext makes the next n requests answer 500 InternalError.
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext += n
}

// Object returns a stored object.
func (s *Server) Object(bucket, key string) (Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.buckets[bucket][key]
	return o, ok
}

// Puts counts accepted PutObject requests.
func (s *Server) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s3err(w, 400, "IncompleteBody", "could not read the body")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext > 0 {
		s.failNext--
		s3err(w, 500, "InternalError", "We encountered an internal error. Please try again.")
		return
	}
	if code, msg := s.verify(r, body); code != "" {
		s3err(w, 403, code, msg)
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	objs, ok := s.buckets[bucket]
	if !ok {
		s3err(w, 404, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	if key == "" {
		s3err(w, 400, "InvalidRequest", "object key required")
		return
	}
	switch r.Method {
	case http.MethodPut:
		objs[key] = Object{Data: body, ContentType: r.Header.Get("Content-Type")}
		s.puts++
		sum := sha256.Sum256(body)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		o, ok := objs[key]
		if !ok {
			s3err(w, 404, "NoSuchKey", "The specified key does not exist.")
			return
		}
		if o.ContentType != "" {
			w.Header().Set("Content-Type", o.ContentType)
		}
		_, _ = w.Write(o.Data)
	default:
		s3err(w, 405, "MethodNotAllowed", "The specified method is not allowed against this resource.")
	}
}

// verify checks the SigV4 Authorization header; it returns an S3 error code
// and message when the request is not properly signed.
func (s *Server) verify(r *http.Request, body []byte) (string, string) {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		return "AccessDenied", "missing AWS4-HMAC-SHA256 authorization"
	}
	fields := map[string]string{}
	for _, part := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 5 || cred[3] != "s3" || cred[4] != "aws4_request" {
		return "AuthorizationHeaderMalformed", "bad credential scope"
	}
	if cred[0] != s.accessKey {
		return "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	sum := sha256.Sum256(body)
	if payload != hex.EncodeToString(sum[:]) {
		return "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."
	}
	date := r.Header.Get("X-Amz-Date")
	if !strings.HasPrefix(date, cred[1]) {
		return "AuthorizationHeaderMalformed", "x-amz-date does not match the credential date"
	}
	names := strings.Split(fields["SignedHeaders"], ";")
	if !sort.StringsAreSorted(names) {
		return "AuthorizationHeaderMalformed", "signed headers not sorted"
	}
	var hdrs strings.Builder
	for _, n := range names {
		v := r.Header.Get(n)
		if n == "host" {
			v = r.Host
		}
		hdrs.WriteString(n + ":" + strings.TrimSpace(v) + "\n")
	}
	hasHost := false
	for _, n := range names {
		hasHost = hasHost || n == "host"
	}
	if !hasHost {
		return "AccessDenied", "host must be signed"
	}
	// The canonical URI re-encodes the decoded path, segment by segment.
	segs := strings.Split(r.URL.Path, "/")
	for i, seg := range segs {
		segs[i] = strings.ReplaceAll(url.QueryEscape(seg), "+", "%20")
		segs[i] = strings.ReplaceAll(segs[i], "%7E", "~")
	}
	canonical := r.Method + "\n" + strings.Join(segs, "/") + "\n" + r.URL.RawQuery + "\n" +
		hdrs.String() + "\n" + fields["SignedHeaders"] + "\n" + payload
	h := sha256.Sum256([]byte(canonical))
	scope := strings.Join(cred[1:], "/")
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(h[:])
	key := []byte("AWS4" + s.secretKey)
	for _, part := range cred[1:] {
		key = mac(key, part)
	}
	if want := hex.EncodeToString(mac(key, toSign)); !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
	}
	return "", ""
}

func mac(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func s3err(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><RequestId>fake</RequestId></Error>`, code, msg)
}
