package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/dotenv"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
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
		br := importBatch(ctx, secretsdb.New(tx), in, entries, sealed)
		// The first error stops the import; the entries after it are not
		// looked at (the transaction is aborted).
		var failed error
		br.QueryRow(func(i int, created bool, err error) {
			switch {
			case failed != nil:
			case errors.Is(err, pgx.ErrNoRows):
				res.SkippedKeys = append(res.SkippedKeys, entries[i].Key)
			case err != nil:
				failed = err
			case created:
				res.CreatedKeys = append(res.CreatedKeys, entries[i].Key)
			default:
				res.UpdatedKeys = append(res.UpdatedKeys, entries[i].Key)
			}
		})
		if failed != nil {
			if code, _ := pgCode(failed); code == "23503" {
				return ErrRepoNotFound
			}
			return fmt.Errorf("import secret: %w", failed)
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("import secrets: %w", err)
		}
		keys := make([]string, len(entries))
		for i, e := range entries {
			keys[i] = e.Key
		}
		if in.BundleID != "" {
			if err := secretsdb.New(tx).AddKeysToBundle(ctx, secretsdb.AddKeysToBundleParams{OrgID: in.OrgID, BundleID: in.BundleID,
				Keys: keys, RepoID: nullable(in.RepoID)}); err != nil {
				return fmt.Errorf("add imported secrets to bundle: %w", err)
			}
			if err := secretsdb.New(tx).TouchBundle(ctx, in.BundleID); err != nil {
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

// importResults are the answers of an import batch, one per entry: whether
// the row was inserted, or pgx.ErrNoRows for a key skipped.
type importResults interface {
	QueryRow(func(i int, created bool, err error))
	Close() error
}

// importParams is the shape every import query takes.
type importParams = struct {
	OrgID          string
	RepoID         *string
	Key            string
	EncryptedValue string
	CreatedBy      *string
}

// importBatch sends one insert per entry, on the scope's unique index
// (org-wide or the repo's), skipping or overwriting existing keys.
func importBatch(ctx context.Context, q *secretsdb.Queries, in ImportInput, entries []dotenv.Entry, sealed []string) importResults {
	args := make([]importParams, len(entries))
	for i, e := range entries {
		args[i] = importParams{OrgID: in.OrgID, RepoID: nullable(in.RepoID), Key: e.Key, EncryptedValue: sealed[i],
			CreatedBy: nullable(in.Actor.UserID)}
	}
	switch {
	case in.RepoID == "" && !in.Overwrite:
		return q.ImportOrgSecretSkip(ctx, convertAll[secretsdb.ImportOrgSecretSkipParams](args))
	case in.RepoID == "":
		return q.ImportOrgSecretOverwrite(ctx, convertAll[secretsdb.ImportOrgSecretOverwriteParams](args))
	case !in.Overwrite:
		return q.ImportRepoSecretSkip(ctx, convertAll[secretsdb.ImportRepoSecretSkipParams](args))
	default:
		return q.ImportRepoSecretOverwrite(ctx, convertAll[secretsdb.ImportRepoSecretOverwriteParams](args))
	}
}

func convertAll[P ~struct {
	OrgID          string
	RepoID         *string
	Key            string
	EncryptedValue string
	CreatedBy      *string
}](args []importParams) []P {
	out := make([]P, len(args))
	for i, a := range args {
		out[i] = P(a)
	}
	return out
}
