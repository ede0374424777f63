package secrets_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func unique(prefix string) string { return prefix + rand.Text() }

func newBox(t *testing.T, keys ...string) *secretbox.Box {
	t.Helper()
	var spec []string
	for _, k := range keys {
		raw := make([]byte, 32)
		copy(raw, k)
		spec = append(spec, k+":"+base64.StdEncoding.EncodeToString(raw))
	}
	b, err := secretbox.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type world struct {
	pool   *pgxpool.Pool
	org    string
	repo   string
	repo2  string
	userID string
}

func newWorld(t *testing.T) world {
	t.Helper()
	ctx := context.Background()
	w := world{pool: testenv.Postgres(t)}
	err := w.pool.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id::text`, unique("u")+"@example.com").Scan(&w.userID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.pool.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ('o', $1) RETURNING id::text`, unique("org-")).Scan(&w.org); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*string{&w.repo, &w.repo2} {
		if err := w.pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id::text`, w.org, unique("a/r")).Scan(r); err != nil {
			t.Fatal(err)
		}
	}
	// Leave nothing behind: ResealAll works on every row of the database.
	t.Cleanup(func() { _, _ = w.pool.Exec(context.Background(), `DELETE FROM organizations WHERE id = $1`, w.org) })
	return w
}

func (w world) create(t *testing.T, box *secretbox.Box, repoID, key, value string) secrets.Secret {
	t.Helper()
	s, err := secrets.Create(context.Background(), w.pool, box, secrets.CreateInput{
		OrgID: w.org, RepoID: repoID, Key: key, Value: value, Persist: true, Actor: secrets.Actor{UserID: w.userID},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResolvePrecedence(t *testing.T) {
	ctx := context.Background()
	box := newBox(t, "k1")
	w := newWorld(t)
	w.create(t, box, "", "SHARED", "org-value")
	w.create(t, box, "", "ORG_ONLY", "o")
	w.create(t, box, w.repo, "SHARED", "repo-value")
	w.create(t, box, w.repo, "REPO_ONLY", "r")
	w.create(t, box, w.repo2, "OTHER_REPO", "x")

	env, err := secrets.Resolve(ctx, w.pool, box, w.org, w.repo)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"SHARED": "repo-value", "ORG_ONLY": "o", "REPO_ONLY": "r"}
	if fmt.Sprint(env) != fmt.Sprint(want) {
		t.Fatalf("repo session env %v, want %v", env, want)
	}
	env, err = secrets.Resolve(ctx, w.pool, box, w.org, "")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(env) != fmt.Sprint(map[string]string{"SHARED": "org-value", "ORG_ONLY": "o"}) {
		t.Fatalf("org session env %v", env)
	}
	// Another org's id resolves to nothing.
	other := newWorld(t)
	if env, err := secrets.Resolve(ctx, w.pool, box, other.org, w.repo); err != nil || len(env) != 0 {
		t.Fatalf("other org: %v %v", env, err)
	}
	if _, err := secrets.Resolve(ctx, w.pool, nil, w.org, ""); !errors.Is(err, secrets.ErrNoEncryptionKeys) {
		t.Fatalf("nil box: %v", err)
	}
}

// A ciphertext copied into another row (another key, scope or org) does not
// open there, and the error names the secret but not the value.
func TestMovedCiphertextFailsToDecrypt(t *testing.T) {
	ctx := context.Background()
	box := newBox(t, "k1")
	const secretValue = "sk-live-DO-NOT-LEAK-42"
	for _, tc := range []struct {
		name   string
		target func(w, other world) secrets.Secret
		org    func(w, other world) string
		repo   func(w world) string
	}{
		{"another key", func(w, _ world) secrets.Secret { return w.create(t, box, "", "VICTIM", "harmless") },
			func(w, _ world) string { return w.org }, func(world) string { return "" }},
		{"another scope", func(w, _ world) secrets.Secret { return w.create(t, box, w.repo, "SOURCE", "harmless") },
			func(w, _ world) string { return w.org }, func(w world) string { return w.repo }},
		{"another org", func(_, o world) secrets.Secret { return o.create(t, box, "", "SOURCE", "harmless") },
			func(_, o world) string { return o.org }, func(world) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, other := newWorld(t), newWorld(t)
			src := w.create(t, box, "", "SOURCE", secretValue)
			dst := tc.target(w, other)
			if _, err := w.pool.Exec(ctx, `UPDATE secrets SET encrypted_value = (SELECT encrypted_value FROM secrets WHERE id = $1) WHERE id = $2`,
				src.ID, dst.ID); err != nil {
				t.Fatal(err)
			}
			env, err := secrets.Resolve(ctx, w.pool, box, tc.org(w, other), tc.repo(w))
			var de *secrets.DecryptError
			if !errors.As(err, &de) || env != nil {
				t.Fatalf("Resolve = %v, %v; want a DecryptError", env, err)
			}
			if de.Key != dst.Key || de.SecretID != dst.ID || !errors.Is(err, secretbox.ErrUndecryptable) {
				t.Fatalf("error names %+v, want %s/%s", de, dst.Key, dst.ID)
			}
			if msg := err.Error(); !strings.Contains(msg, `"`+dst.Key+`"`) || strings.Contains(msg, secretValue) || strings.Contains(msg, "harmless") {
				t.Fatalf("error message %q must name the key and not the value", msg)
			}
		})
	}
}

func TestResealAll(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	oldBox := newBox(t, "old")
	values := map[string]string{}
	for i := range 7 {
		k := fmt.Sprintf("KEY_%d", i)
		values[k] = "value-" + k
		repo := ""
		if i%2 == 1 {
			repo = w.repo
		}
		w.create(t, oldBox, repo, k, values[k])
	}
	broken := w.create(t, oldBox, "", "BROKEN", "b")
	if _, err := w.pool.Exec(ctx, `UPDATE secrets SET encrypted_value = 'v1.old.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' WHERE id = $1`, broken.ID); err != nil {
		t.Fatal(err)
	}

	// Rotation: new first (seals), old second (still opens).
	rotated := newBox(t, "new", "old")
	res, err := secrets.ResealAllBatches(ctx, w.pool, rotated, 3)
	var de *secrets.DecryptError
	if !errors.As(err, &de) || de.Key != "BROKEN" || de.SecretID != broken.ID || strings.Contains(err.Error(), "value-") {
		t.Fatalf("reseal error %v, want one naming BROKEN", err)
	}
	var ours, oldLeft int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE encrypted_value LIKE 'v1.new.%'),
		count(*) FILTER (WHERE encrypted_value LIKE 'v1.old.%') FROM secrets WHERE org_id = $1`, w.org).Scan(&ours, &oldLeft); err != nil {
		t.Fatal(err)
	}
	if ours != 7 || oldLeft != 1 || res.Resealed != 7 || res.Failed != 1 {
		t.Fatalf("resealed %d (ours %d), old left %d, failed %d", res.Resealed, ours, oldLeft, res.Failed)
	}
	// Fix the broken row; then only the new key is needed.
	if _, err := w.pool.Exec(ctx, `DELETE FROM secrets WHERE id = $1`, broken.ID); err != nil {
		t.Fatal(err)
	}
	newOnly := newBox(t, "new")
	for _, repo := range []string{"", w.repo} {
		env, err := secrets.Resolve(ctx, w.pool, newOnly, w.org, repo)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range env {
			if values[k] != v {
				t.Fatalf("%s = %q after reseal", k, v)
			}
		}
	}
	// The old box alone can no longer open them; a second run has nothing to do.
	if _, err := secrets.Resolve(ctx, w.pool, oldBox, w.org, ""); err == nil {
		t.Fatal("the old key alone still opens resealed values")
	}
	res, err = secrets.ResealAll(ctx, w.pool, rotated)
	if err != nil || res.Resealed != 0 {
		t.Fatalf("second reseal %+v %v", res, err)
	}
}

func TestImportIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	box := newBox(t, "k1")
	w := newWorld(t)
	count := func() int {
		var n int
		_ = w.pool.QueryRow(ctx, `SELECT count(*) FROM secrets WHERE org_id = $1`, w.org).Scan(&n)
		return n
	}
	_, err := secrets.Import(ctx, w.pool, box, secrets.ImportInput{OrgID: w.org, Text: "A=1\nB=2\nA=3"})
	var pe *secrets.ImportProblemsError
	if !errors.As(err, &pe) || len(pe.Problems) != 1 || pe.Problems[0].Line != 3 || count() != 0 {
		t.Fatalf("duplicate import: %v, %d rows", err, count())
	}
	// A bundle of another org fails after parsing: still nothing written.
	other := newWorld(t)
	b, err := secrets.CreateBundle(ctx, other.pool, other.org, secrets.BundleInput{Name: new("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Import(ctx, w.pool, box, secrets.ImportInput{OrgID: w.org, Text: "A=1", BundleID: b.ID}); !errors.Is(err, secrets.ErrBundleNotFound) || count() != 0 {
		t.Fatalf("foreign bundle: %v, %d rows", err, count())
	}
	// A repo deleted before the import.
	if _, err := secrets.Import(ctx, w.pool, box, secrets.ImportInput{OrgID: w.org, Text: "A=1", RepoID: other.repo}); !errors.Is(err, secrets.ErrRepoNotFound) || count() != 0 {
		t.Fatalf("foreign repo: %v, %d rows", err, count())
	}
	res, err := secrets.Import(ctx, w.pool, box, secrets.ImportInput{OrgID: w.org, Text: "A=1\nB=2"})
	if err != nil || res.Created != 2 || count() != 2 {
		t.Fatalf("import %+v %v", res, err)
	}
}

func TestValidateTargetPath(t *testing.T) {
	for p, ok := range map[string]bool{
		".env": true, "apps/web/.env.local": true, "a..b": true, "x/y/z.env": true,
		"": false, "/abs": false, "../x": false, "a/../b": false, "./x": false, "a//b": false, "a/": false,
		"D:x": false, `a\b`: false, "~/x": false, "a\tb": false, strings.Repeat("a", 256): false,
	} {
		if err := secrets.ValidateTargetPath("target_path", p); (err == nil) != ok {
			t.Errorf("%q: %v", p, err)
		}
	}
}

func TestEnvFilesHonourEffectivePersist(t *testing.T) {
	ctx := context.Background()
	box := newBox(t, "k1")
	w := newWorld(t)
	b, err := secrets.CreateBundle(ctx, w.pool, w.org, secrets.BundleInput{Name: new("web"), TargetPath: new("apps/web/.env")})
	if err != nil {
		t.Fatal(err)
	}
	other, err := secrets.CreateBundle(ctx, w.pool, w.org, secrets.BundleInput{Name: new("api"), TargetPath: new("apps/api/.env")})
	if err != nil {
		t.Fatal(err)
	}
	orgToken := w.create(t, box, "", "TOKEN", "org")
	plain := w.create(t, box, "", "PLAIN", "p")
	for _, s := range []secrets.Secret{orgToken, plain} {
		if err := secrets.AddToBundle(ctx, w.pool, w.org, b.ID, s.ID, secrets.Actor{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := secrets.AddToBundle(ctx, w.pool, w.org, other.ID, plain.ID, secrets.Actor{}); err != nil {
		t.Fatal(err)
	}
	// The repo overrides TOKEN with a value that must stay off disk; the
	// override is not in the bundle, but it is what the file would get.
	if _, _, err := secrets.Upsert(ctx, w.pool, box, secrets.UpsertInput{OrgID: w.org, RepoID: w.repo, Key: "TOKEN", Value: "repo", Persist: new(false)}); err != nil {
		t.Fatal(err)
	}
	files, err := secrets.EnvFiles(ctx, w.pool, w.org, w.repo)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(files) != fmt.Sprint([]secrets.EnvFileSpec{
		{WorkspacePath: ".", Path: "apps/api/.env", Format: "env", Mode: "secret", Keys: []string{"PLAIN"}},
		{WorkspacePath: ".", Path: "apps/web/.env", Format: "env", Mode: "secret", Keys: []string{"PLAIN"}},
	}) {
		t.Fatalf("repo session files %+v", files)
	}
	files, err = secrets.EnvFiles(ctx, w.pool, w.org, w.repo2)
	if err != nil || len(files) != 2 || fmt.Sprint(files[1].Keys) != "[PLAIN TOKEN]" {
		t.Fatalf("other repo files %+v %v", files, err)
	}
}
