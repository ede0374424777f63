package redaction_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

func newBox(t testing.TB, id string) *secretbox.Box {
	t.Helper()
	raw := make([]byte, 32)
	copy(raw, id)
	b, err := secretbox.New([]string{id + ":" + base64.StdEncoding.EncodeToString(raw)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type world struct {
	pool      *pgxpool.Pool
	org, user string
	repo      string
	box       *secretbox.Box
	cache     *redaction.Cache
	logs      *testenv.LogBuffer
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{pool: testenv.Postgres(t), box: newBox(t, "k1"), logs: &testenv.LogBuffer{}}
	if err := w.pool.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id::text`, rand.Text()+"@example.com").Scan(&w.user); err != nil {
		t.Fatal(err)
	}
	if err := w.pool.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ('o', $1) RETURNING id::text`, "org-"+strings.ToLower(rand.Text())).Scan(&w.org); err != nil {
		t.Fatal(err)
	}
	if err := w.pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id::text`, w.org, "a/"+rand.Text()).Scan(&w.repo); err != nil {
		t.Fatal(err)
	}
	w.cache = redaction.NewCache(w.pool, w.box, slog.New(slog.NewJSONHandler(w.logs, nil)))
	return w
}

func (w *world) secret(t testing.TB, repoID, key, value string) secrets.Secret {
	t.Helper()
	s, err := secrets.Create(ctx, w.pool, w.box, secrets.CreateInput{OrgID: w.org, RepoID: repoID, Key: key, Value: value,
		Persist: true, Actor: secrets.Actor{UserID: w.user}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (w *world) redact(t *testing.T, s string) string {
	t.Helper()
	r, err := w.cache.Redactor(ctx, w.org)
	if err != nil {
		t.Fatal(err)
	}
	return r.String(s)
}

// The org's secrets (org-wide and repo-scoped) and its patterns are
// redacted; the redactor is rebuilt exactly when one of them changes.
func TestOrgRedactorFollowsSecretsAndPatterns(t *testing.T) {
	w := newWorld(t)
	orgWide := w.secret(t, "", "STRIPE_KEY", "org-wide-value-123")
	w.secret(t, w.repo, "DB_PASSWORD", "repo-db-pw-456")
	w.secret(t, "", "SHORT", "12345") // < MinSecretLen: not matched
	const text = "a org-wide-value-123 b repo-db-pw-456 c 12345 d acme-778899 e intranet.corp"
	if got := w.redact(t, text); got != "a [REDACTED] b [REDACTED] c 12345 d acme-778899 e intranet.corp" {
		t.Fatalf("secrets: %q", got)
	}
	builds := w.cache.Builds()
	for range 3 {
		w.redact(t, text)
	}
	if w.cache.Builds() != builds {
		t.Fatalf("unchanged org rebuilt: %d → %d builds", builds, w.cache.Builds())
	}

	set, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{UserID: w.user}, []actions.Pattern{
		{Pattern: `(?i)acme-[0-9]{6}`, Regex: true}, {Pattern: "intranet.corp"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Patterns) != 2 || set.UpdatedBy == nil || *set.UpdatedBy != w.user || set.UpdatedAt == nil {
		t.Fatalf("put returned %+v", set)
	}
	if got := w.redact(t, text); got != "a [REDACTED] b [REDACTED] c 12345 d [REDACTED] e [REDACTED]" {
		t.Fatalf("patterns: %q", got)
	}

	newValue := "rotated-value-789"
	if _, err := secrets.Update(ctx, w.pool, w.box, w.org, orgWide.ID, secrets.UpdateInput{Value: &newValue,
		Actor: secrets.Actor{UserID: w.user}}); err != nil {
		t.Fatal(err)
	}
	if got := w.redact(t, "old org-wide-value-123 new rotated-value-789"); got != "old org-wide-value-123 new [REDACTED]" {
		t.Fatalf("after update: %q", got)
	}
	if err := secrets.Delete(ctx, w.pool, w.org, orgWide.ID, secrets.Actor{UserID: w.user}); err != nil {
		t.Fatal(err)
	}
	if got := w.redact(t, "rotated-value-789"); got != "rotated-value-789" {
		t.Fatalf("after delete: %q", got)
	}
	if _, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{UserID: w.user}, nil); err != nil {
		t.Fatal(err)
	}
	if got := w.redact(t, text); got != "a org-wide-value-123 b [REDACTED] c 12345 d acme-778899 e intranet.corp" {
		t.Fatalf("after clearing the patterns: %q", got)
	}
	var audits int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'action_redactions.update'`, w.org).Scan(&audits); err != nil || audits != 2 {
		t.Fatalf("audit rows: %d %v", audits, err)
	}

	// Another organization's secrets are not this one's.
	other := newWorld(t)
	other.secret(t, "", "X", "repo-db-pw-456-other")
	if got := w.redact(t, "repo-db-pw-456-other"); got != "[REDACTED]-other" {
		t.Fatalf("cross-org: %q", got)
	}
	if got := other.redact(t, "repo-db-pw-456"); got != "repo-db-pw-456" {
		t.Fatalf("cross-org: %q", got)
	}
}

// A secret that no longer decrypts is skipped (and named in the log,
// never by value); the others still redact.
func TestUndecryptableSecretIsSkipped(t *testing.T) {
	w := newWorld(t)
	w.secret(t, "", "GOOD", "good-secret-value")
	bad := w.secret(t, "", "BAD", "bad-secret-value")
	if _, err := w.pool.Exec(ctx, `UPDATE secrets SET encrypted_value = (SELECT encrypted_value FROM secrets WHERE key = 'GOOD' AND org_id = $1)
		WHERE id = $2`, w.org, bad.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.redact(t, "good-secret-value"); got != "[REDACTED]" {
		t.Fatalf("got %q", got)
	}
	if !strings.Contains(w.logs.String(), `"key":"BAD"`) || strings.Contains(w.logs.String(), "secret-value") {
		t.Fatalf("log: %s", w.logs.String())
	}
}

// Put refuses an invalid list whole and stores nothing.
func TestPutValidates(t *testing.T) {
	w := newWorld(t)
	if _, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{UserID: w.user}, []actions.Pattern{{Pattern: "fine-literal"}}); err != nil {
		t.Fatal(err)
	}
	for _, ps := range [][]actions.Pattern{
		{{Pattern: "ok-literal"}, {Pattern: "(", Regex: true}},
		{{Pattern: "a*", Regex: true}},
		{{Pattern: `\b`, Regex: true}},
		{{Pattern: "ab"}},
		{{Pattern: ""}},
		{{Pattern: strings.Repeat("x", actions.MaxPatternBytes+1)}},
		{{Pattern: "dup-literal"}, {Pattern: "dup-literal"}},
	} {
		_, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{UserID: w.user}, ps)
		var ie *redaction.InvalidError
		if !errors.As(err, &ie) {
			t.Fatalf("%v: %v", ps, err)
		}
	}
	set, err := redaction.Get(ctx, w.pool, w.org)
	if err != nil || len(set.Patterns) != 1 || set.Patterns[0].Pattern != "fine-literal" {
		t.Fatalf("stored %+v %v", set, err)
	}
}
