package repos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the repos and configurations store.
type Store struct {
	Pool *pgxpool.Pool
	Now  func() time.Time
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Lock order. Every transaction that locks both takes configuration rows
// first (by id), repos after, so concurrent edits never wait on each other in
// a cycle: configuration edits lock their configuration, then share-lock the
// repos they reference; a repo delete locks the configurations holding the
// repo, then the repo.

// errRetry asks tx to run the transaction again from the start.
var errRetry = errors.New("retry transaction")

// tx runs fn in a transaction. It runs it again (a few times) when fn asks for
// it or when Postgres aborts it for a deadlock or a serialization failure,
// which the lock order makes rare but which other features' transactions on
// the same rows can still cause.
func (s *Store) tx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	var err error
	for range 5 {
		err = pgx.BeginTxFunc(ctx, s.Pool, opts, fn)
		var pg *pgconn.PgError
		retry := errors.Is(err, errRetry) || (errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001"))
		if !retry {
			return err
		}
	}
	return err
}

func pgCode(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

func jsonArg(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// --- repos -------------------------------------------------------------------

const repoCols = `id::text, org_id::text, github_repo_id, github_repo_name, github_url, default_branch, is_private, is_orphaned,
	service_commands, service_commands_updated_at, service_commands_updated_by::text, added_by::text, created_at, updated_at`

func scanRepo(row pgx.Row) (Repo, error) {
	var r Repo
	err := row.Scan(&r.ID, &r.OrgID, &r.GitHubRepoID, &r.GitHubRepoName, &r.GitHubURL, &r.DefaultBranch, &r.IsPrivate, &r.IsOrphaned,
		&r.ServiceCommands, &r.ServiceCommandsUpdatedAt, &r.ServiceCommandsUpdatedBy, &r.AddedBy, &r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if r.ServiceCommands == nil {
		r.ServiceCommands = []RepoServiceCommand{}
	}
	return r, err
}

// RepoInput creates a repo. Validated by the caller (see Check* functions).
type RepoInput struct {
	Name          string
	URL           string // "" derives https://github.com/<name>
	DefaultBranch string // "" is main
	GitHubRepoID  *string
	IsPrivate     bool
	// CreateConfiguration also creates the repo's single-repo configuration
	// (the original's createRepoWithConfiguration).
	CreateConfiguration bool
}

// CreateRepo adds a repo to the organization, and its single-repo
// configuration when asked, in one transaction. A repo with the same name
// (case-insensitively) or GitHub id is ErrRepoExists.
func (s *Store) CreateRepo(ctx context.Context, orgID, userID string, in RepoInput) (Repo, *Configuration, error) {
	if in.URL == "" {
		in.URL = "https://github.com/" + in.Name
	}
	if in.DefaultBranch == "" {
		in.DefaultBranch = "main"
	}
	var repo Repo
	var cfg *Configuration
	now := s.Now()
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		repo, err = scanRepo(tx.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_id, github_repo_name, github_url,
				default_branch, is_private, added_by, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING `+repoCols,
			orgID, in.GitHubRepoID, in.Name, in.URL, in.DefaultBranch, in.IsPrivate, nullUUID(userID), now))
		if pgCode(err) == "23505" {
			return ErrRepoExists
		}
		if err != nil || !in.CreateConfiguration {
			return err
		}
		c, err := s.insertConfiguration(ctx, tx, orgID, userID, now, ConfigurationInput{
			Name: configurationName(in.Name), Repos: []RepoRef{{RepoID: repo.ID, WorkspacePath: "."}},
		}, []string{"."})
		cfg = &c
		return err
	})
	return repo, cfg, err
}

func configurationName(repoName string) string {
	name := RepoShortName(repoName)
	if r := []rune(name); len(r) > NameMax {
		name = string(r[:NameMax])
	}
	return name
}

func nullUUID(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// EscapeLike makes s match literally inside a LIKE pattern (escape "\").
func EscapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// ListRepos returns up to limit+1 repos of the organization after the cursor
// (created_at DESC, id DESC), whose name contains q case-insensitively (q is
// literal: "%" and "_" match themselves).
func (s *Store) ListRepos(ctx context.Context, orgID, q string, limit int, afterAt time.Time, afterID string) ([]Repo, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+repoCols+` FROM repos
		WHERE org_id = $1 AND ($2::text = '' OR github_repo_name ILIKE '%' || $2 || '%' ESCAPE '\')
		  AND (created_at, id) < ($3, $4::uuid)
		ORDER BY created_at DESC, id DESC LIMIT $5`, orgID, EscapeLike(q), afterAt, afterID, limit+1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Repo{}
	for rows.Next() {
		r, err := scanRepo(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// GetRepo returns a repo of the organization.
func (s *Store) GetRepo(ctx context.Context, orgID, id string) (Repo, error) {
	return scanRepo(s.Pool.QueryRow(ctx, `SELECT `+repoCols+` FROM repos WHERE id = $1 AND org_id = $2`, id, orgID))
}

// RepoPatch changes a repo; nil fields are kept.
type RepoPatch struct {
	Name, URL, DefaultBranch, GitHubRepoID *string
	IsPrivate                              *bool
}

// UpdateRepo applies p to a repo of the organization.
func (s *Store) UpdateRepo(ctx context.Context, orgID, id string, p RepoPatch) (Repo, error) {
	r, err := scanRepo(s.Pool.QueryRow(ctx, `UPDATE repos SET
			github_repo_name = COALESCE($3, github_repo_name), github_url = COALESCE($4, github_url),
			default_branch = COALESCE($5, default_branch), github_repo_id = COALESCE($6, github_repo_id),
			is_private = COALESCE($7, is_private), updated_at = $8
		WHERE id = $1 AND org_id = $2 RETURNING `+repoCols,
		id, orgID, p.Name, p.URL, p.DefaultBranch, p.GitHubRepoID, p.IsPrivate, s.Now()))
	if pgCode(err) == "23505" {
		return r, ErrRepoExists
	}
	return r, err
}

// SetRepoServiceCommands replaces a repo's default commands (nil clears them).
func (s *Store) SetRepoServiceCommands(ctx context.Context, orgID, userID, id string, cmds []RepoServiceCommand) (Repo, error) {
	if cmds == nil {
		cmds = []RepoServiceCommand{}
	}
	arg, err := jsonArg(cmds)
	if err != nil {
		return Repo{}, err
	}
	now := s.Now()
	return scanRepo(s.Pool.QueryRow(ctx, `UPDATE repos SET service_commands = $3::jsonb,
			service_commands_updated_at = $4, service_commands_updated_by = $5, updated_at = $4
		WHERE id = $1 AND org_id = $2 RETURNING `+repoCols, id, orgID, arg, now, nullUUID(userID)))
}

// DeleteRepo hard-deletes a repo of the organization. As in the original,
// the repo leaves every configuration that held it (ON DELETE CASCADE); the
// original's gaps are closed here: a configuration left without repos is
// deleted with it (it could no longer start a session), and the others get a
// new repos_version, so their snapshot shows as stale. Rows of other features
// that reference the repo (secrets, repo connections) follow their own
// foreign keys.
func (s *Store) DeleteRepo(ctx context.Context, orgID, id string) (DeleteRepoResult, error) {
	var res DeleteRepoResult
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		res = DeleteRepoResult{DeletedConfigurations: []string{}, UpdatedConfigurations: []string{}}
		holding := `SELECT c.id::text FROM configurations c WHERE c.org_id = $2
			AND c.id IN (SELECT configuration_id FROM configuration_repos WHERE repo_id = $1) ORDER BY c.id`
		// The configurations holding the repo first, then the repo itself.
		locked, err := collectStrings(tx.Query(ctx, holding+` FOR UPDATE OF c`, id, orgID))
		if err != nil {
			return err
		}
		var found string
		err = tx.QueryRow(ctx, `SELECT id::text FROM repos WHERE id = $1 AND org_id = $2 FOR UPDATE`, id, orgID).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// With the repo locked nobody can add it anywhere; if somebody did
		// between the two locks, start over so their configuration is locked
		// in order too.
		cfgIDs, err := collectStrings(tx.Query(ctx, holding, id, orgID))
		if err != nil {
			return err
		}
		for _, c := range cfgIDs {
			if !slices.Contains(locked, c) {
				return errRetry
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM repos WHERE id = $1 AND org_id = $2`, id, orgID); err != nil {
			return err
		}
		if len(cfgIDs) == 0 {
			return nil
		}
		res.DeletedConfigurations, err = collectStrings(tx.Query(ctx, `DELETE FROM configurations c
			WHERE c.id = ANY($1::uuid[]) AND c.org_id = $2
			  AND NOT EXISTS (SELECT 1 FROM configuration_repos cr WHERE cr.configuration_id = c.id)
			RETURNING c.id::text`, cfgIDs, orgID))
		if err != nil {
			return err
		}
		res.UpdatedConfigurations, err = collectStrings(tx.Query(ctx, `UPDATE configurations
			SET repos_version = repos_version + 1, updated_at = $3
			WHERE id = ANY($1::uuid[]) AND org_id = $2 RETURNING id::text`, cfgIDs, orgID, s.Now()))
		return err
	})
	slices.Sort(res.DeletedConfigurations)
	slices.Sort(res.UpdatedConfigurations)
	return res, err
}

func collectStrings(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if out == nil {
		out = []string{}
	}
	return out, err
}

// --- configurations ----------------------------------------------------------

const cfgCols = `c.id::text, c.org_id::text, c.name, c.description, c.service_commands, c.service_commands_updated_at,
	c.service_commands_updated_by::text, c.env_files, c.env_files_updated_at, c.env_files_updated_by::text,
	c.snapshot_status, c.snapshot_id, c.snapshot_provider, c.snapshot_error, c.snapshot_built_at,
	c.snapshot_build_started_at, COALESCE(c.snapshot_id IS NOT NULL AND c.snapshot_repos_version < c.repos_version, false),
	c.created_by::text, c.created_at, c.updated_at`

func scanConfiguration(row pgx.Row) (Configuration, error) {
	var c Configuration
	err := row.Scan(&c.ID, &c.OrgID, &c.Name, &c.Description, &c.ServiceCommands, &c.ServiceCommandsUpdatedAt,
		&c.ServiceCommandsUpdatedBy, &c.EnvFiles, &c.EnvFilesUpdatedAt, &c.EnvFilesUpdatedBy,
		&c.SnapshotStatus, &c.SnapshotID, &c.SnapshotProvider, &c.SnapshotError, &c.SnapshotBuiltAt,
		&c.SnapshotBuildStartedAt, &c.SnapshotStale, &c.CreatedBy, &c.CreatedAt, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	if c.ServiceCommands == nil {
		c.ServiceCommands = []ServiceCommand{}
	}
	if c.EnvFiles == nil {
		c.EnvFiles = []EnvFile{}
	}
	c.Repos = []ConfigurationRepo{}
	return c, err
}

// attachRepos loads the repos of the given configurations (all of one org).
func attachRepos(ctx context.Context, q querier, orgID string, cfgs []Configuration) error {
	if len(cfgs) == 0 {
		return nil
	}
	ids := make([]string, len(cfgs))
	index := map[string]int{}
	for i, c := range cfgs {
		ids[i] = c.ID
		index[c.ID] = i
	}
	rows, err := q.Query(ctx, `SELECT cr.configuration_id::text, r.id::text, r.github_repo_name, r.github_url,
			r.default_branch, r.is_private, r.is_orphaned, cr.workspace_path, cr.position
		FROM configuration_repos cr JOIN repos r ON r.id = cr.repo_id AND r.org_id = cr.org_id
		WHERE cr.configuration_id = ANY($1::uuid[]) AND cr.org_id = $2
		ORDER BY cr.configuration_id, cr.position`, ids, orgID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var cfgID string
		var r ConfigurationRepo
		if err := rows.Scan(&cfgID, &r.RepoID, &r.GitHubRepoName, &r.GitHubURL, &r.DefaultBranch, &r.IsPrivate,
			&r.IsOrphaned, &r.WorkspacePath, &r.Position); err != nil {
			return err
		}
		i := index[cfgID]
		cfgs[i].Repos = append(cfgs[i].Repos, r)
	}
	return rows.Err()
}

func getConfiguration(ctx context.Context, q querier, orgID, id string, lock bool) (Configuration, error) {
	sql := `SELECT ` + cfgCols + ` FROM configurations c WHERE c.id = $1 AND c.org_id = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	c, err := scanConfiguration(q.QueryRow(ctx, sql, id, orgID))
	if err != nil {
		return c, err
	}
	cs := []Configuration{c}
	err = attachRepos(ctx, q, orgID, cs)
	return cs[0], err
}

// GetConfiguration returns a configuration of the organization with its repos.
func (s *Store) GetConfiguration(ctx context.Context, orgID, id string) (Configuration, error) {
	var c Configuration
	err := s.tx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		c, err = getConfiguration(ctx, tx, orgID, id, false)
		return err
	})
	return c, err
}

// ConfigurationFilter narrows a list.
type ConfigurationFilter struct {
	RepoID         string // only configurations holding this repo
	SnapshotStatus string
}

// ListConfigurations returns up to limit+1 configurations of the
// organization after the cursor (created_at DESC, id DESC), with their repos.
func (s *Store) ListConfigurations(ctx context.Context, orgID string, f ConfigurationFilter, limit int, afterAt time.Time, afterID string) ([]Configuration, error) {
	var out []Configuration
	err := s.tx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+cfgCols+` FROM configurations c
			WHERE c.org_id = $1 AND (c.created_at, c.id) < ($2, $3::uuid)
			  AND ($4::text = '' OR c.snapshot_status = $4)
			  AND ($5::text = '' OR EXISTS (SELECT 1 FROM configuration_repos cr
			                                WHERE cr.configuration_id = c.id AND cr.repo_id = $5::uuid))
			ORDER BY c.created_at DESC, c.id DESC LIMIT $6`, orgID, afterAt, afterID, f.SnapshotStatus, f.RepoID, limit+1)
		if err != nil {
			return err
		}
		out = []Configuration{}
		for rows.Next() {
			c, err := scanConfiguration(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return attachRepos(ctx, tx, orgID, out)
	})
	return out, err
}

// ConfigurationInput creates a configuration. Shapes are validated by the
// caller (Check* functions); references are checked here.
type ConfigurationInput struct {
	Name            string
	Description     string
	Repos           []RepoRef
	ServiceCommands []ServiceCommand // nil: none (the repos' defaults apply)
	EnvFiles        []EnvFile        // nil: none
}

// resolveRepos checks that every referenced repo belongs to the organization
// (share-locking them so they cannot be deleted before the transaction
// commits) and returns the workspace paths, derived where not given and
// checked not to overlap.
func resolveRepos(ctx context.Context, tx pgx.Tx, orgID string, refs []RepoRef) ([]string, error) {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.RepoID
	}
	rows, err := tx.Query(ctx, `SELECT id::text, github_repo_name FROM repos
		WHERE org_id = $1 AND id = ANY($2::uuid[]) ORDER BY id FOR KEY SHARE`, orgID, ids)
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			rows.Close()
			return nil, err
		}
		names[id] = name
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var fes []FieldError
	ordered := make([]string, len(refs))
	for i, r := range refs {
		name, ok := names[r.RepoID]
		if !ok {
			fes = append(fes, FieldError{fmt.Sprintf("repos[%d].repo_id", i), "no such repo in this organization"})
		}
		ordered[i] = name
	}
	if fes != nil {
		return nil, &ValidationError{fes}
	}
	paths := DeriveWorkspacePaths(refs, ordered)
	if fes := CheckWorkspaces("repos", paths); fes != nil {
		return nil, &ValidationError{fes}
	}
	return paths, nil
}

func insertRepoRows(ctx context.Context, tx pgx.Tx, orgID, cfgID string, refs []RepoRef, paths []string, now time.Time) error {
	ids := make([]string, len(refs))
	positions := make([]int32, len(refs))
	for i, r := range refs {
		ids[i] = r.RepoID
		positions[i] = int32(i)
	}
	_, err := tx.Exec(ctx, `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position, created_at)
		SELECT $1, r, $2, p, pos, $6 FROM unnest($3::uuid[], $4::text[], $5::int[]) AS t(r, p, pos)`,
		cfgID, orgID, ids, paths, positions, now)
	return err
}

func (s *Store) insertConfiguration(ctx context.Context, tx pgx.Tx, orgID, userID string, now time.Time, in ConfigurationInput, paths []string) (Configuration, error) {
	var cmdAt, envAt *time.Time
	var cmdBy, envBy *string
	if in.ServiceCommands != nil {
		cmdAt, cmdBy = &now, nullUUID(userID)
	} else {
		in.ServiceCommands = []ServiceCommand{}
	}
	if in.EnvFiles != nil {
		envAt, envBy = &now, nullUUID(userID)
	} else {
		in.EnvFiles = []EnvFile{}
	}
	cmds, err := jsonArg(in.ServiceCommands)
	if err != nil {
		return Configuration{}, err
	}
	envs, err := jsonArg(in.EnvFiles)
	if err != nil {
		return Configuration{}, err
	}
	var id string
	err = tx.QueryRow(ctx, `INSERT INTO configurations (org_id, name, description, service_commands,
			service_commands_updated_at, service_commands_updated_by, env_files, env_files_updated_at,
			env_files_updated_by, created_by, created_at, updated_at)
		VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::jsonb, $8, $9, $10, $11, $11) RETURNING id::text`,
		orgID, in.Name, in.Description, cmds, cmdAt, cmdBy, envs, envAt, envBy, nullUUID(userID), now).Scan(&id)
	if err != nil {
		return Configuration{}, err
	}
	if err := insertRepoRows(ctx, tx, orgID, id, in.Repos, paths, now); err != nil {
		return Configuration{}, err
	}
	return getConfiguration(ctx, tx, orgID, id, false)
}

// CreateConfiguration creates a configuration of the organization. Repos of
// another organization (or none at all) are a ValidationError naming the
// entry; so are overlapping workspace paths and commands or env files naming
// a workspace the configuration does not have. Its snapshot starts as "none":
// the builder picks it up.
func (s *Store) CreateConfiguration(ctx context.Context, orgID, userID string, in ConfigurationInput) (Configuration, error) {
	var c Configuration
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		paths, err := resolveRepos(ctx, tx, orgID, in.Repos)
		if err != nil {
			return err
		}
		if fes := checkWorkspaceRefs(paths, in.ServiceCommands, "service_commands", in.EnvFiles, "env_files"); fes != nil {
			return &ValidationError{fes}
		}
		c, err = s.insertConfiguration(ctx, tx, orgID, userID, s.Now(), in, paths)
		return err
	})
	return c, err
}

// ConfigurationPatch changes a configuration; nil fields are kept.
type ConfigurationPatch struct {
	Name, Description *string
	EnvFiles          *[]EnvFile
}

func workspacePaths(c Configuration) []string {
	out := make([]string, len(c.Repos))
	for i, r := range c.Repos {
		out[i] = r.WorkspacePath
	}
	return out
}

// UpdateConfiguration applies p to a configuration of the organization.
func (s *Store) UpdateConfiguration(ctx context.Context, orgID, userID, id string, p ConfigurationPatch) (Configuration, error) {
	var c Configuration
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		cur, err := getConfiguration(ctx, tx, orgID, id, true)
		if err != nil {
			return err
		}
		now := s.Now()
		var envs *string
		var envAt *time.Time
		if p.EnvFiles != nil {
			if fes := checkWorkspaceRefs(workspacePaths(cur), nil, "", *p.EnvFiles, "env_files"); fes != nil {
				return &ValidationError{fes}
			}
			files := *p.EnvFiles
			if files == nil {
				files = []EnvFile{}
			}
			arg, err := jsonArg(files)
			if err != nil {
				return err
			}
			envs, envAt = &arg, &now
		}
		_, err = tx.Exec(ctx, `UPDATE configurations SET name = COALESCE($3, name), description = COALESCE($4, description),
				env_files = COALESCE($5::jsonb, env_files),
				env_files_updated_at = CASE WHEN $5::jsonb IS NULL THEN env_files_updated_at ELSE $6 END,
				env_files_updated_by = CASE WHEN $5::jsonb IS NULL THEN env_files_updated_by ELSE $7 END,
				updated_at = $8
			WHERE id = $1 AND org_id = $2`, id, orgID, p.Name, p.Description, envs, envAt, nullUUID(userID), now)
		if err != nil {
			return err
		}
		c, err = getConfiguration(ctx, tx, orgID, id, false)
		return err
	})
	return c, err
}

// SetConfigurationServiceCommands replaces a configuration's own commands;
// nil clears them (the repos' defaults apply again).
func (s *Store) SetConfigurationServiceCommands(ctx context.Context, orgID, userID, id string, cmds []ServiceCommand) (Configuration, error) {
	var c Configuration
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		cur, err := getConfiguration(ctx, tx, orgID, id, true)
		if err != nil {
			return err
		}
		if fes := checkWorkspaceRefs(workspacePaths(cur), cmds, "service_commands", nil, ""); fes != nil {
			return &ValidationError{fes}
		}
		if cmds == nil {
			cmds = []ServiceCommand{}
		}
		arg, err := jsonArg(cmds)
		if err != nil {
			return err
		}
		now := s.Now()
		_, err = tx.Exec(ctx, `UPDATE configurations SET service_commands = $3::jsonb, service_commands_updated_at = $4,
				service_commands_updated_by = $5, updated_at = $4
			WHERE id = $1 AND org_id = $2`, id, orgID, arg, now, nullUUID(userID))
		if err != nil {
			return err
		}
		c, err = getConfiguration(ctx, tx, orgID, id, false)
		return err
	})
	return c, err
}

// ReplaceConfigurationRepos replaces the repo list of a configuration. When
// the set of (repo, workspace path) changes, repos_version moves on and the
// current snapshot shows as stale. Commands or env files that named a
// workspace that is gone are kept (fix them next); the effective commands
// report them as skipped.
func (s *Store) ReplaceConfigurationRepos(ctx context.Context, orgID, id string, refs []RepoRef) (Configuration, error) {
	var c Configuration
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		cur, err := getConfiguration(ctx, tx, orgID, id, true)
		if err != nil {
			return err
		}
		paths, err := resolveRepos(ctx, tx, orgID, refs)
		if err != nil {
			return err
		}
		before := map[string]string{}
		for _, r := range cur.Repos {
			before[r.RepoID] = r.WorkspacePath
		}
		changed := len(before) != len(refs)
		for i, r := range refs {
			if wp, ok := before[r.RepoID]; !ok || wp != paths[i] {
				changed = true
			}
		}
		now := s.Now()
		if _, err := tx.Exec(ctx, `DELETE FROM configuration_repos WHERE configuration_id = $1 AND org_id = $2`, id, orgID); err != nil {
			return err
		}
		if err := insertRepoRows(ctx, tx, orgID, id, refs, paths, now); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE configurations SET updated_at = $3,
				repos_version = repos_version + CASE WHEN $4 THEN 1 ELSE 0 END
			WHERE id = $1 AND org_id = $2`, id, orgID, now, changed)
		if err != nil {
			return err
		}
		c, err = getConfiguration(ctx, tx, orgID, id, false)
		return err
	})
	return c, err
}

