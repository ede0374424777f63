// Package secrets is the REST surface of organization secrets and secret
// bundles. Handlers are thin; the rules live in internal/secrets.
//
// Role matrix (the caller's role in their active organization):
//
//	                                   member  admin  owner
//	list / get secrets, check keys       yes    yes    yes
//	list / get bundles, bundle secrets   yes    yes    yes
//	create / update / delete secrets      -     yes    yes
//	import .env, repo-scoped upsert       -     yes    yes
//	bundle create / update / delete       -     yes    yes
//	add / remove bundle secrets           -     yes    yes
//
// Members may not create secrets: an org-wide secret lands in every member's
// sessions, so creating one (say NPM_CONFIG_REGISTRY) is as powerful as
// changing one.
//
// The API never returns a value or a ciphertext; POST /secrets/check answers
// existence only. Precedence: a repo-scoped secret overrides the org-wide one
// of the same key in that repo's sessions, so a key "exists" for a repo when
// either is set.
package secrets

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/secrets"
)

const tag = "secrets"

// Register adds the secrets and secret-bundle routes.
func Register(s *api.Server) error {
	h := &handlers{s: s}
	listQuery := append([]api.Param{{Name: "repo_id", Description: "only this repo's secrets"}}, api.PageQuery...)
	for _, r := range []api.Route{
		{Method: http.MethodPost, Path: "/secrets", Summary: "Create a secret (org-wide, or repo-scoped with repo_id)", Access: api.OrgAdmin,
			Request: createRequest{}, Response: secrets.Secret{}, Status: http.StatusCreated, Handler: h.create},
		{Method: http.MethodGet, Path: "/secrets", Summary: "List secrets (metadata only, never values)", Access: api.OrgMember,
			Response: api.Page[secrets.Secret]{}, Query: listQuery, Handler: h.list},
		{Method: http.MethodGet, Path: "/secrets/:id", Summary: "Get a secret's metadata", Access: api.OrgMember,
			Response: secrets.Secret{}, Handler: h.get},
		{Method: http.MethodPatch, Path: "/secrets/:id", Summary: "Change a secret's value, description or persistence", Access: api.OrgAdmin,
			Request: patchRequest{}, Response: secrets.Secret{}, Handler: h.patch},
		{Method: http.MethodDelete, Path: "/secrets/:id", Summary: "Delete a secret", Access: api.OrgAdmin,
			Status: http.StatusNoContent, Handler: h.delete},
		{Method: http.MethodPost, Path: "/secrets/check", Summary: "Which keys exist (a repo's sessions see repo-scoped and org-wide secrets)", Access: api.OrgMember,
			Request: checkRequest{}, Response: map[string]bool{}, Handler: h.check},
		{Method: http.MethodPost, Path: "/secrets/import", Summary: "Import .env text: all entries or none", Access: api.OrgAdmin,
			Request: importRequest{}, Response: secrets.ImportResult{}, Handler: h.importText},
		// :id, not :repoId: Gin needs one wildcard name per position, and the
		// repos routes use /repos/:id.
		{Method: http.MethodPut, Path: "/repos/:id/secrets/:key", Summary: "Create or replace a repo-scoped secret (201 created, 200 replaced)", Access: api.OrgAdmin,
			Request: upsertRequest{}, Response: secrets.Secret{}, Handler: h.upsert},

		{Method: http.MethodPost, Path: "/secret-bundles", Summary: "Create a secret bundle", Access: api.OrgAdmin,
			Request: bundleCreateRequest{}, Response: secrets.Bundle{}, Status: http.StatusCreated, Handler: h.createBundle},
		{Method: http.MethodGet, Path: "/secret-bundles", Summary: "List secret bundles", Access: api.OrgMember,
			Response: api.Page[secrets.Bundle]{}, Query: api.PageQuery, Handler: h.listBundles},
		{Method: http.MethodGet, Path: "/secret-bundles/:id", Summary: "Get a secret bundle", Access: api.OrgMember,
			Response: secrets.Bundle{}, Handler: h.getBundle},
		{Method: http.MethodPatch, Path: "/secret-bundles/:id", Summary: "Change a bundle's name, description or target path (\"\" removes it)", Access: api.OrgAdmin,
			Request: bundlePatchRequest{}, Response: secrets.Bundle{}, Handler: h.patchBundle},
		{Method: http.MethodDelete, Path: "/secret-bundles/:id", Summary: "Delete a secret bundle (its secrets stay)", Access: api.OrgAdmin,
			Status: http.StatusNoContent, Handler: h.deleteBundle},
		{Method: http.MethodGet, Path: "/secret-bundles/:id/secrets", Summary: "List a bundle's secrets (metadata only)", Access: api.OrgMember,
			Response: api.Page[secrets.Secret]{}, Query: api.PageQuery, Handler: h.bundleSecrets},
		{Method: http.MethodPut, Path: "/secret-bundles/:id/secrets/:secretId", Summary: "Add a secret to a bundle (idempotent)", Access: api.OrgAdmin,
			Status: http.StatusNoContent, Handler: h.addToBundle},
		{Method: http.MethodDelete, Path: "/secret-bundles/:id/secrets/:secretId", Summary: "Remove a secret from a bundle", Access: api.OrgAdmin,
			Status: http.StatusNoContent, Handler: h.removeFromBundle},
	} {
		r.Tag = tag
		s.Handle(r)
	}
	return nil
}

