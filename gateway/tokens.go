package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// The gateway's own bearer tokens (terminal tokens, preview links, share
// links) are a prefix and 32 random bytes, URL-safe base64; only their
// SHA-256 is stored (Redis keys, preview_shares rows), never the token.
const tokenBytes = 32

// newToken returns a fresh token with prefix.
func newToken(prefix string) string {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // crypto/rand never fails (Go ≥1.24 panics instead)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// wellFormedToken checks a token's shape before any lookup.
func wellFormedToken(token, prefix string) bool {
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

// tokenHash is a token's SHA-256.
func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// tokenKey is the Redis key of a token of kind: its hash, never the token.
func tokenKey(kind, token string) string {
	return "gateway:" + kind + ":" + hex.EncodeToString(tokenHash(token))
}
