package secrets

import (
	"errors"
	"fmt"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/dotenv"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/secrets"
)

// Request bodies. Tags cover presence and lengths; Validate covers the rest
// and reports every bad field at once. No message ever quotes a value.

type createRequest struct {
	Key         string  `json:"key" binding:"required,max=128" doc:"^[A-Za-z_][A-Za-z0-9_]*$; the PROLIFERATE_ prefix is reserved"`
	Value       *string `json:"value" binding:"required" doc:"write-only: at most 32768 bytes, never returned"`
	Description string  `json:"description" binding:"max=1000"`
	RepoID      *string `json:"repo_id" doc:"scope to this repo of the organization; omitted or null: org-wide"`
	Persist     *bool   `json:"persist" doc:"default true; false: never written into a bundle's env file"`
	BundleID    *string `json:"bundle_id" doc:"also add the secret to this bundle"`
}

func (r createRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	fes = addErr(fes, secrets.ValidateKey("key", r.Key))
	fes = addErr(fes, secrets.ValidateValue("value", *r.Value))
	fes = addErr(fes, secrets.ValidateText("description", r.Description, secrets.MaxDescriptionLen))
	fes = checkUUID(fes, "repo_id", r.RepoID)
	return checkUUID(fes, "bundle_id", r.BundleID)
}

type patchRequest struct {
	Value       *string `json:"value" doc:"write-only: at most 32768 bytes, never returned"`
	Description *string `json:"description" binding:"omitempty,max=1000"`
	Persist     *bool   `json:"persist"`
}

func (r patchRequest) Validate() []httpapi.FieldError {
	if r.Value == nil && r.Description == nil && r.Persist == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "set at least one of value, description, persist (key and scope cannot change)"}}
	}
	var fes []httpapi.FieldError
	if r.Value != nil {
		fes = addErr(fes, secrets.ValidateValue("value", *r.Value))
	}
	if r.Description != nil {
		fes = addErr(fes, secrets.ValidateText("description", *r.Description, secrets.MaxDescriptionLen))
	}
	return fes
}

type checkRequest struct {
	Keys   []string `json:"keys" binding:"required,min=1,max=100"`
	RepoID *string  `json:"repo_id" doc:"check what this repo's sessions see: its secrets and the org-wide ones"`
}

func (r checkRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	for i, k := range r.Keys {
		if !dotenv.ValidKey(k) {
			fes = append(fes, httpapi.FieldError{Field: fmt.Sprintf("keys[%d]", i), Problem: "must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most 128 characters"})
		}
	}
	return checkUUID(fes, "repo_id", r.RepoID)
}

type importRequest struct {
	Text      string  `json:"text" binding:"required" doc:".env text: comments, export, quotes and multi-line values; duplicate keys are rejected"`
	RepoID    *string `json:"repo_id" doc:"import as this repo's secrets; omitted or null: org-wide"`
	BundleID  *string `json:"bundle_id" doc:"add every imported key to this bundle"`
	Overwrite bool    `json:"overwrite" doc:"replace the values of existing keys (default: skip them)"`
}

func (r importRequest) Validate() []httpapi.FieldError {
	fes := checkUUID(nil, "repo_id", r.RepoID)
	return checkUUID(fes, "bundle_id", r.BundleID)
}

type upsertRequest struct {
	Value       *string `json:"value" binding:"required" doc:"write-only: at most 32768 bytes, never returned"`
	Description *string `json:"description" binding:"omitempty,max=1000" doc:"kept when omitted"`
	Persist     *bool   `json:"persist" doc:"kept when omitted (true for a new secret)"`
}

func (r upsertRequest) Validate() []httpapi.FieldError {
	fes := addErr(nil, secrets.ValidateValue("value", *r.Value))
	if r.Description != nil {
		fes = addErr(fes, secrets.ValidateText("description", *r.Description, secrets.MaxDescriptionLen))
	}
	return fes
}

type bundleCreateRequest struct {
	Name        string  `json:"name" binding:"required,max=100"`
	Description string  `json:"description" binding:"max=1000"`
	TargetPath  *string `json:"target_path" doc:"relative env file path written at session boot (e.g. apps/web/.env); no .., no leading /"`
}

func (r bundleCreateRequest) Validate() []httpapi.FieldError {
	return validateBundle(&r.Name, &r.Description, r.TargetPath)
}

type bundlePatchRequest struct {
	Name        *string `json:"name" binding:"omitempty,max=100"`
	Description *string `json:"description" binding:"omitempty,max=1000"`
	TargetPath  *string `json:"target_path" doc:"\"\" removes the target path"`
}

func (r bundlePatchRequest) Validate() []httpapi.FieldError {
	if r.Name == nil && r.Description == nil && r.TargetPath == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "set at least one of name, description, target_path"}}
	}
	return validateBundle(r.Name, r.Description, r.TargetPath)
}

func validateBundle(name, description, targetPath *string) []httpapi.FieldError {
	var fes []httpapi.FieldError
	if name != nil {
		fes = addErr(fes, secrets.ValidateText("name", *name, secrets.MaxBundleNameLen))
		if len(fes) == 0 && isBlank(*name) {
			fes = append(fes, httpapi.FieldError{Field: "name", Problem: "must not be blank"})
		}
	}
	if description != nil {
		fes = addErr(fes, secrets.ValidateText("description", *description, secrets.MaxDescriptionLen))
	}
	if targetPath != nil && *targetPath != "" {
		fes = addErr(fes, secrets.ValidateTargetPath("target_path", *targetPath))
	}
	return fes
}

func isBlank(s string) bool {
	for _, r := range s {
		if r != ' ' && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

func addErr(fes []httpapi.FieldError, err error) []httpapi.FieldError {
	var inv *secrets.InvalidError
	if errors.As(err, &inv) {
		fes = append(fes, httpapi.FieldError{Field: inv.Field, Problem: inv.Problem})
	}
	return fes
}

func checkUUID(fes []httpapi.FieldError, field string, v *string) []httpapi.FieldError {
	if v != nil && !api.IsUUID(*v) {
		fes = append(fes, httpapi.FieldError{Field: field, Problem: "must be a UUID"})
	}
	return fes
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
