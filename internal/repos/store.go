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

	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
)

// Store is the repos and configurations store.
type Store struct {
	Pool *pgxpool.Pool
	Now  func() time.Time
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

func jsonArg(v any) ([]byte, error) {
	return json.Marshal(v)
}

// --- repos -------------------------------------------------------------------

// repoFrom turns a row of reposdb (and its error) into a Repo; no row is
// ErrNotFound.
func repoFrom(row reposdb.Repo, err error) (Repo, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return Repo{ServiceCommands: []RepoServiceCommand{}}, ErrNotFound
	}
	if err != nil {
		return Repo{ServiceCommands: []RepoServiceCommand{}}, err
	}
	r := Repo{ID: row.ID, OrgID: row.OrgID, GitHubRepoID: row.GithubRepoID, GitHubRepoName: row.GithubRepoName,
		GitHubURL: row.GithubUrl, DefaultBranch: row.DefaultBranch, IsPrivate: row.IsPrivate, IsOrphaned: row.IsOrphaned,
		ServiceCommandsUpdatedAt: row.ServiceCommandsUpdatedAt, ServiceCommandsUpdatedBy: row.ServiceCommandsUpdatedBy,
		AddedBy: row.AddedBy, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
	if len(row.ServiceCommands) > 0 {
		if err := json.Unmarshal(row.ServiceCommands, &r.ServiceCommands); err != nil {
			return r, err
		}
	}
	if r.ServiceCommands == nil {
		r.ServiceCommands = []RepoServiceCommand{}
	}
	return r, nil
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
		repo, err = repoFrom(reposdb.New(tx).InsertRepo(ctx, reposdb.InsertRepoParams{
			OrgID: orgID, GithubRepoID: in.GitHubRepoID, GithubRepoName: in.Name, GithubUrl: in.URL,
			DefaultBranch: in.DefaultBranch, IsPrivate: in.IsPrivate, AddedBy: nullUUID(userID), Now: now,
		}))
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
	rows, err := reposdb.New(s.Pool).ListRepos(ctx, reposdb.ListReposParams{
		OrgID: orgID, Q: EscapeLike(q), AfterAt: afterAt, AfterID: afterID, MaxRows: int32(limit + 1),
	})
	if err != nil {
		return nil, err
	}
	out := []Repo{}
	for _, row := range rows {
		r, err := repoFrom(row, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// GetRepo returns a repo of the organization.
func (s *Store) GetRepo(ctx context.Context, orgID, id string) (Repo, error) {
	return repoFrom(reposdb.New(s.Pool).GetRepo(ctx, reposdb.GetRepoParams{ID: id, OrgID: orgID}))
}

// RepoPatch changes a repo; nil fields are kept.
type RepoPatch struct {
	Name, URL, DefaultBranch, GitHubRepoID *string
	IsPrivate                              *bool
}

// UpdateRepo applies p to a repo of the organization.
func (s *Store) UpdateRepo(ctx context.Context, orgID, id string, p RepoPatch) (Repo, error) {
	r, err := repoFrom(reposdb.New(s.Pool).UpdateRepo(ctx, reposdb.UpdateRepoParams{
		GithubRepoName: p.Name, GithubUrl: p.URL, DefaultBranch: p.DefaultBranch, GithubRepoID: p.GitHubRepoID,
		IsPrivate: p.IsPrivate, Now: s.Now(), ID: id, OrgID: orgID,
	}))
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
	return repoFrom(reposdb.New(s.Pool).SetRepoServiceCommands(ctx, reposdb.SetRepoServiceCommandsParams{
		ServiceCommands: arg, Now: now, UpdatedBy: nullUUID(userID), ID: id, OrgID: orgID,
	}))
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
		rq, cq := reposdb.New(tx), prebuildsdb.New(tx)
		holding := prebuildsdb.StoreConfigurationsHoldingRepoParams{OrgID: orgID, RepoID: id}
		// The configurations holding the repo first, then the repo itself.
		locked, err := collectStrings(cq.StoreLockConfigurationsHoldingRepo(ctx, prebuildsdb.StoreLockConfigurationsHoldingRepoParams(holding)))
		if err != nil {
			return err
		}
		_, err = rq.LockRepoInOrg(ctx, reposdb.LockRepoInOrgParams{ID: id, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// With the repo locked nobody can add it anywhere; if somebody did
		// between the two locks, start over so their configuration is locked
		// in order too.
		cfgIDs, err := collectStrings(cq.StoreConfigurationsHoldingRepo(ctx, holding))
		if err != nil {
			return err
		}
		for _, c := range cfgIDs {
			if !slices.Contains(locked, c) {
				return errRetry
			}
		}
		if err := rq.DeleteRepo(ctx, reposdb.DeleteRepoParams{ID: id, OrgID: orgID}); err != nil {
			return err
		}
		if len(cfgIDs) == 0 {
			return nil
		}
		res.DeletedConfigurations, err = collectStrings(cq.StoreDeleteEmptyConfigurations(ctx,
			prebuildsdb.StoreDeleteEmptyConfigurationsParams{Ids: cfgIDs, OrgID: orgID}))
		if err != nil {
			return err
		}
		res.UpdatedConfigurations, err = collectStrings(cq.StoreBumpReposVersion(ctx,
			prebuildsdb.StoreBumpReposVersionParams{Now: s.Now(), Ids: cfgIDs, OrgID: orgID}))
		return err
	})
	slices.Sort(res.DeletedConfigurations)
	slices.Sort(res.UpdatedConfigurations)
	return res, err
}

// collectStrings never answers a nil list.
func collectStrings(out []string, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// --- configurations ----------------------------------------------------------

// configurationFrom turns a row of prebuildsdb (and its error) into a
// Configuration without its repos; no row is ErrNotFound.
func configurationFrom(row prebuildsdb.Configuration, stale bool, err error) (Configuration, error) {
	empty := Configuration{ServiceCommands: []ServiceCommand{}, EnvFiles: []EnvFile{}, Repos: []ConfigurationRepo{}}
	if errors.Is(err, pgx.ErrNoRows) {
		return empty, ErrNotFound
	}
	if err != nil {
		return empty, err
	}
	c := Configuration{ID: row.ID, OrgID: row.OrgID, Name: row.Name, Description: row.Description,
		ServiceCommandsUpdatedAt: row.ServiceCommandsUpdatedAt, ServiceCommandsUpdatedBy: row.ServiceCommandsUpdatedBy,
		EnvFilesUpdatedAt: row.EnvFilesUpdatedAt, EnvFilesUpdatedBy: row.EnvFilesUpdatedBy,
		SnapshotStatus: row.SnapshotStatus, SnapshotID: row.SnapshotID, SnapshotProvider: row.SnapshotProvider,
		SnapshotError: row.SnapshotError, SnapshotBuiltAt: row.SnapshotBuiltAt, SnapshotBuildStartedAt: row.SnapshotBuildStartedAt,
		SnapshotStale: stale, CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		Repos: []ConfigurationRepo{}}
	if len(row.ServiceCommands) > 0 {
		if err := json.Unmarshal(row.ServiceCommands, &c.ServiceCommands); err != nil {
			return c, err
		}
	}
	if len(row.EnvFiles) > 0 {
		if err := json.Unmarshal(row.EnvFiles, &c.EnvFiles); err != nil {
			return c, err
		}
	}
	if c.ServiceCommands == nil {
		c.ServiceCommands = []ServiceCommand{}
	}
	if c.EnvFiles == nil {
		c.EnvFiles = []EnvFile{}
	}
	return c, nil
}

// attachRepos loads the repos of the given configurations (all of one org).
func attachRepos(ctx context.Context, q prebuildsdb.DBTX, orgID string, cfgs []Configuration) error {
	if len(cfgs) == 0 {
		return nil
	}
	ids := make([]string, len(cfgs))
	index := map[string]int{}
	for i, c := range cfgs {
		ids[i] = c.ID
		index[c.ID] = i
	}
	rows, err := prebuildsdb.New(q).StoreConfigurationsRepos(ctx, prebuildsdb.StoreConfigurationsReposParams{Ids: ids, OrgID: orgID})
	if err != nil {
		return err
	}
	for _, row := range rows {
		i := index[row.ConfigurationID]
		cfgs[i].Repos = append(cfgs[i].Repos, ConfigurationRepo{RepoID: row.RepoID, GitHubRepoName: row.GithubRepoName,
			GitHubURL: row.GithubUrl, DefaultBranch: row.DefaultBranch, IsPrivate: row.IsPrivate, IsOrphaned: row.IsOrphaned,
			WorkspacePath: row.WorkspacePath, Position: int(row.Position)})
	}
	return nil
}

// getConfiguration reads a configuration of the organization with its
// repos; lock takes its row lock (FOR UPDATE) first.
func getConfiguration(ctx context.Context, q prebuildsdb.DBTX, orgID, id string, lock bool) (Configuration, error) {
	var c Configuration
	var err error
	if lock {
		row, qerr := prebuildsdb.New(q).StoreLockConfiguration(ctx, prebuildsdb.StoreLockConfigurationParams{ID: id, OrgID: orgID})
		c, err = configurationFrom(row.Configuration, row.SnapshotStale, qerr)
	} else {
		row, qerr := prebuildsdb.New(q).StoreGetConfiguration(ctx, prebuildsdb.StoreGetConfigurationParams{ID: id, OrgID: orgID})
		c, err = configurationFrom(row.Configuration, row.SnapshotStale, qerr)
	}
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
		rows, err := prebuildsdb.New(tx).StoreListConfigurations(ctx, prebuildsdb.StoreListConfigurationsParams{
			OrgID: orgID, AfterAt: afterAt, AfterID: afterID, SnapshotStatus: f.SnapshotStatus, RepoID: f.RepoID,
			MaxRows: int32(limit + 1),
		})
		if err != nil {
			return err
		}
		out = []Configuration{}
		for _, row := range rows {
			c, err := configurationFrom(row.Configuration, row.SnapshotStale, nil)
			if err != nil {
				return err
			}
			out = append(out, c)
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
	rows, err := reposdb.New(tx).ShareLockOrgRepos(ctx, reposdb.ShareLockOrgReposParams{OrgID: orgID, Ids: ids})
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	for _, row := range rows {
		names[row.ID] = row.GithubRepoName
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
	return prebuildsdb.New(tx).StoreInsertConfigurationRepos(ctx, prebuildsdb.StoreInsertConfigurationReposParams{
		ConfigurationID: cfgID, RepoIds: ids, OrgID: orgID, WorkspacePaths: paths, Positions: positions, Now: now,
	})
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
	id, err := prebuildsdb.New(tx).StoreInsertConfiguration(ctx, prebuildsdb.StoreInsertConfigurationParams{
		OrgID: orgID, Name: in.Name, Description: in.Description, ServiceCommands: cmds,
		ServiceCommandsUpdatedAt: cmdAt, ServiceCommandsUpdatedBy: cmdBy, EnvFiles: envs, EnvFilesUpdatedAt: envAt,
		EnvFilesUpdatedBy: envBy, CreatedBy: nullUUID(userID), Now: now,
	})
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
		var envs []byte
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
			envs, envAt = arg, &now
		}
		err = prebuildsdb.New(tx).StoreUpdateConfiguration(ctx, prebuildsdb.StoreUpdateConfigurationParams{
			Name: p.Name, Description: p.Description, EnvFiles: envs, EnvFilesUpdatedAt: envAt,
			EnvFilesUpdatedBy: nullUUID(userID), Now: now, ID: id, OrgID: orgID,
		})
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
		err = prebuildsdb.New(tx).StoreSetConfigurationServiceCommands(ctx, prebuildsdb.StoreSetConfigurationServiceCommandsParams{
			ServiceCommands: arg, Now: now, UpdatedBy: nullUUID(userID), ID: id, OrgID: orgID,
		})
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
		q := prebuildsdb.New(tx)
		if err := q.StoreDeleteConfigurationRepos(ctx, prebuildsdb.StoreDeleteConfigurationReposParams{ConfigurationID: id, OrgID: orgID}); err != nil {
			return err
		}
		if err := insertRepoRows(ctx, tx, orgID, id, refs, paths, now); err != nil {
			return err
		}
		err = q.StoreTouchConfigurationRepos(ctx, prebuildsdb.StoreTouchConfigurationReposParams{
			Now: now, Changed: changed, ID: id, OrgID: orgID,
		})
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
	n, err := prebuildsdb.New(s.Pool).StoreDeleteConfiguration(ctx, prebuildsdb.StoreDeleteConfigurationParams{ID: id, OrgID: orgID})
	if err == nil && n == 0 {
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
			rows, err := prebuildsdb.New(tx).StoreRepoServiceCommands(ctx, prebuildsdb.StoreRepoServiceCommandsParams{
				ConfigurationID: id, OrgID: orgID,
			})
			if err != nil {
				return err
			}
			for _, row := range rows {
				var rc []RepoServiceCommand
				if row.ServiceCommands != nil {
					if err := json.Unmarshal(row.ServiceCommands, &rc); err != nil {
						return err
					}
				}
				cmds[row.RepoID] = rc
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
		q := prebuildsdb.New(tx)
		state, err := q.StoreLockSnapshotState(ctx, id)
		orgID, from := state.OrgID, state.SnapshotStatus
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
			err = q.StoreReportSnapshotBuilding(ctx, prebuildsdb.StoreReportSnapshotBuildingParams{Now: now, ID: id})
		case SnapshotDefault:
			err = q.StoreReportSnapshotDefault(ctx, prebuildsdb.StoreReportSnapshotDefaultParams{
				SnapshotID: r.SnapshotID, Provider: provider, Now: now, ID: id,
			})
		case SnapshotReady:
			err = q.StoreReportSnapshotReady(ctx, prebuildsdb.StoreReportSnapshotReadyParams{
				SnapshotID: r.SnapshotID, Provider: provider, Now: now, ID: id,
			})
		case SnapshotFailed:
			err = q.StoreReportSnapshotFailed(ctx, prebuildsdb.StoreReportSnapshotFailedParams{Error: r.Error, Now: now, ID: id})
		}
		if err != nil {
			return err
		}
		c, err = getConfiguration(ctx, tx, orgID, id, false)
		return err
	})
	return c, err
}
