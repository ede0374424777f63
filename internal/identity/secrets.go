package identity

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"unicode"
)

// Prefixes of the bearer secrets this package makes, so a leaked string is
// recognisable (secret scanners) and verifiers can tell kinds apart.
const (
	APIKeyPrefix       = "pk_"
	RefreshTokenPrefix = "rt_"
	VerifyTokenPrefix  = "ev_"
	ResetTokenPrefix   = "pr_"
	ServiceTokenPrefix = "svc_"
)

// SecretBytes is the entropy of every random secret: 256 bits.
const SecretBytes = 32

// NewSecret returns prefix followed by 256 random bits in unpadded base64url
// (43 characters).
func NewSecret(prefix string) string {
	b := make([]byte, SecretBytes)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// WellFormed reports whether s looks like a secret NewSecret made with
// prefix: the prefix, then exactly 43 base64url characters. Verifiers check it
// before a credential gets anywhere near a query.
func WellFormed(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(SecretBytes) {
		return false
	}
	for i := range len(rest) {
		c := rest[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// SecretLen is the length of a secret NewSecret made with prefix.
func SecretLen(prefix string) int { return len(prefix) + base64.RawURLEncoding.EncodedLen(SecretBytes) }

// HashSecret is what the database stores instead of a secret: hex SHA-256.
// The secrets carry 256 random bits, so a fast hash is enough (no salt or
// stretching needed: nothing can be guessed).
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// APIKeyDisplayLen is how much of an API key is kept in clear (api_keys.prefix)
// to show in lists and to find the key's row: "pk_" and 9 characters (54 bits).
const APIKeyDisplayLen = 12

// Slugify makes a URL slug of s: lowercase ASCII letters and digits, runs of
// anything else become one hyphen, at most 40 characters. It may return "".
func Slugify(s string) string {
	var b strings.Builder
	hyphen := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			if hyphen && b.Len() > 0 {
				b.WriteByte('-')
			}
			hyphen = false
			b.WriteRune(r)
		default:
			hyphen = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String()[:min(b.Len(), 40)], "-")
}

// RandomSuffix is a short random hex string for slug collisions.
func RandomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
