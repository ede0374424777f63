package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Service tokens authenticate the platform's own roles to each other: an HS256
// JWT with a `service` claim, prefixed svc_ so verifiers tell it from access
// tokens (eyJ…), API keys (pk_) and sandbox tokens (sbx_). No HTTP route
// issues them; a role that holds SERVICE_TOKEN mints its own.
//
// The signing key is derived from SERVICE_TOKEN (HMAC-SHA256 with a fixed
// label) rather than being SERVICE_TOKEN itself, because SERVICE_TOKEN also
// keys the sandbox tokens (HMAC of a session id): the two constructions never
// share a key.

const (
	serviceIssuer   = "proliferate"
	serviceAudience = "proliferate-service"
	// MaxServiceTokenTTL bounds the lifetime of a service token.
	MaxServiceTokenTTL = 24 * time.Hour
)

var serviceNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// ServiceClaims are a service token's contents.
type ServiceClaims struct {
	jwt.RegisteredClaims
	Service string `json:"service"`
}

func serviceKey(serviceToken string) []byte {
	m := hmac.New(sha256.New, []byte(serviceToken))
	m.Write([]byte("proliferate/service-token/v1"))
	return m.Sum(nil)
}

// IssueServiceToken signs a token naming serviceName (lowercase letters,
// digits and hyphens) valid for ttl (at most MaxServiceTokenTTL).
func IssueServiceToken(serviceToken, serviceName string, ttl time.Duration) (string, error) {
	return IssueServiceTokenAt(serviceToken, serviceName, ttl, time.Now())
}

// IssueServiceTokenAt is IssueServiceToken with an explicit issue time.
func IssueServiceTokenAt(serviceToken, serviceName string, ttl time.Duration, now time.Time) (string, error) {
	if serviceToken == "" {
		return "", errors.New("identity: empty service token secret")
	}
	if !serviceNameRE.MatchString(serviceName) {
		return "", fmt.Errorf("identity: invalid service name %q", serviceName)
	}
	if ttl <= 0 || ttl > MaxServiceTokenTTL {
		return "", fmt.Errorf("identity: service token ttl must be in (0, %s]", MaxServiceTokenTTL)
	}
	c := ServiceClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: serviceIssuer, Subject: "service:" + serviceName, Audience: jwt.ClaimStrings{serviceAudience},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Service: serviceName,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(serviceKey(serviceToken))
	if err != nil {
		return "", err
	}
	return ServiceTokenPrefix + s, nil
}

// ErrInvalidServiceToken is every verification failure.
var ErrInvalidServiceToken = errors.New("identity: invalid service token")

// VerifyServiceToken checks a svc_ token (signature, HS256 only, issuer,
// audience, expiry) and returns the service it names. A token living longer than
// MaxServiceTokenTTL is refused even when correctly signed.
func VerifyServiceToken(serviceToken, token string, now func() time.Time) (string, error) {
	raw, ok := strings.CutPrefix(token, ServiceTokenPrefix)
	if !ok || serviceToken == "" {
		return "", ErrInvalidServiceToken
	}
	if now == nil {
		now = time.Now
	}
	c := &ServiceClaims{}
	_, err := jwt.ParseWithClaims(raw, c, func(*jwt.Token) (any, error) { return serviceKey(serviceToken), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(serviceIssuer), jwt.WithAudience(serviceAudience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(now), jwt.WithLeeway(5*time.Second))
	if err != nil || !serviceNameRE.MatchString(c.Service) || c.Subject != "service:"+c.Service {
		return "", ErrInvalidServiceToken
	}
	if c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > MaxServiceTokenTTL {
		return "", ErrInvalidServiceToken
	}
	return c.Service, nil
}
