package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
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

// SandboxTokenPrefix starts every sandbox token.
const SandboxTokenPrefix = "sbx_"

// sandboxTokenBytes is the entropy of a sandbox token.
const sandboxTokenBytes = 32

// NewSandboxToken returns a fresh random sandbox token (sbx_ and 32 random
// bytes, base64url) and its SHA-256, the only form that is stored. A token
// is minted per sandbox boot (internal/sessions: MintSandboxToken); nothing
// derives it from a shared secret.
func NewSandboxToken() (token string, hash []byte) {
	b := make([]byte, sandboxTokenBytes)
	_, _ = rand.Read(b) // crypto/rand never fails (Go ≥1.24 panics instead)
	token = SandboxTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, HashSandboxToken(token)
}

// HashSandboxToken is the stored form of a sandbox token. A fast hash is
// enough: the token is 256 random bits, so it cannot be guessed from it.
func HashSandboxToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// WellFormedSandboxToken reports whether token has the shape NewSandboxToken
// produces (checked before any lookup; the old HMAC form has not).
func WellFormedSandboxToken(token string) bool {
	rest, ok := strings.CutPrefix(token, SandboxTokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(sandboxTokenBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}
