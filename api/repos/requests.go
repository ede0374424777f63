package repos

import (
	"strconv"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/repos"
)

func fieldErrors(fes []repos.FieldError) []httpapi.FieldError {
	out := make([]httpapi.FieldError, len(fes))
	for i, fe := range fes {
		out[i] = httpapi.FieldError{Field: fe.Field, Problem: fe.Problem}
	}
	return out
}

// --- repos -------------------------------------------------------------------

// CreateRepoRequest adds a repository.
type CreateRepoRequest struct {
	// GitHubRepoName is "owner/name"; unique in the organization, case-insensitively.
	GitHubRepoName string `json:"github_repo_name" binding:"required,max=140"`
	// GitHubURL defaults to https://github.com/<github_repo_name>.
	GitHubURL *string `json:"github_url" binding:"omitempty,max=500"`
	// DefaultBranch defaults to main.
	DefaultBranch *string `json:"default_branch" binding:"omitempty,max=255"`
	// GitHubRepoID is GitHub's numeric id, as a string; unique in the organization.
	GitHubRepoID *string `json:"github_repo_id" binding:"omitempty,max=20"`
	IsPrivate    bool    `json:"is_private"`
	// CreateConfiguration (default true) also creates the repo's single-repo
	// configuration, as the original always does.
	CreateConfiguration *bool `json:"create_configuration"`
}

// Validate checks every field.
func (r *CreateRepoRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if p := repos.CheckRepoName(r.GitHubRepoName); p != "" {
		fes = append(fes, httpapi.FieldError{Field: "github_repo_name", Problem: p})
	}
	return append(fes, checkRepoOptional(r.GitHubURL, r.DefaultBranch, r.GitHubRepoID)...)
}

func checkRepoOptional(url, branch, id *string) []httpapi.FieldError {
	var fes []httpapi.FieldError
	if url != nil {
		if p := repos.CheckGitHubURL(*url); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "github_url", Problem: p})
		}
	}
	if branch != nil {
		if p := repos.CheckBranch(*branch); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "default_branch", Problem: p})
		}
	}
	if id != nil {
		if p := repos.CheckGitHubRepoID(*id); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "github_repo_id", Problem: p})
		}
	}
	return fes
}

// CreatedRepo is a new repo and, when one was created, its configuration.
type CreatedRepo struct {
	repos.Repo
	ConfigurationID *string `json:"configuration_id"`
}

// UpdateRepoRequest changes a repository; absent (or null) fields are kept.
type UpdateRepoRequest struct {
	GitHubRepoName *string `json:"github_repo_name" binding:"omitempty,max=140"`
	GitHubURL      *string `json:"github_url" binding:"omitempty,max=500"`
	DefaultBranch  *string `json:"default_branch" binding:"omitempty,max=255"`
	GitHubRepoID   *string `json:"github_repo_id" binding:"omitempty,max=20"`
	IsPrivate      *bool   `json:"is_private"`
}

// Validate checks every given field.
func (r *UpdateRepoRequest) Validate() []httpapi.FieldError {
	if r.GitHubRepoName == nil && r.GitHubURL == nil && r.DefaultBranch == nil && r.GitHubRepoID == nil && r.IsPrivate == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set at least one field"}}
	}
	var fes []httpapi.FieldError
	if r.GitHubRepoName != nil {
		if p := repos.CheckRepoName(*r.GitHubRepoName); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "github_repo_name", Problem: p})
		}
	}
	return append(fes, checkRepoOptional(r.GitHubURL, r.DefaultBranch, r.GitHubRepoID)...)
}

// RepoServiceCommandsRequest replaces a repo's default service commands.
type RepoServiceCommandsRequest struct {
	// ServiceCommands are 1–10 commands with unique names.
	ServiceCommands []repos.RepoServiceCommand `json:"service_commands" binding:"required,min=1,max=10,dive"`
	clean           []repos.RepoServiceCommand
}

// Validate checks and normalizes the commands.
func (r *RepoServiceCommandsRequest) Validate() []httpapi.FieldError {
	if r.ServiceCommands == nil {
		return []httpapi.FieldError{{Field: "service_commands", Problem: "is required"}}
	}
	var fes []repos.FieldError
	r.clean, fes = repos.CheckRepoServiceCommands("service_commands", r.ServiceCommands)
	return fieldErrors(fes)
}

// --- configurations ----------------------------------------------------------

// RepoRefRequest puts a repo in a configuration.
type RepoRefRequest struct {
	RepoID string `json:"repo_id" binding:"required"`
	// WorkspacePath is where the repo is cloned, relative to the workspace
	// root; default "." for a single repo, the repo's name for several.
	WorkspacePath *string `json:"workspace_path" binding:"omitempty,max=500"`
}

func checkRepoRefs(in []RepoRefRequest) ([]repos.RepoRef, []httpapi.FieldError) {
	if in == nil {
		return nil, []httpapi.FieldError{{Field: "repos", Problem: "is required"}}
	}
	refs := make([]repos.RepoRef, len(in))
	var empty []repos.FieldError
	for i, r := range in {
		refs[i].RepoID = r.RepoID
		if r.WorkspacePath != nil {
			if *r.WorkspacePath == "" {
				empty = append(empty, repos.FieldError{Field: "repos[" + strconv.Itoa(i) + "].workspace_path",
					Problem: "must not be empty (omit it to derive the path)"})
			}
			refs[i].WorkspacePath = *r.WorkspacePath
		}
	}
	clean, fes := repos.CheckRepoRefs("repos", refs, api.IsUUID)
	return clean, fieldErrors(append(empty, fes...))
}

