// Package repos is the domain of repositories and configurations (the
// original's "prebuilds"): org-scoped GitHub repository references, the
// configurations that group one or more of them into a workspace (each repo at
// a workspace path) with service commands and env-file specs, the resolution
// of the service commands a sandbox runs, and the configuration snapshot
// status the platform's builder reports.
//
// Every operation on an org-scoped row takes the organization and filters on
// it; a row of another organization is ErrNotFound, exactly like a missing one.
// The API handlers (api/repos) only bind requests and map errors.
package repos

import (
	"errors"
	"fmt"
	"time"
)

// Repo is an organization's reference to a GitHub repository.
type Repo struct {
	ID             string  `json:"id"`
	OrgID          string  `json:"org_id"`
	GitHubRepoID   *string `json:"github_repo_id"`
	GitHubRepoName string  `json:"github_repo_name"`
	GitHubURL      string  `json:"github_url"`
	DefaultBranch  string  `json:"default_branch"`
	IsPrivate      bool    `json:"is_private"`
	// IsOrphaned is set when the repo lost its last integration connection
	// (private repos then cannot be cloned).
	IsOrphaned bool `json:"is_orphaned"`
	// ServiceCommands are the repo's default service commands, used when a
	// configuration has none of its own.
	ServiceCommands          []RepoServiceCommand `json:"service_commands"`
	ServiceCommandsUpdatedAt *time.Time           `json:"service_commands_updated_at"`
	ServiceCommandsUpdatedBy *string              `json:"service_commands_updated_by"`
	AddedBy                  *string              `json:"added_by"`
	CreatedAt                time.Time            `json:"created_at"`
	UpdatedAt                time.Time            `json:"updated_at"`
}

// RepoServiceCommand is a repo-level command; it runs in the repo's workspace.
type RepoServiceCommand struct {
	Name    string `json:"name" binding:"required,max=100"`
	Command string `json:"command" binding:"required,max=1000"`
	// Cwd is relative to the repo's workspace path ("" is its root).
	Cwd string `json:"cwd,omitempty" binding:"max=500"`
}

// ServiceCommand is a configuration-level command. WorkspacePath picks the
// repo workspace it runs in (see EffectiveServiceCommands for the default);
// Cwd is relative to that workspace.
type ServiceCommand struct {
	Name          string `json:"name" binding:"required,max=100"`
	Command       string `json:"command" binding:"required,max=1000"`
	Cwd           string `json:"cwd,omitempty" binding:"max=500"`
	WorkspacePath string `json:"workspace_path,omitempty" binding:"max=500"`
}

// EnvFile is a spec of an env file the sandbox generates at boot (`proliferate
// env apply`): the file at Path inside the workspace WorkspacePath, in Format,
// holding Keys whose values come from the session's secrets and environment.
// Secret-mode files are scrubbed before snapshots. Values are never stored here.
type EnvFile struct {
	WorkspacePath string   `json:"workspace_path"`
	Path          string   `json:"path"`
	Format        string   `json:"format"`
	Mode          string   `json:"mode"`
	Keys          []EnvKey `json:"keys"`
}

// EnvKey is one variable of an env file; a required key missing at boot fails
// the apply before any file is written.
type EnvKey struct {
	Key      string `json:"key"`
	Required bool   `json:"required"`
}

// Env-file formats and modes.
const (
	EnvFormatEnv  = "env"
	EnvModeSecret = "secret"
	EnvModePlain  = "plain"
)

// Snapshot statuses of a configuration.
const (
	SnapshotNone     = "none"     // never built
	SnapshotBuilding = "building" // the builder is working on it
	SnapshotDefault  = "default"  // auto-built (base + repos cloned)
	SnapshotReady    = "ready"    // finalized from a setup session
	SnapshotFailed   = "failed"   // the last build failed (a previous snapshot_id may remain usable)
)

// SnapshotStatuses lists every status.
var SnapshotStatuses = []string{SnapshotNone, SnapshotBuilding, SnapshotDefault, SnapshotReady, SnapshotFailed}

