package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Tokens issues and verifies access tokens: HS256 JWTs carrying the user and
// login session, signed with the first of a list of keys and verified with any
// of them by key id, so keys rotate without logging anybody out.
type Tokens struct {
	keys   map[string][]byte
	active string
	ttl    time.Duration
	now    func() time.Time
}

const issuer = "proliferate"

// NewTokens parses kid:base64 keys (config.AuthSigningKeys).
func NewTokens(keys []string, ttl time.Duration) (*Tokens, error) {
	t := &Tokens{keys: map[string][]byte{}, ttl: ttl, now: time.Now}
	for i, k := range keys {
		kid, b64, ok := strings.Cut(k, ":")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(raw) < 32 {
			return nil, fmt.Errorf("auth: signing key %d is not kid:base64 of ≥32 bytes", i+1)
		}
		t.keys[kid] = raw
		if i == 0 {
			t.active = kid
		}
	}
	if t.active == "" {
		return nil, errors.New("auth: no signing keys")
	}
	return t, nil
}

// SetClock replaces the clock (tests of expiry).
func (t *Tokens) SetClock(now func() time.Time) { t.now = now }

// Claims are the access token's contents. The org and role are not in the
// token: they are looked up per request so membership changes apply at once.
type Claims struct {
	jwt.RegisteredClaims
	SessionID      string `json:"sid"`
	ImpersonatorID string `json:"imp,omitempty"`
}

// Issue signs an access token for a user's login session.
func (t *Tokens) Issue(userID, sessionID, impersonatorID string) (string, time.Time, error) {
	now := t.now()
	exp := now.Add(t.ttl)
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: issuer, Subject: userID,
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
		},
		SessionID: sessionID, ImpersonatorID: impersonatorID,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = t.active
	s, err := tok.SignedString(t.keys[t.active])
	return s, exp, err
}

// Verify checks signature, algorithm, issuer and expiry. Any failure is
// ErrUnauthenticated.
func (t *Tokens) Verify(raw string) (*Claims, error) {
	c := &Claims{}
	_, err := jwt.ParseWithClaims(raw, c, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		key, ok := t.keys[kid]
		if !ok {
			return nil, errors.New("unknown key id")
		}
		return key, nil
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(issuer), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(t.now), jwt.WithLeeway(5*time.Second))
	if err != nil || c.Subject == "" || c.SessionID == "" {
		return nil, ErrUnauthenticated
	}
	return c, nil
}

// LooksLikeJWT tells access tokens from the other bearer credentials.
func LooksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 && strings.HasPrefix(s, "eyJ") }

// SandboxToken derives the credential a session's sandbox uses to call the
// platform: HMAC-SHA256(serviceToken, sessionID), hex, prefixed with the
// session id so the verifier knows which session to recompute. Nothing is
// stored; rotating SERVICE_TOKEN revokes every sandbox token.
func SandboxToken(serviceToken, sessionID string) string {
	m := hmac.New(sha256.New, []byte(serviceToken))
	m.Write([]byte(sessionID))
	return SandboxTokenPrefix + sessionID + "." + hex.EncodeToString(m.Sum(nil))
}

// SandboxTokenPrefix starts every sandbox token.
const SandboxTokenPrefix = "sbx_"

// VerifySandboxToken returns the session id the token was derived for, in
// constant time over the MAC.
func VerifySandboxToken(serviceToken, token string) (string, error) {
	rest, ok := strings.CutPrefix(token, SandboxTokenPrefix)
	if !ok {
		return "", ErrUnauthenticated
	}
	sessionID, _, ok := strings.Cut(rest, ".")
	if !ok || sessionID == "" {
		return "", ErrUnauthenticated
	}
	want := SandboxToken(serviceToken, sessionID)
	if !hmac.Equal([]byte(want), []byte(token)) {
		return "", ErrUnauthenticated
	}
	return sessionID, nil
}