type handlers struct{ s *api.Server }

func actor(c *api.Ctx) secrets.Actor {
	a := secrets.Actor{UserID: c.UserID(), RequestID: c.RequestID()}
	if p := c.Principal(); p != nil {
		a.ImpersonatorID, a.APIKeyID = p.ImpersonatorID, p.APIKeyID
	}
	return a
}

// domainError maps domain outcomes to API errors; anything else is a 500.
func domainError(err error) error {
	var inv *secrets.InvalidError
	var probs *secrets.ImportProblemsError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return httpapi.Invalid(httpapi.FieldError{Field: inv.Field, Problem: inv.Problem})
	case errors.As(err, &probs):
		msg := fmt.Sprintf("text: %d problem(s); nothing was imported", len(probs.Problems))
		if len(probs.Problems) == 1 {
			msg = fmt.Sprintf("text: line %d: %s; nothing was imported", probs.Problems[0].Line, probs.Problems[0].Problem)
		}
		return &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: httpapi.CodeValidation, Message: msg, Details: probs.Problems}
	case errors.Is(err, secrets.ErrNotFound):
		return httpapi.NotFound("secret")
	case errors.Is(err, secrets.ErrRepoNotFound):
		return httpapi.NotFound("repo")
	case errors.Is(err, secrets.ErrBundleNotFound):
		return httpapi.NotFound("secret bundle")
	case errors.Is(err, secrets.ErrNotInBundle):
		return httpapi.NotFound("secret in this bundle")
	case errors.Is(err, secrets.ErrExists):
		return httpapi.Conflict("secret_exists", "a secret with this key already exists in this scope; change it with PATCH /secrets/{id}")
	case errors.Is(err, secrets.ErrBundleExists):
		return httpapi.Conflict("bundle_exists", "a secret bundle with this name already exists")
	case errors.Is(err, secrets.ErrTargetPathTaken):
		return httpapi.Conflict("target_path_taken", "another secret bundle already writes this target path")
	}
	return err
}

// page turns the request's pagination into the domain's (one extra row).
func page(p api.PageParams) secrets.Page {
	at, id := p.CursorArgs()
	return secrets.Page{Limit: p.Limit + 1, At: at, ID: id}
}

func secretPos(s secrets.Secret) (at time.Time, id string) { return s.CreatedAt, s.ID }

// --- secrets -----------------------------------------------------------------

func (h *handlers) create(c *api.Ctx) error {
	var req createRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	persist := true
	if req.Persist != nil {
		persist = *req.Persist
	}
	out, err := secrets.Create(c.Request.Context(), h.s.Pool, h.s.Box, secrets.CreateInput{
		OrgID: c.OrgID(), RepoID: str(req.RepoID), Key: req.Key, Value: *req.Value, Description: req.Description,
		Persist: persist, BundleID: str(req.BundleID), Actor: actor(c),
	})
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusCreated, out)
}

func (h *handlers) list(c *api.Ctx) error {
	p, err := c.Page()
	if err != nil {
		return err
	}
	var f secrets.ListFilter
	if raw, ok := c.GetQuery("repo_id"); ok {
		if !api.IsUUID(raw) {
			return httpapi.Invalid(httpapi.FieldError{Field: "repo_id", Problem: "must be a UUID"})
		}
		f.RepoID = raw
	}
	rows, err := secrets.List(c.Request.Context(), h.s.Pool, c.OrgID(), f, page(p))
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, secretPos))
}