// Configuration groups repos into a workspace with its service commands,
// env-file specs and snapshot.
type Configuration struct {
	ID                       string              `json:"id"`
	OrgID                    string              `json:"org_id"`
	Name                     string              `json:"name"`
	Description              string              `json:"description"`
	Repos                    []ConfigurationRepo `json:"repos"`
	ServiceCommands          []ServiceCommand    `json:"service_commands"`
	ServiceCommandsUpdatedAt *time.Time          `json:"service_commands_updated_at"`
	ServiceCommandsUpdatedBy *string             `json:"service_commands_updated_by"`
	EnvFiles                 []EnvFile           `json:"env_files"`
	EnvFilesUpdatedAt        *time.Time          `json:"env_files_updated_at"`
	EnvFilesUpdatedBy        *string             `json:"env_files_updated_by"`
	SnapshotStatus           string              `json:"snapshot_status"`
	SnapshotID               *string             `json:"snapshot_id"`
	SnapshotProvider         *string             `json:"snapshot_provider"`
	SnapshotError            *string             `json:"snapshot_error"`
	SnapshotBuiltAt          *time.Time          `json:"snapshot_built_at"`
	SnapshotBuildStartedAt   *time.Time          `json:"snapshot_build_started_at"`
	// SnapshotStale is true when the repos (or their workspace paths) changed
	// after the current snapshot's build started: the snapshot lacks them.
	SnapshotStale bool      `json:"snapshot_stale"`
	CreatedBy     *string   `json:"created_by"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// ConfigurationRepo is one repo of a configuration with where it is cloned.
type ConfigurationRepo struct {
	RepoID         string `json:"repo_id"`
	GitHubRepoName string `json:"github_repo_name"`
	GitHubURL      string `json:"github_url"`
	DefaultBranch  string `json:"default_branch"`
	IsPrivate      bool   `json:"is_private"`
	IsOrphaned     bool   `json:"is_orphaned"`
	WorkspacePath  string `json:"workspace_path"`
	Position       int    `json:"position"`
}

// RepoRef is a repo to put in a configuration; an empty WorkspacePath is
// derived ("." for a single repo, the repo's name otherwise).
type RepoRef struct {
	RepoID        string
	WorkspacePath string
}

// Effective service command sources.
const (
	SourceConfiguration = "configuration"
	SourceRepo          = "repo"
	SourceNone          = "none"
)

// EffectiveServiceCommands is what a sandbox of the configuration runs.
type EffectiveServiceCommands struct {
	// Source says where the commands come from: the configuration's own list
	// (which then wins entirely), the repos' defaults, or nowhere.
	Source   string             `json:"source"`
	Commands []EffectiveCommand `json:"commands"`
	// Workspaces are the configuration's workspace paths, in repo order.
	Workspaces []string `json:"workspaces"`
	// Skipped are configuration commands that name a workspace the
	// configuration no longer has (its repos changed after they were saved).
	Skipped []SkippedCommand `json:"skipped"`
}

// EffectiveCommand is a command with the directory it runs in.
type EffectiveCommand struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// WorkspacePath is the workspace the command belongs to; Cwd as saved.
	WorkspacePath string `json:"workspace_path"`
	Cwd           string `json:"cwd"`
	// ResolvedCwd is the directory it runs in, relative to the sandbox's
	// workspace root: WorkspacePath joined with Cwd, never outside it.
	ResolvedCwd string `json:"resolved_cwd"`
	// RepoID is the repo whose workspace it runs in (nil for the root of a
	// multi-repo workspace).
	RepoID *string `json:"repo_id"`
}

// SkippedCommand is a configuration command that cannot run.
type SkippedCommand struct {
	Name          string `json:"name"`
	WorkspacePath string `json:"workspace_path"`
	Reason        string `json:"reason"`
}

// SnapshotReport is the builder's report of a configuration snapshot.
type SnapshotReport struct {
	Status     string
	SnapshotID string // default, ready
	Provider   string // default, ready (optional)
	Error      string // failed
}

// DeleteRepoResult says what deleting a repo did to the configurations that
// held it: those left without repos are deleted, the others lose the repo
// and their snapshot is marked stale.
type DeleteRepoResult struct {
	DeletedConfigurations []string `json:"deleted_configuration_ids"`
	UpdatedConfigurations []string `json:"updated_configuration_ids"`
}

// Errors.
var (
	ErrNotFound   = errors.New("not found")
	ErrRepoExists = errors.New("repo already exists in this organization")
)

// FieldError is one invalid field of an input, named by its JSON path.
type FieldError struct {
	Field   string
	Problem string
}

// ValidationError is input that references state it cannot (a repo of
// another organization, a workspace the configuration does not have).
type ValidationError struct{ Fields []FieldError }

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid input: %v", e.Fields)
}

// TransitionError is a snapshot status change the state machine forbids.
type TransitionError struct{ From, To string }

func (e *TransitionError) Error() string {
	return fmt.Sprintf("snapshot status cannot go from %s to %s", e.From, e.To)
}
