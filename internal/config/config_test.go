package config

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestDefaultsAreValid(t *testing.T) {
	cfg, err := LoadFrom(env(nil))
	if err != nil {
		t.Fatalf("defaults must load: %v", err)
	}
	if !cfg.Embedded() || cfg.ConsumerMaxAttempts != 5 || cfg.OutboxPollInterval != time.Second {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
}

// The action approval expiries and the sweep keep the values they had as
// constants (5 min for sessions, 24 h for automation runs, every 30 s),
// and each can be set.
func TestActionsExpirySettings(t *testing.T) {
	cfg, err := LoadFrom(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ActionsPendingTTL != 5*time.Minute || cfg.ActionsPendingTTLAutomation != 24*time.Hour || cfg.ActionsSweepInterval != 30*time.Second {
		t.Fatalf("defaults: pending %v, automation %v, sweep %v", cfg.ActionsPendingTTL, cfg.ActionsPendingTTLAutomation, cfg.ActionsSweepInterval)
	}
	cfg, err = LoadFrom(env(map[string]string{"ACTIONS_PENDING_TTL": "15m", "ACTIONS_PENDING_TTL_AUTOMATION": "72h", "ACTIONS_SWEEP_INTERVAL": "5s"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ActionsPendingTTL != 15*time.Minute || cfg.ActionsPendingTTLAutomation != 72*time.Hour || cfg.ActionsSweepInterval != 5*time.Second {
		t.Fatalf("set: pending %v, automation %v, sweep %v", cfg.ActionsPendingTTL, cfg.ActionsPendingTTLAutomation, cfg.ActionsSweepInterval)
	}
	for _, name := range []string{"ACTIONS_PENDING_TTL", "ACTIONS_PENDING_TTL_AUTOMATION", "ACTIONS_SWEEP_INTERVAL"} {
		if _, err := LoadFrom(env(map[string]string{name: "0s"})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=0s: %v, want an error naming it", name, err)
		}
	}
}

// The default data dirs lie outside the working directory (the checkout
// under `make run`): a session workspace there would be inside the
// platform's own repository.
func TestDefaultDataDirsAreOutsideTheWorkingTree(t *testing.T) {
	cfg, err := LoadFrom(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"SANDBOX_DATA_DIR": cfg.SandboxDataDir, "BLOB_DIR": cfg.BlobDir, "BROKER_DATA_DIR": cfg.BrokerDataDir} {
		if !filepath.IsAbs(dir) || !strings.HasPrefix(dir, "/var/tmp/proliferate/") {
			t.Errorf("%s default %q: want an absolute path under /var/tmp/proliferate", name, dir)
		}
	}
}

func TestParsesValues(t *testing.T) {
	cfg, err := LoadFrom(env(prod(map[string]string{
		"KAFKA_BROKERS":         " k1:9092, k2:9093 ,",
		"CONSUMER_MAX_ATTEMPTS": "7",
		"CONSUMER_BACKOFF_MAX":  "1m",
		"SCHEMA_REGISTRY_URL":   "http://registry:8081",
		// The largest inline webhook body webhooks.raw can carry.
		"INGEST_INLINE_BODY_BYTES": "458752",
	})))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.KafkaBrokers, "|"); got != "k1:9092|k2:9093" {
		t.Fatalf("brokers = %q", got)
	}
	if cfg.ConsumerMaxAttempts != 7 || cfg.ConsumerBackoffMax != time.Minute || cfg.Embedded() || cfg.IngestInlineBodyBytes != 458752 {
		t.Fatalf("unexpected: %+v", cfg)
	}
}

// Each bad value must produce one problem naming the variable with a precise message.
func TestBadValuesArePreciseErrors(t *testing.T) {
	cases := []struct {
		vars    map[string]string
		wantVar string
		wantMsg string
	}{
		{map[string]string{"CONSUMER_MAX_ATTEMPTS": "five"}, "CONSUMER_MAX_ATTEMPTS", "must be an integer"},
		{map[string]string{"CONSUMER_MAX_ATTEMPTS": "0"}, "CONSUMER_MAX_ATTEMPTS", "must be at least 1"},
		{map[string]string{"OUTBOX_BATCH_SIZE": "100000"}, "OUTBOX_BATCH_SIZE", "must be at most 10000"},
		{map[string]string{"OUTBOX_POLL_INTERVAL": "soon"}, "OUTBOX_POLL_INTERVAL", "must be a duration"},
		{map[string]string{"OUTBOX_POLL_INTERVAL": "-1s"}, "OUTBOX_POLL_INTERVAL", "greater than zero"},
		{map[string]string{"KAFKA_BROKERS": "localhost"}, "KAFKA_BROKERS", `"localhost": must be host:port`},
		{map[string]string{"KAFKA_BROKERS": "h:99999"}, "KAFKA_BROKERS", "port must be a number"},
		{map[string]string{"OPS_ADDR": "9464"}, "OPS_ADDR", "must be host:port"},
		{map[string]string{"DATABASE_URL": "mysql://u:p@h/db"}, "DATABASE_URL", "scheme postgres or postgresql"},
		{map[string]string{"REDIS_URL": "redis://"}, "REDIS_URL", "must name a host"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL", "must be one of debug, info, warn, error"},
		{prod(map[string]string{"KAFKA_BROKERS": ""}), "KAFKA_BROKERS", "must be set when PROLIFERATE_ENV=production"},
		{prod(map[string]string{"SERVICE_TOKEN": ""}), "SERVICE_TOKEN", "must be set in production"},
		{prod(map[string]string{"SANDBOX_ISOLATION": "none"}), "SANDBOX_ISOLATION", "must not be none when PROLIFERATE_ENV=production"},
		{map[string]string{"SANDBOX_ISOLATION": "docker"}, "SANDBOX_ISOLATION", "must be one of bwrap, none"},
		{prod(map[string]string{"AUTH_SIGNING_KEYS": "k1:c2hvcnQ="}), "AUTH_SIGNING_KEYS", `key "k1" must be at least 32 bytes, is 5`},
		{prod(map[string]string{"ENCRYPTION_KEYS": "k1:" + b64(31)}), "ENCRYPTION_KEYS", `key "k1" must be exactly 32 bytes, is 31`},
		{prod(map[string]string{"ENCRYPTION_KEYS": "k1:" + b64(32) + ",k1:" + b64(32)}), "ENCRYPTION_KEYS", `key id "k1" appears twice`},
		{prod(map[string]string{"ENCRYPTION_KEYS": "nokid"}), "ENCRYPTION_KEYS", "key 1 must be kid:base64"},
		{map[string]string{"CONSUMER_BACKOFF_INITIAL": "5s", "CONSUMER_BACKOFF_MAX": "1s"}, "CONSUMER_BACKOFF_MAX", "at least CONSUMER_BACKOFF_INITIAL"},
		// A body inline in webhooks.raw (512 KiB) must leave 64 KiB for the rest of the record.
		{map[string]string{"INGEST_INLINE_BODY_BYTES": "458753"}, "INGEST_INLINE_BODY_BYTES", "must be at most 458752"},
		{map[string]string{"INGEST_INLINE_BODY_BYTES": "1048576"}, "INGEST_INLINE_BODY_BYTES", "webhooks.raw record is at most 524288 bytes"},
		{map[string]string{"INGEST_INLINE_BODY_BYTES": "-1"}, "INGEST_INLINE_BODY_BYTES", "must be at least 0"},
	}
	for _, c := range cases {
		t.Run(c.wantVar+"/"+c.wantMsg, func(t *testing.T) {
			_, err := LoadFrom(env(c.vars))
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("want *config.Error, got %v", err)
			}
			if len(cerr.Problems) != 1 {
				t.Fatalf("want exactly one problem, got %v", cerr.Problems)
			}
			p := cerr.Problems[0]
			if p.Var != c.wantVar || !strings.Contains(p.Message, c.wantMsg) {
				t.Fatalf("got %s: %s; want %s: …%s…", p.Var, p.Message, c.wantVar, c.wantMsg)
			}
		})
	}
}

func TestAllProblemsReportedTogether(t *testing.T) {
	_, err := LoadFrom(env(map[string]string{"LOG_LEVEL": "x", "OUTBOX_BATCH_SIZE": "0", "OPS_ADDR": "nope"}))
	var cerr *Error
	if !errors.As(err, &cerr) || len(cerr.Problems) != 3 {
		t.Fatalf("want 3 problems, got %v", err)
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	const pw = "hunter2-very-secret"
	vars := map[string]string{
		"DATABASE_URL": "postgres://app:" + pw + "@db:5432/p",
		"REDIS_URL":    "redis://:" + pw + "@r:6379/0",
	}
	cfg, err := LoadFrom(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Settings() {
		if strings.Contains(s.Value, pw) {
			t.Fatalf("%s leaks its secret: %s", s.Var, s.Value)
		}
	}
	// A secret must not leak through a validation error either.
	_, err = LoadFrom(env(map[string]string{"DATABASE_URL": "mysql://app:" + pw + "@db/p"}))
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Fatalf("error leaks secret or is missing: %v", err)
	}
}

// Passwords carried inside URLs of settings that are not secrets (userinfo,
// password-like query parameters) are redacted too, in `proliferate config`
// and in validation errors; the rest of the URL stays readable.
func TestURLPasswordsInNonSecretSettingsAreRedacted(t *testing.T) {
	const pw = "canary-url-pw-91"
	vars := map[string]string{
		"GITHUB_API_URL":      "https://bot:" + pw + "@ghe.internal/api/v3",
		"SCHEMA_REGISTRY_URL": "https://registry.internal/?password=" + pw + "&x=1",
		"LLM_BASE_URL":        "https://llm.internal/v1?api_key=" + pw,
		"DATABASE_URL":        "postgres://app@db:5432/p?sslmode=require&password=" + pw,
	}
	cfg, err := LoadFrom(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range cfg.Settings() {
		if strings.Contains(s.Value, pw) || strings.Contains(s.Default, pw) {
			t.Fatalf("%s leaks a URL password: %s", s.Var, s.Value)
		}
		if _, ok := vars[s.Var]; ok {
			seen++
			if !strings.Contains(s.Value, "://") {
				t.Fatalf("%s lost its URL: %q", s.Var, s.Value)
			}
		}
	}
	if seen != len(vars) {
		t.Fatalf("saw %d of %d settings", seen, len(vars))
	}
	_, err = LoadFrom(env(map[string]string{"GITHUB_API_URL": "ftp://bot:" + pw + "@h/?token=" + pw}))
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Fatalf("error leaks the URL password or is missing: %v", err)
	}
}

// Emails must arrive in production: the log mailer and plain-text SMTP are
// refused there; MAILER=smtp needs a host and a sender anywhere.
func TestMailerSettings(t *testing.T) {
	for _, c := range []struct {
		name    string
		vars    map[string]string
		wantVar string
	}{
		{"production log mailer", prod(map[string]string{"MAILER": "log"}), "MAILER"},
		{"production plain SMTP", prod(map[string]string{"SMTP_TLS": "none"}), "SMTP_TLS"},
		{"smtp without host", map[string]string{"MAILER": "smtp", "SMTP_FROM": "a@b.c"}, "SMTP_HOST"},
		{"smtp without sender", map[string]string{"MAILER": "smtp", "SMTP_HOST": "h"}, "SMTP_FROM"},
		{"smtp with a bad sender", map[string]string{"MAILER": "smtp", "SMTP_HOST": "h", "SMTP_FROM": "not an address"}, "SMTP_FROM"},
		{"unknown mailer", map[string]string{"MAILER": "sendgrid"}, "MAILER"},
		{"unknown TLS mode", map[string]string{"SMTP_TLS": "maybe"}, "SMTP_TLS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadFrom(env(c.vars))
			var cerr *Error
			if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0].Var != c.wantVar {
				t.Fatalf("got %v, want one problem with %s", err, c.wantVar)
			}
		})
	}
	cfg, err := LoadFrom(env(prod(map[string]string{"SMTP_PASSWORD": "smtp-canary-pw", "SMTP_USERNAME": "u"})))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mailer != "smtp" || cfg.SMTPPort != 587 || cfg.SMTPTLS != "starttls" || cfg.SMTPTimeout != 15*time.Second {
		t.Fatalf("smtp defaults: %+v", cfg)
	}
	for _, s := range cfg.Settings() {
		if strings.Contains(s.Value, "smtp-canary-pw") {
			t.Fatalf("%s leaks the SMTP password", s.Var)
		}
	}
	if _, err := LoadFrom(env(nil)); err != nil { // development keeps the log mailer
		t.Fatal(err)
	}
}

func TestDocsAreCurrent(t *testing.T) {
	have, err := os.ReadFile("../../docs/config.md")
	if err != nil || string(have) != Markdown() {
		t.Fatal("docs/config.md is stale: run `make docs` and commit the result")
	}
}

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

// prod is a valid production environment with overrides applied.
func prod(over map[string]string) map[string]string {
	m := map[string]string{
		"PROLIFERATE_ENV":   "production",
		"KAFKA_BROKERS":     "k:9092",
		"AUTH_SIGNING_KEYS": "a:" + b64(32),
		"ENCRYPTION_KEYS":   "a:" + b64(32),
		"SERVICE_TOKEN":     "a-production-service-token",
		"DATABASE_URL":      "postgres://app:pw@db.internal:5432/proliferate",
		"REDIS_URL":         "rediss://:pw@redis.internal:6379/0",
		"MAILER":            "smtp",
		"SMTP_HOST":         "smtp.internal",
		"SMTP_FROM":         "Proliferate <noreply@example.com>",
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// Production refuses every secret setting left at its development default
// (or, for key lists, still carrying part of it); development accepts them.
func TestProductionRefusesDevelopmentSecrets(t *testing.T) {
	devKey := func(name string) string {
		for _, s := range Documented() {
			if s.Var == name {
				return s.Default
			}
		}
		t.Fatalf("no setting %s", name)
		return ""
	}
	cases := []struct {
		name    string
		vars    map[string]string
		refused []string
	}{
		{"all set", prod(nil), nil},
		{"SERVICE_TOKEN unset", prod(map[string]string{"SERVICE_TOKEN": ""}), []string{"SERVICE_TOKEN"}},
		{"SERVICE_TOKEN at its default", prod(map[string]string{"SERVICE_TOKEN": devKey("SERVICE_TOKEN")}), []string{"SERVICE_TOKEN"}},
		{"AUTH_SIGNING_KEYS unset", prod(map[string]string{"AUTH_SIGNING_KEYS": ""}), []string{"AUTH_SIGNING_KEYS"}},
		{"AUTH_SIGNING_KEYS rotating away from the dev key", prod(map[string]string{"AUTH_SIGNING_KEYS": "new:" + b64(32) + "," + devKey("AUTH_SIGNING_KEYS")}), []string{"AUTH_SIGNING_KEYS"}},
		{"ENCRYPTION_KEYS unset", prod(map[string]string{"ENCRYPTION_KEYS": ""}), []string{"ENCRYPTION_KEYS"}},
		{"ENCRYPTION_KEYS still decrypting with the dev key", prod(map[string]string{"ENCRYPTION_KEYS": "new:" + b64(32) + "," + devKey("ENCRYPTION_KEYS")}), []string{"ENCRYPTION_KEYS"}},
		{"DATABASE_URL unset (the dev database, no password)", prod(map[string]string{"DATABASE_URL": ""}), []string{"DATABASE_URL"}},
		{"REDIS_URL unset", prod(map[string]string{"REDIS_URL": ""}), []string{"REDIS_URL"}},
		{"everything unset", map[string]string{"PROLIFERATE_ENV": "production", "KAFKA_BROKERS": "k:9092",
			"MAILER": "smtp", "SMTP_HOST": "smtp.internal", "SMTP_FROM": "noreply@example.com"},
			[]string{"DATABASE_URL", "REDIS_URL", "AUTH_SIGNING_KEYS", "ENCRYPTION_KEYS", "SERVICE_TOKEN"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadFrom(env(c.vars))
			var got []string
			var cerr *Error
			if errors.As(err, &cerr) {
				for _, p := range cerr.Problems {
					got = append(got, p.Var)
					if !strings.Contains(p.Message, "must be set in production") || p.Value != "REDACTED" {
						t.Errorf("%s: %q (value %q)", p.Var, p.Message, p.Value)
					}
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != strings.Join(c.refused, ",") {
				t.Fatalf("refused %v, want %v", got, c.refused)
			}
			// Development takes the same values.
			dev := map[string]string{}
			for k, v := range c.vars {
				dev[k] = v
			}
			dev["PROLIFERATE_ENV"] = "development"
			if _, err := LoadFrom(env(dev)); err != nil {
				t.Fatalf("development: %v", err)
			}
		})
	}
}

// Every secret setting with a default is refused at that default in
// production, without being listed anywhere: a secret added later is
// covered as soon as it is tagged.
func TestEverySecretDefaultIsRefusedInProduction(t *testing.T) {
	n := 0
	for _, s := range Documented() {
		if !s.Secret || s.Default == "" {
			continue
		}
		n++
		_, err := LoadFrom(env(prod(map[string]string{s.Var: s.Default})))
		var cerr *Error
		if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0].Var != s.Var {
			t.Errorf("%s at its default in production: %v", s.Var, err)
		}
	}
	if n < 5 {
		t.Fatalf("only %d secret settings with a default", n)
	}
}