// DeleteConfiguration deletes a configuration of the organization (its repo
// links go with it; the repos stay).
func (s *Store) DeleteConfiguration(ctx context.Context, orgID, id string) error {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM configurations WHERE id = $1 AND org_id = $2`, id, orgID)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return err
}

// EffectiveServiceCommands resolves what a sandbox of the configuration runs
// (see ResolveServiceCommands), from one consistent snapshot of the database.
func (s *Store) EffectiveServiceCommands(ctx context.Context, orgID, id string) (EffectiveServiceCommands, error) {
	var out EffectiveServiceCommands
	err := s.tx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		c, err := getConfiguration(ctx, tx, orgID, id, false)
		if err != nil {
			return err
		}
		cmds := map[string][]RepoServiceCommand{}
		if len(c.ServiceCommands) == 0 && len(c.Repos) > 0 {
			rows, err := tx.Query(ctx, `SELECT r.id::text, r.service_commands FROM configuration_repos cr
				JOIN repos r ON r.id = cr.repo_id AND r.org_id = cr.org_id
				WHERE cr.configuration_id = $1 AND cr.org_id = $2`, id, orgID)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var repoID string
				var rc []RepoServiceCommand
				if err := rows.Scan(&repoID, &rc); err != nil {
					return err
				}
				cmds[repoID] = rc
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		out = ResolveServiceCommands(c, cmds)
		return nil
	})
	return out, err
}

// ReportSnapshot records the builder's report on a configuration's snapshot
// (any organization: the caller is the platform). The transition is checked
// under a row lock (see CanTransition); a forbidden one is a TransitionError
// and changes nothing.
//
//   - building: clears the error, records when the build started and the
//     repos_version it builds; a previous snapshot_id stays usable meanwhile.
//   - default: the build's result; it matches the repos_version the build
//     started from.
//   - ready: a snapshot finalized from a setup session (which has the current
//     repos); it also ends a build in progress, whose late result is refused.
//   - failed: records the error; a previous snapshot_id stays usable.
func (s *Store) ReportSnapshot(ctx context.Context, id string, r SnapshotReport) (Configuration, error) {
	var c Configuration
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var orgID, from string
		err := tx.QueryRow(ctx, `SELECT org_id::text, snapshot_status FROM configurations WHERE id = $1 FOR UPDATE`, id).Scan(&orgID, &from)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if !CanTransition(from, r.Status) {
			return &TransitionError{From: from, To: r.Status}
		}
		now := s.Now()
		var provider *string
		if r.Provider != "" {
			provider = &r.Provider
		}
		switch r.Status {
		case SnapshotBuilding:
			_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'building', snapshot_error = NULL,
					snapshot_build_started_at = $2, building_repos_version = repos_version, snapshot_updated_at = $2, updated_at = $2
				WHERE id = $1`, id, now)
		case SnapshotDefault:
			_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'default', snapshot_id = $2, snapshot_provider = $3,
					snapshot_error = NULL, snapshot_built_at = $4, snapshot_repos_version = COALESCE(building_repos_version, repos_version),
					building_repos_version = NULL, snapshot_updated_at = $4, updated_at = $4,
					snapshot_version_key = NULL -- the builder reports none: never restored (internal/prebuilds)
				WHERE id = $1`, id, r.SnapshotID, provider, now)
		case SnapshotReady:
			_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'ready', snapshot_id = $2, snapshot_provider = $3,
					snapshot_error = NULL, snapshot_built_at = $4, snapshot_repos_version = repos_version,
					building_repos_version = NULL, snapshot_updated_at = $4, updated_at = $4,
					snapshot_version_key = NULL -- the builder reports none: never restored (internal/prebuilds)
				WHERE id = $1`, id, r.SnapshotID, provider, now)
		case SnapshotFailed:
			_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'failed', snapshot_error = $2,
					building_repos_version = NULL, snapshot_updated_at = $3, updated_at = $3
				WHERE id = $1`, id, r.Error, now)
		}
		if err != nil {
			return err
		}
		c, err = getConfiguration(ctx, tx, orgID, id, false)
		return err
	})
	return c, err
}