func (h *handlers) get(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret")
	if err != nil {
		return err
	}
	out, err := secrets.Get(c.Request.Context(), h.s.Pool, c.OrgID(), id)
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) patch(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret")
	if err != nil {
		return err
	}
	var req patchRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, err := secrets.Update(c.Request.Context(), h.s.Pool, h.s.Box, c.OrgID(), id, secrets.UpdateInput{
		Value: req.Value, Description: req.Description, Persist: req.Persist, Actor: actor(c),
	})
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) delete(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret")
	if err != nil {
		return err
	}
	if err := secrets.Delete(c.Request.Context(), h.s.Pool, c.OrgID(), id, actor(c)); err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) check(c *api.Ctx) error {
	var req checkRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, err := secrets.Check(c.Request.Context(), h.s.Pool, c.OrgID(), str(req.RepoID), req.Keys)
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) importText(c *api.Ctx) error {
	var req importRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, err := secrets.Import(c.Request.Context(), h.s.Pool, h.s.Box, secrets.ImportInput{
		OrgID: c.OrgID(), RepoID: str(req.RepoID), BundleID: str(req.BundleID), Text: req.Text,
		Overwrite: req.Overwrite, Actor: actor(c),
	})
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) upsert(c *api.Ctx) error {
	repoID, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	key := c.Param("key")
	if err := secrets.ValidateKey("key", key); err != nil {
		return domainError(err)
	}
	var req upsertRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, created, err := secrets.Upsert(c.Request.Context(), h.s.Pool, h.s.Box, secrets.UpsertInput{
		OrgID: c.OrgID(), RepoID: repoID, Key: key, Value: *req.Value, Description: req.Description,
		Persist: req.Persist, Actor: actor(c),
	})
	if err != nil {
		return domainError(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.Reply(status, out)
}

// --- bundles -----------------------------------------------------------------

func (h *handlers) createBundle(c *api.Ctx) error {
	var req bundleCreateRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, err := secrets.CreateBundle(c.Request.Context(), h.s.Pool, c.OrgID(), secrets.BundleInput{
		Name: &req.Name, Description: &req.Description, TargetPath: req.TargetPath, Actor: actor(c),
	})
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusCreated, out)
}

func (h *handlers) listBundles(c *api.Ctx) error {
	p, err := c.Page()
	if err != nil {
		return err
	}
	rows, err := secrets.ListBundles(c.Request.Context(), h.s.Pool, c.OrgID(), page(p))
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(b secrets.Bundle) (time.Time, string) { return b.CreatedAt, b.ID }))
}

func (h *handlers) getBundle(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret bundle")
	if err != nil {
		return err
	}
	out, err := secrets.GetBundle(c.Request.Context(), h.s.Pool, c.OrgID(), id)
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) patchBundle(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret bundle")
	if err != nil {
		return err
	}
	var req bundlePatchRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, err := secrets.UpdateBundle(c.Request.Context(), h.s.Pool, c.OrgID(), id, secrets.BundleInput{
		Name: req.Name, Description: req.Description, TargetPath: req.TargetPath, Actor: actor(c),
	})
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) deleteBundle(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret bundle")
	if err != nil {
		return err
	}
	if err := secrets.DeleteBundle(c.Request.Context(), h.s.Pool, c.OrgID(), id, actor(c)); err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) bundleSecrets(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "secret bundle")
	if err != nil {
		return err
	}
	p, err := c.Page()
	if err != nil {
		return err
	}
	rows, err := secrets.BundleSecrets(c.Request.Context(), h.s.Pool, c.OrgID(), id, page(p))
	if err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, secretPos))
}

func (h *handlers) membership(c *api.Ctx) (bundleID, secretID string, err error) {
	if bundleID, err = c.UUIDParam("id", "secret bundle"); err != nil {
		return "", "", err
	}
	if secretID, err = c.UUIDParam("secretId", "secret"); err != nil {
		return "", "", err
	}
	return bundleID, secretID, nil
}

func (h *handlers) addToBundle(c *api.Ctx) error {
	bundleID, secretID, err := h.membership(c)
	if err != nil {
		return err
	}
	if err := secrets.AddToBundle(c.Request.Context(), h.s.Pool, c.OrgID(), bundleID, secretID, actor(c)); err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) removeFromBundle(c *api.Ctx) error {
	bundleID, secretID, err := h.membership(c)
	if err != nil {
		return err
	}
	if err := secrets.RemoveFromBundle(c.Request.Context(), h.s.Pool, c.OrgID(), bundleID, secretID, actor(c)); err != nil {
		return domainError(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}
