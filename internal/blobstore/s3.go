package blobstore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// S3Config configures the S3 store.
type S3Config struct {
	Bucket string
	// Region signs the requests (default us-east-1; S3-compatible servers
	// usually accept any).
	Region string
	// EndpointURL is the S3-compatible endpoint, e.g. http://127.0.0.1:9000;
	// empty means AWS (https://s3.<region>.amazonaws.com).
	EndpointURL string
	AccessKey   string
	SecretKey   string
	// PathStyle addresses objects as <endpoint>/<bucket>/<key> (MinIO and
	// most S3-compatible servers) instead of <bucket>.<host>/<key>.
	PathStyle bool
	// HTTPClient sends the requests (default: a new http.Client); Timeout
	// bounds each request (default 30 s); Now is the signing clock.
	HTTPClient *http.Client
	Timeout    time.Duration
	Now        func() time.Time
}

// S3Store is the S3-compatible store.
type S3Store struct {
	cfg  S3Config
	base *url.URL
}

const s3Scheme = "s3://"

// S3 returns a store for cfg.
func S3(cfg S3Config) (*S3Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("blobstore: S3 bucket is required")
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, errors.New("blobstore: S3 access key and secret key are required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	endpoint := cfg.EndpointURL
	if endpoint == "" {
		endpoint = "https://s3." + cfg.Region + ".amazonaws.com"
	}
	base, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("blobstore: S3 endpoint %q is not an http(s) URL", endpoint)
	}
	return &S3Store{cfg: cfg, base: base}, nil
}

// objectURL addresses key in the bucket.
func (s *S3Store) objectURL(key string) *url.URL {
	u := *s.base
	if s.cfg.PathStyle {
		u.Path = u.Path + "/" + s.cfg.Bucket + "/" + key
	} else {
		u.Host = s.cfg.Bucket + "." + u.Host
		u.Path = u.Path + "/" + key
	}
	u.RawPath = ""
	return &u
}

// Put uploads data with PutObject.
func (s *S3Store) Put(ctx context.Context, key string, data []byte, contentType string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	h := map[string]string{}
	if contentType != "" {
		h["Content-Type"] = contentType
	}
	if _, err := s.do(ctx, http.MethodPut, key, data, h); err != nil {
		return "", fmt.Errorf("blobstore: put %s: %w", key, err)
	}
	return s3Scheme + s.cfg.Bucket + "/" + key, nil
}

// Get downloads the object of an "s3://<bucket>/<key>" ref of this bucket.
func (s *S3Store) Get(ctx context.Context, ref string) ([]byte, error) {
	rest, ok := strings.CutPrefix(ref, s3Scheme)
	bucket, key, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || bucket != s.cfg.Bucket {
		return nil, fmt.Errorf("%w: %q is not an s3:// ref of bucket %s", ErrInvalidKey, ref, s.cfg.Bucket)
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	data, err := s.do(ctx, http.MethodGet, key, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("blobstore: get %s: %w", ref, err)
	}
	return data, nil
}

// S3Error is an error answer of the object store.
type S3Error struct {
	Status  int
	Code    string
	Message string
}

func (e *S3Error) Error() string {
	return fmt.Sprintf("s3 %d %s: %s", e.Status, e.Code, e.Message)
}

// Is makes a 404 (NoSuchKey) match ErrNotFound.
func (e *S3Error) Is(target error) bool {
	return target == ErrNotFound && (e.Status == http.StatusNotFound || e.Code == "NoSuchKey")
}

func (s *S3Store) do(ctx context.Context, method, key string, body []byte, headers map[string]string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.objectURL(key).String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256(body)
	signV4(req, hex.EncodeToString(sum[:]), s.cfg.AccessKey, s.cfg.SecretKey, s.cfg.Region, s.cfg.Now())
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		e := &S3Error{Status: resp.StatusCode}
		var x struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		}
		if xml.Unmarshal(data, &x) == nil {
			e.Code, e.Message = x.Code, x.Message
		}
		if e.Code == "" {
			e.Code = strconv.Itoa(resp.StatusCode)
		}
		return nil, e
	}
	return data, nil
}

// signV4 adds the AWS Signature Version 4 headers (x-amz-date,
// x-amz-content-sha256, Authorization) to req. It signs host and every
// content-type, content-md5, range and x-amz-* header; there is no query
// string in the requests this store makes beyond what req carries.
func signV4(req *http.Request, payloadHash, accessKey, secretKey, region string, now time.Time) {
	now = now.UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}

	signed := map[string]string{"host": host}
	for k, vs := range req.Header {
		lk := strings.ToLower(k)
		if lk == "content-type" || lk == "content-md5" || lk == "range" || strings.HasPrefix(lk, "x-amz-") {
			vals := make([]string, len(vs))
			for i, v := range vs {
				vals[i] = strings.Join(strings.Fields(v), " ")
			}
			signed[lk] = strings.Join(vals, ",")
		}
	}
	names := make([]string, 0, len(signed))
	for k := range signed {
		names = append(names, k)
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, n := range names {
		canonHeaders.WriteString(n + ":" + signed[n] + "\n")
	}
	signedHeaders := strings.Join(names, ";")

	canonical := strings.Join([]string{
		req.Method,
		encodePath(req.URL.Path),
		canonicalQuery(req.URL.Query()),
		canonHeaders.String(),
		signedHeaders,
		payloadHash,
	}, "\n")
	scope := day + "/" + region + "/s3/aws4_request"
	crh := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(crh[:])

	k := hmacSHA256([]byte("AWS4"+secretKey), day)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, "s3")
	k = hmacSHA256(k, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(k, toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+accessKey+"/"+scope+
		",SignedHeaders="+signedHeaders+",Signature="+sig)
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// encodePath URI-encodes each path segment the way S3 expects (everything
// but unreserved characters; slashes kept).
func encodePath(p string) string {
	if p == "" {
		return "/"
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = uriEncode(s)
	}
	return strings.Join(segs, "/")
}

func canonicalQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vs := append([]string(nil), q[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			parts = append(parts, uriEncode(k)+"="+uriEncode(v))
		}
	}
	return strings.Join(parts, "&")
}

func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