// CreateConfigurationRequest creates a configuration.
type CreateConfigurationRequest struct {
	Name        string           `json:"name" binding:"required,max=100"`
	Description string           `json:"description" binding:"max=2000"`
	Repos       []RepoRefRequest `json:"repos" binding:"required,min=1,max=20,dive"`
	// ServiceCommands (1–10) override the repos' default commands.
	ServiceCommands []repos.ServiceCommand `json:"service_commands" binding:"omitempty,min=1,max=10,dive"`
	EnvFiles        []repos.EnvFileInput   `json:"env_files" binding:"omitempty,max=20,dive"`

	in repos.ConfigurationInput
}

// Validate checks every field and prepares the input.
func (r *CreateConfigurationRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	name, p := repos.CheckText(r.Name, repos.NameMax)
	if p != "" {
		fes = append(fes, httpapi.FieldError{Field: "name", Problem: p})
	}
	if p := repos.CheckDescription(r.Description); p != "" {
		fes = append(fes, httpapi.FieldError{Field: "description", Problem: p})
	}
	refs, rfes := checkRepoRefs(r.Repos)
	fes = append(fes, rfes...)
	r.in = repos.ConfigurationInput{Name: name, Description: r.Description, Repos: refs}
	if r.ServiceCommands != nil {
		cmds, cfes := repos.CheckServiceCommands("service_commands", r.ServiceCommands)
		fes = append(fes, fieldErrors(cfes)...)
		r.in.ServiceCommands = cmds
	}
	if r.EnvFiles != nil {
		files, efes := repos.CheckEnvFiles("env_files", r.EnvFiles)
		fes = append(fes, fieldErrors(efes)...)
		r.in.EnvFiles = files
	}
	return fes
}

// UpdateConfigurationRequest changes a configuration; absent (or null) fields
// are kept. env_files replaces the whole list ([] clears it).
type UpdateConfigurationRequest struct {
	Name        *string               `json:"name" binding:"omitempty,max=100"`
	Description *string               `json:"description" binding:"omitempty,max=2000"`
	EnvFiles    *[]repos.EnvFileInput `json:"env_files" binding:"omitempty,max=20,dive"`

	patch repos.ConfigurationPatch
}

// Validate checks every given field.
func (r *UpdateConfigurationRequest) Validate() []httpapi.FieldError {
	if r.Name == nil && r.Description == nil && r.EnvFiles == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set at least one field"}}
	}
	var fes []httpapi.FieldError
	if r.Name != nil {
		name, p := repos.CheckText(*r.Name, repos.NameMax)
		if p != "" {
			fes = append(fes, httpapi.FieldError{Field: "name", Problem: p})
		}
		r.patch.Name = &name
	}
	if r.Description != nil {
		if p := repos.CheckDescription(*r.Description); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "description", Problem: p})
		}
		r.patch.Description = r.Description
	}
	if r.EnvFiles != nil {
		files, efes := repos.CheckEnvFiles("env_files", *r.EnvFiles)
		fes = append(fes, fieldErrors(efes)...)
		r.patch.EnvFiles = &files
	}
	return fes
}

// ConfigurationReposRequest replaces a configuration's repos.
type ConfigurationReposRequest struct {
	Repos []RepoRefRequest `json:"repos" binding:"required,min=1,max=20,dive"`
	refs  []repos.RepoRef
}

// Validate checks the list.
func (r *ConfigurationReposRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	r.refs, fes = checkRepoRefs(r.Repos)
	return fes
}

// ServiceCommandsRequest replaces a configuration's own service commands.
type ServiceCommandsRequest struct {
	// ServiceCommands are 1–10 commands with unique names; workspace_path,
	// when given, must be "." or one of the configuration's workspaces.
	ServiceCommands []repos.ServiceCommand `json:"service_commands" binding:"required,min=1,max=10,dive"`
	clean           []repos.ServiceCommand
}

// Validate checks and normalizes the commands.
func (r *ServiceCommandsRequest) Validate() []httpapi.FieldError {
	if r.ServiceCommands == nil {
		return []httpapi.FieldError{{Field: "service_commands", Problem: "is required"}}
	}
	var fes []repos.FieldError
	r.clean, fes = repos.CheckServiceCommands("service_commands", r.ServiceCommands)
	return fieldErrors(fes)
}

// SnapshotRequest is the builder's report of a configuration snapshot.
type SnapshotRequest struct {
	// Status is building, default (auto-built), ready (finalized) or failed.
	Status string `json:"status" binding:"required,oneof=none building default ready failed"`
	// SnapshotID is required for default and ready.
	SnapshotID string `json:"snapshot_id" binding:"max=500"`
	// Provider optionally names the sandbox provider (modal, e2b…).
	Provider string `json:"provider" binding:"max=32"`
	// Error is required for failed.
	Error string `json:"error" binding:"max=4000"`
}

func (r *SnapshotRequest) report() repos.SnapshotReport {
	return repos.SnapshotReport{Status: r.Status, SnapshotID: r.SnapshotID, Provider: r.Provider, Error: r.Error}
}

// Validate checks the report's shape.
func (r *SnapshotRequest) Validate() []httpapi.FieldError {
	return fieldErrors(repos.CheckSnapshotReport(r.report()))
}
