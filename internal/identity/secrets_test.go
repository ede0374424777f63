package identity

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestNewSecret(t *testing.T) {
	a, b := NewSecret(APIKeyPrefix), NewSecret(APIKeyPrefix)
	if a == b || !strings.HasPrefix(a, "pk_") || len(a) != SecretLen(APIKeyPrefix) || len(a) != 46 {
		t.Fatalf("secrets %q %q", a, b)
	}
	if strings.ContainsAny(a, ".+/=") {
		t.Fatalf("secret %q is not plain base64url", a)
	}
	if !WellFormed(a, APIKeyPrefix) || WellFormed(a, RefreshTokenPrefix) || WellFormed(a[:45], APIKeyPrefix) ||
		WellFormed(a+"A", APIKeyPrefix) || WellFormed(a[:45]+"\xff", APIKeyPrefix) || WellFormed(a[:45]+".", APIKeyPrefix) {
		t.Fatal("WellFormed is wrong")
	}
	if HashSecret(a) == HashSecret(b) || len(HashSecret(a)) != 64 {
		t.Fatal("HashSecret is not a hex SHA-256")
	}
}

func TestSlugify(t *testing.T) {
	for in, want := range map[string]string{
		"Jane Doe":                              "jane-doe",
		"  Ünïcode  Ñame ":                      "n-code-ame", // non-ASCII letters separate words
		"---":                                   "",
		"a__b..c":                               "a-b-c",
		"O'Brien & Sons":                        "o-brien-sons",
		strings.Repeat("ab", 30):                strings.Repeat("ab", 20),
		strings.Repeat("a ", 30):                strings.TrimSuffix(strings.Repeat("a-", 20), "-"),
		"日本語":                                   "",
		"Team42":                                "team42",
		"trailing-hyphen-at-40-xxxxxx-yyyyy- z": "trailing-hyphen-at-40-xxxxxx-yyyyy-z",
	} {
		if got := Slugify(in); got != want {
			t.Errorf("Slugify(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestServiceTokens(t *testing.T) {
	const secret = "a-service-token-secret"
	now := time.Now()
	clock := func() time.Time { return now }
	tok, err := IssueServiceTokenAt(secret, "gateway", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "svc_eyJ") {
		t.Fatalf("token %q", tok)
	}
	if name, err := VerifyServiceToken(secret, tok, clock); err != nil || name != "gateway" {
		t.Fatalf("verify: %q %v", name, err)
	}
	// Wrong secret, expired, not prefixed, tampered.
	if _, err := VerifyServiceToken("another-secret-value", tok, clock); err == nil {
		t.Error("verified with the wrong secret")
	}
	later := func() time.Time { return now.Add(2 * time.Minute) }
	if _, err := VerifyServiceToken(secret, tok, later); err == nil {
		t.Error("expired token verified")
	}
	if _, err := VerifyServiceToken(secret, strings.TrimPrefix(tok, "svc_"), clock); err == nil {
		t.Error("token without the svc_ prefix verified")
	}
	b := []byte(tok)
	b[len(b)-3] ^= 1
	if _, err := VerifyServiceToken(secret, string(b), clock); err == nil {
		t.Error("tampered token verified")
	}
	// Signed with SERVICE_TOKEN itself (not the derived key): refused.
	raw, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, ServiceClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "proliferate", Subject: "service:gateway", Audience: jwt.ClaimStrings{"proliferate-service"},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))}, Service: "gateway"}).
		SignedString([]byte(secret))
	if _, err := VerifyServiceToken(secret, "svc_"+raw, clock); err == nil {
		t.Error("token signed with the raw SERVICE_TOKEN verified")
	}
	// Too long-lived, correctly signed: refused.
	long, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, ServiceClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "proliferate", Subject: "service:gateway", Audience: jwt.ClaimStrings{"proliferate-service"},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(48 * time.Hour))}, Service: "gateway"}).
		SignedString(serviceKey(secret))
	if _, err := VerifyServiceToken(secret, "svc_"+long, clock); err == nil {
		t.Error("token living 48h verified")
	}
	// Issue refuses bad input.
	for _, c := range []struct {
		secret, name string
		ttl          time.Duration
	}{{"", "gateway", time.Minute}, {secret, "Gateway!", time.Minute}, {secret, "", time.Minute},
		{secret, "gateway", 0}, {secret, "gateway", 25 * time.Hour}} {
		if _, err := IssueServiceTokenAt(c.secret, c.name, c.ttl, now); err == nil {
			t.Errorf("IssueServiceToken(%q, %q, %s) succeeded", c.secret, c.name, c.ttl)
		}
	}
}
