package app_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/testenv"
)

// canarySettings configures every secret setting the dev stack accepts
// with a unique canary value: the database password (inside DATABASE_URL:
// the test Postgres trusts loopback, so the password is sent and
// ignored), the access-token signing key and the encryption key (their
// base64 text and their bytes), the service token, and the credentials of
// the third parties the stack is configured for or could be (SMTP, Nango,
// Slack, GitHub's webhook secret, S3, E2B, the LLM proxy's master key, the
// GitHub and Google sign-in clients).
// It returns what a whole-stack test must find in no log line, Kafka
// record or API response (name → value), and the configuration overrides
// (name, value pairs) that set them.
func canarySettings(t *testing.T) (map[string]string, []string) {
	t.Helper()
	canary := func(what string) string { return "canary-" + what + "-" + strings.ToLower(rand.Text()[:16]) }
	key := func(what string) (string, string) {
		raw := canary(what)
		raw = (raw + strings.Repeat("k", 32))[:32] // exactly 32 bytes, starting with the canary's name
		return raw, "canary:" + base64.StdEncoding.EncodeToString([]byte(raw))
	}
	db, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	dbPassword := canary("dbpass")
	db.User = url.UserPassword(db.User.Username(), dbPassword)
	signRaw, signKey := key("sign")
	encRaw, encKey := key("enc")
	values := map[string]string{
		"DATABASE_URL's password":    dbPassword,
		"AUTH_SIGNING_KEYS (bytes)":  signRaw,
		"AUTH_SIGNING_KEYS (base64)": strings.TrimPrefix(signKey, "canary:"),
		"ENCRYPTION_KEYS (bytes)":    encRaw,
		"ENCRYPTION_KEYS (base64)":   strings.TrimPrefix(encKey, "canary:"),
		"SERVICE_TOKEN":              canary("service"),
		"SMTP_PASSWORD":              canary("smtp"),
		"NANGO_SECRET_KEY":           canary("nango"),
		"SLACK_CLIENT_SECRET":        canary("slack"),
		"GITHUB_WEBHOOK_SECRET":      canary("ghhook"),
		"S3_SECRET_KEY":              canary("s3"),
		"E2B_API_KEY":                canary("e2b"),
		"LLM_PROXY_MASTER_KEY":       canary("litellm"),
		"GITHUB_OAUTH_CLIENT_SECRET": canary("ghoauth"),
		"GOOGLE_OAUTH_CLIENT_SECRET": canary("googleoauth"),
	}
	overrides := []string{"DATABASE_URL", db.String(), "AUTH_SIGNING_KEYS", signKey, "ENCRYPTION_KEYS", encKey,
		"GITHUB_OAUTH_CLIENT_ID", "canary-client", "GOOGLE_OAUTH_CLIENT_ID", "canary-client.apps.googleusercontent.com"}
	for name, v := range values {
		if !strings.Contains(name, " ") {
			overrides = append(overrides, name, v)
		}
	}
	return values, overrides
}
