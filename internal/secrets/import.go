package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/dotenv"
	"github.com/proliferate/proliferate/internal/secretbox"
)

// LineProblem is a line of imported .env text that cannot be used. It has the
// shape of a field error (field, problem) plus the line; it never quotes a
// value or the text of the line.
type LineProblem struct {
	Field   string `json:"field"`
	Line    int    `json:"line"`
	Key     string `json:"key,omitempty"`
	Problem string `json:"problem"`
}

// ImportProblemsError is an import refused because of its text; nothing was
// written.
type ImportProblemsError struct {
	Problems []LineProblem
}

func (e *ImportProblemsError) Error() string {
	return fmt.Sprintf("secrets import: %d problem(s) in text", len(e.Problems))
}

// ImportInput is .env text to store as secrets of one scope.
type ImportInput struct {
	OrgID  string
	RepoID string // "" for org-wide
	// BundleID, when set, receives every imported key (created, updated and
	// skipped alike: the text describes what the bundle holds).
	BundleID string
	Text     string
	// Overwrite replaces the values of keys that exist in the scope; without
	// it they are skipped.
	Overwrite bool
	Actor     Actor
}

// ImportResult says what happened to each key.
type ImportResult struct {
	Created     int      `json:"created"`
	Updated     int      `json:"updated"`
	Skipped     int      `json:"skipped"`
	CreatedKeys []string `json:"created_keys"`
	UpdatedKeys []string `json:"updated_keys"`
	SkippedKeys []string `json:"skipped_keys" doc:"keys that exist in the scope and were left unchanged (overwrite=false)"`
}

// CheckImportText parses and checks .env text without writing: the entries,
// or every problem found. Any problem refuses the whole import: syntax errors,
// invalid or reserved keys, duplicate keys (rejected, not last-wins), values
// over the size limit, more than MaxImportEntries entries, no entries.
func CheckImportText(text string) ([]dotenv.Entry, []LineProblem) {
	entries, parseProblems := dotenv.Parse(text)
	var problems []LineProblem
	for _, p := range parseProblems {
		problems = append(problems, LineProblem{Field: "text", Line: p.Line, Key: p.Key, Problem: p.Message})
	}
	for _, e := range entries {
		if err := ValidateKey("key", e.Key); err != nil {
			problems = append(problems, LineProblem{Field: "text", Line: e.Line, Key: e.Key, Problem: "key " + err.(*InvalidError).Problem})
			continue
		}
		if err := ValidateValue("value", e.Value); err != nil {
			problems = append(problems, LineProblem{Field: "text", Line: e.Line, Key: e.Key, Problem: "value of " + e.Key + " " + err.(*InvalidError).Problem})
		}
	}
	if len(entries) > MaxImportEntries {
		problems = append(problems, LineProblem{Field: "text", Line: entries[MaxImportEntries].Line,
			Problem: fmt.Sprintf("more than %d entries; split the import", MaxImportEntries)})
	}
	if len(entries) == 0 && len(problems) == 0 {
		problems = append(problems, LineProblem{Field: "text", Line: 1, Problem: "contains no KEY=VALUE lines"})
	}
	slices.SortStableFunc(problems, func(a, b LineProblem) int { return a.Line - b.Line })
	return entries, problems
}

// Import stores the secrets of .env text in one transaction: every entry or
// none. Problems in the text are an *ImportProblemsError; a repo or bundle not
// of the org is ErrRepoNotFound or ErrBundleNotFound.
func Import(ctx context.Context, db DB, box *secretbox.Box, in ImportInput) (ImportResult, error) {
	entries, problems := CheckImportText(in.Text)
	if len(problems) > 0 {
		return ImportResult{}, &ImportProblemsError{Problems: problems}
	}
	sealed := make([]string, len(entries))
	for i, e := range entries {
		s, err := seal(box, in.OrgID, in.RepoID, e.Key, e.Value)
		if err != nil {
			return ImportResult{}, err
		}
		sealed[i] = s
	}
	conflict := `ON CONFLICT (org_id, key) WHERE repo_id IS NULL`
	if in.RepoID != "" {
		conflict = `ON CONFLICT (org_id, repo_id, key) WHERE repo_id IS NOT NULL`
	}
	insert := `INSERT INTO secrets (org_id, repo_id, key, encrypted_value, created_by) VALUES ($1, $2, $3, $4, $5) ` + conflict
	if in.Overwrite {
		insert += ` DO UPDATE SET encrypted_value = EXCLUDED.encrypted_value, updated_at = now() RETURNING xmax = 0`
	} else {
		insert += ` DO NOTHING RETURNING true`
	}
	res := ImportResult{CreatedKeys: []string{}, UpdatedKeys: []string{}, SkippedKeys: []string{}}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if in.RepoID != "" {
			if err := repoInOrg(ctx, tx, in.OrgID, in.RepoID); err != nil {
				return err
			}
		}
		if in.BundleID != "" {
			if err := bundleInOrg(ctx, tx, in.OrgID, in.BundleID, true); err != nil {
				return err
			}
		}
		batch := &pgx.Batch{}
		for i, e := range entries {
			batch.Queue(insert, in.OrgID, nullable(in.RepoID), e.Key, sealed[i], nullable(in.Actor.UserID))
		}
		br := tx.SendBatch(ctx, batch)
		for _, e := range entries {
			var created bool
			err := br.QueryRow().Scan(&created)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				res.SkippedKeys = append(res.SkippedKeys, e.Key)
			case err != nil:
				_ = br.Close()
				if code, _ := pgCode(err); code == "23503" {
					return ErrRepoNotFound
				}
				return fmt.Errorf("import secret: %w", err)
			case created:
				res.CreatedKeys = append(res.CreatedKeys, e.Key)
			default:
				res.UpdatedKeys = append(res.UpdatedKeys, e.Key)
			}
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("import secrets: %w", err)
		}
		keys := make([]string, len(entries))
		for i, e := range entries {
			keys[i] = e.Key
		}
		if in.BundleID != "" {
			if _, err := tx.Exec(ctx, `INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id)
				SELECT $1, $2, id FROM secrets WHERE org_id = $1 AND key = ANY($3) AND repo_id IS NOT DISTINCT FROM $4
				ON CONFLICT DO NOTHING`, in.OrgID, in.BundleID, keys, nullable(in.RepoID)); err != nil {
				return fmt.Errorf("add imported secrets to bundle: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE secret_bundles SET updated_at = now() WHERE id = $1`, in.BundleID); err != nil {
				return fmt.Errorf("touch bundle: %w", err)
			}
		}
		return audit(ctx, tx, in.OrgID, in.Actor, "secret.import", "secret", "", map[string]any{
			"repo_id": nullable(in.RepoID), "bundle_id": nullable(in.BundleID), "overwrite": in.Overwrite,
			"created": res.CreatedKeys, "updated": res.UpdatedKeys, "skipped": res.SkippedKeys})
	})
	if err != nil {
		return ImportResult{}, err
	}
	res.Created, res.Updated, res.Skipped = len(res.CreatedKeys), len(res.UpdatedKeys), len(res.SkippedKeys)
	return res, nil
}
