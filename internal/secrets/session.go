package secrets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/repos/reposdb"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secretbox"
)

// SessionRepo is one repository of a session's configuration and where it
// is checked out, relative to the workspace root.
type SessionRepo struct {
	RepoID        string
	WorkspacePath string
}

// SessionRepos lists the repositories of a configuration of orgID in
// order ("" or an unknown configuration: none, a scratch session).
func SessionRepos(ctx context.Context, q DB, orgID, configurationID string) ([]SessionRepo, error) {
	if configurationID == "" {
		return nil, nil
	}
	rows, err := reposdb.New(q).ConfigurationRepoPaths(ctx, reposdb.ConfigurationRepoPathsParams{ConfigurationID: configurationID,
		OrgID: orgID})
	if err != nil {
		return nil, fmt.Errorf("session repos: %w", err)
	}
	out := make([]SessionRepo, len(rows))
	for i, r := range rows {
		out[i] = SessionRepo{RepoID: r.RepoID, WorkspacePath: r.WorkspacePath}
	}
	return out, nil
}

// SessionEnv is what a session's sandbox gets at boot: the environment
// variables and the bundles' env files, with their values. It is for the
// gateway building a sandbox, never for an API response or a log.
type SessionEnv struct {
	Vars  map[string]string
	Files []sandbox.EnvFile
}

// ForSession resolves the environment of a session of orgID on repos (in
// configuration order; none for a scratch session), at every boot, so a
// rotated or deleted secret applies at the next boot:
//
//   - Vars: every org-wide secret, overridden by the secrets of the
//     session's repos (Resolve per repo; when two repos have a secret of
//     the same key, the first repo's wins).
//   - Files: for each repo, one env file per bundle with a target path
//     (EnvFiles: keys whose effective secret has persist=false are never
//     written), at the target path inside the repo's workspace path, with
//     that repo's effective values; a scratch session gets the org-wide
//     bundles at the workspace root. A path two repos would write is
//     written once, for the first.
//
// A secret that does not decrypt fails the call (*DecryptError, naming the
// secret, not its value).
func ForSession(ctx context.Context, db DB, box *secretbox.Box, orgID string, repos []SessionRepo) (SessionEnv, error) {
	if box == nil {
		return SessionEnv{}, ErrNoEncryptionKeys
	}
	base, err := Resolve(ctx, db, box, orgID, "")
	if err != nil {
		return SessionEnv{}, err
	}
	out := SessionEnv{Vars: maps.Clone(base), Files: []sandbox.EnvFile{}}
	scopes := repos
	if len(scopes) == 0 {
		scopes = []SessionRepo{{WorkspacePath: "."}}
	}
	perRepo := make([]map[string]string, len(scopes))
	for i, r := range scopes {
		perRepo[i] = base
		if r.RepoID != "" {
			if perRepo[i], err = Resolve(ctx, db, box, orgID, r.RepoID); err != nil {
				return SessionEnv{}, err
			}
		}
	}
	// Later repos first, so the first repo's values win.
	for i := len(perRepo) - 1; i >= 0; i-- {
		maps.Copy(out.Vars, perRepo[i])
	}
	seen := map[string]bool{}
	for i, r := range scopes {
		specs, err := EnvFiles(ctx, db, orgID, r.RepoID)
		if err != nil {
			return SessionEnv{}, err
		}
		for _, s := range specs {
			p := path.Join(r.WorkspacePath, s.Path)
			if err := sandbox.CheckEnvFilePath(p); err != nil {
				return SessionEnv{}, fmt.Errorf("env file of bundle target %q in %q: %w", s.Path, r.WorkspacePath, err)
			}
			if seen[p] {
				continue
			}
			seen[p] = true
			f := sandbox.EnvFile{Path: p}
			for _, k := range s.Keys {
				if v, ok := perRepo[i][k]; ok {
					f.Vars = append(f.Vars, sandbox.EnvVar{Key: k, Value: v})
				}
			}
			if len(f.Vars) > 0 {
				out.Files = append(out.Files, f)
			}
		}
	}
	return out, nil
}

// SubmittedSecret is a value a person submitted for the agent
// (request_env_variables) and asked to keep as a secret: org-wide, or of
// RepoID.
type SubmittedSecret struct {
	Key, Value, RepoID string
}

// SaveResult says what became of one SubmittedSecret.
type SaveResult struct {
	Key string `json:"key"`
	// Persisted: stored now (encrypted).
	Persisted bool `json:"persisted"`
	// AlreadyExisted: a secret of this key already exists in that scope; it
	// was left as it is (rotate it through the secrets API).
	AlreadyExisted bool `json:"already_existed"`
}

// SaveSubmitted stores submitted values as secrets of orgID in one
// transaction (all or nothing, except keys that already exist in their
// scope, which are reported and left alone).
// The caller validated keys, values and repos; a repo not of the org is
// ErrRepoNotFound and nothing is stored.
func SaveSubmitted(ctx context.Context, db DB, box *secretbox.Box, orgID string, a Actor, items []SubmittedSecret) ([]SaveResult, error) {
	out := make([]SaveResult, 0, len(items))
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		out = out[:0]
		for _, it := range items {
			_, err := Create(ctx, tx, box, CreateInput{OrgID: orgID, RepoID: it.RepoID, Key: it.Key, Value: it.Value,
				Description: "Submitted for an agent's request", Persist: true, Actor: a})
			switch {
			case errors.Is(err, ErrExists):
				out = append(out, SaveResult{Key: it.Key, AlreadyExisted: true})
			case err != nil:
				return err
			default:
				out = append(out, SaveResult{Key: it.Key, Persisted: true})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
