package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// gitRoutes registers the git panel routes (same authorisation as the
// WebSocket git messages: status for anyone who may see the session,
// mutations for principals allowed to mutate it).
func (s *Server) gitRoutes() {
	s.handle("GET /proliferate/{id}/git/status", s.owned("id", s.getGitStatus))
	s.handle("GET /proliferate/{id}/git/diff", s.owned("id", s.getGitDiff))
	s.handle("POST /proliferate/{id}/git/branch", s.owned("id", s.postGitBranch))
	s.handle("POST /proliferate/{id}/git/commit", s.owned("id", s.postGitCommit))
	s.handle("POST /proliferate/{id}/git/push", s.owned("id", s.postGitPush))
	s.handle("POST /proliferate/{id}/git/pr", s.owned("id", s.postGitPR))
}

// gitRequest is the body of the git mutation routes.
type gitRequest struct {
	WorkspacePath string   `json:"workspace_path"`
	Branch        string   `json:"branch,omitempty"`
	Message       string   `json:"message,omitempty"`
	Mode          string   `json:"mode,omitempty"`
	Files         []string `json:"files,omitempty"`
	Title         string   `json:"title,omitempty"`
	Body          string   `json:"body,omitempty"`
	Base          string   `json:"base,omitempty"`
	Draft         bool     `json:"draft,omitempty"`
}

// gitError maps git operation errors: a bad field of the request is 422
// validation_failed naming it, a state of the workspace or the platform
// that prevents the operation 409 with a code, hub errors as the other
// routes.
func gitError(w http.ResponseWriter, err error) error {
	var ge *gitops.GitError
	var ae *gitops.APIError
	var fe *gitops.FieldError
	switch {
	case errors.Is(err, hub.ErrForbidden), errors.Is(err, hub.ErrNotOwner), errors.Is(err, hub.ErrClosed), errors.Is(err, hub.ErrSessionEnded):
		return hubError(w, err)
	case errors.Is(err, gitops.ErrNothingToCommit):
		return httpapi.Conflict("nothing_to_commit", hub.GitErrorText(err))
	case errors.Is(err, gitops.ErrBusy):
		w.Header().Set("Retry-After", "1")
		return httpapi.Conflict("repository_busy", hub.GitErrorText(err))
	case errors.Is(err, gitops.ErrNotRepo):
		// Also a workspace without repos inside another repository.
		return httpapi.Conflict("not_a_repository", hub.GitErrorText(err))
	case errors.As(err, &fe):
		return invalid(fe.Field, fe.Problem)
	case errors.Is(err, gitops.ErrInvalidPath):
		// Fields are checked before the hub is asked (gitPaths); this is
		// the workspace path as the sandbox resolved it.
		return invalid("workspace_path", hub.GitErrorText(err))
	case errors.Is(err, gitops.ErrDetached):
		return httpapi.Conflict("detached_head", hub.GitErrorText(err))
	case errors.Is(err, hub.ErrGitUnsupported):
		return httpapi.Conflict("git_unsupported", hub.GitErrorText(err))
	case errors.Is(err, gitops.ErrInvalidRequest), strings.Contains(err.Error(), "GitHub is not configured"):
		// Not a field: GitHub not configured (the hub's error, matched
		// as hub.GitErrorText does), no GitHub origin, on the base branch.
		return httpapi.Conflict("git_precondition", hub.GitErrorText(err))
	case errors.Is(err, gitops.ErrGitHubUnavailable):
		// Before the APIError case: a 5xx from GitHub is GitHub's failure.
		w.Header().Set("Retry-After", "5")
		return &httpapi.Error{Status: http.StatusBadGateway, Code: "github_unavailable", Message: "GitHub could not be reached or failed; nothing was created, retry later"}
	case errors.Is(err, gitops.ErrTokenUnavailable):
		w.Header().Set("Retry-After", "5")
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: "credentials_unavailable", Message: "the repository's GitHub credentials could not be obtained; retry later"}
	case errors.As(err, &ge), errors.As(err, &ae):
		return &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: "git_failed", Message: hub.GitErrorText(err)}
	}
	return err
}

// gitPaths checks the request's paths before any git runs: 422 naming
// the field (workspace_path, files[i]) that is absolute or escapes the
// workspace.
func gitPaths(workspacePath string, files []string) error {
	var fes []httpapi.FieldError
	if _, err := gitops.CleanPath(workspacePath); err != nil {
		fes = append(fes, httpapi.FieldError{Field: "workspace_path", Problem: hub.GitErrorText(err)})
	}
	for i, f := range files {
		if _, err := gitops.CleanPath(f); err != nil {
			fes = append(fes, httpapi.FieldError{Field: "files[" + strconv.Itoa(i) + "]", Problem: hub.GitErrorText(err)})
		}
	}
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	return nil
}

func (s *Server) getGitStatus(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	if p.Kind == auth.KindSandbox {
		return httpapi.Forbidden("sandbox credentials cannot act on sessions")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	path := r.URL.Query().Get("workspace_path")
	if err := gitPaths(path, nil); err != nil {
		return err
	}
	st, err := h.Git().Status(r.Context(), p, path)
	if err != nil {
		return gitError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, protocol.GitStatusMessage{Type: protocol.MsgGitStatus, WorkspacePath: path, OK: true, Status: &st})
	return nil
}

// gitDiffResponse is GET /git/diff's answer.
type gitDiffResponse struct {
	WorkspacePath string `json:"workspace_path"`
	gitops.Diff
}

// getGitDiff answers the uncommitted changes of a workspace repository
// against HEAD (untracked files as added), optionally of one file or
// directory (?path=): per file its state, line counts and unified patch;
// binary files are flagged, never dumped; the patch text is capped at
// gitops.DefaultDiffMaxBytes (1 MiB) in all, past which patches are cut
// at a line and flagged truncated (the files are all listed).
func (s *Server) getGitDiff(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	if p.Kind == auth.KindSandbox {
		return httpapi.Forbidden("sandbox credentials cannot act on sessions")
	}
	sess, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	q := r.URL.Query()
	path, file := q.Get("workspace_path"), q.Get("path")
	if err := gitPaths(path, nil); err != nil {
		return err
	}
	if _, err := gitops.CleanPath(file); err != nil {
		return invalid("path", hub.GitErrorText(err))
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return hubError(w, err)
	}
	d, err := h.Git().Diff(r.Context(), p, path, gitops.DiffOptions{Path: file})
	if err != nil {
		return gitError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, gitDiffResponse{WorkspacePath: path, Diff: d})
	return nil
}

// gitMutation authorises a git mutation route and decodes its body.
func (s *Server) gitMutation(w http.ResponseWriter, r *http.Request) (*auth.Principal, *hub.Hub, gitRequest, error) {
	p, sess, err := s.mutable(r)
	if err != nil {
		return nil, nil, gitRequest{}, err
	}
	var req gitRequest
	if err := decode(r, &req); err != nil {
		return nil, nil, gitRequest{}, err
	}
	if err := gitPaths(req.WorkspacePath, req.Files); err != nil {
		return nil, nil, gitRequest{}, err
	}
	h, err := s.d.Hubs.Hub(r.Context(), sess.ID)
	if err != nil {
		return nil, nil, gitRequest{}, hubError(w, err)
	}
	return p, h, req, nil
}

func (s *Server) postGitBranch(w http.ResponseWriter, r *http.Request) error {
	p, h, req, err := s.gitMutation(w, r)
	if err != nil {
		return err
	}
	if err := h.Git().CreateBranch(r.Context(), p, req.WorkspacePath, req.Branch); err != nil {
		return gitError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, protocol.GitResultMessage{Type: protocol.MsgGitResult, Action: hub.GitActionBranch, WorkspacePath: req.WorkspacePath, OK: true, Branch: req.Branch})
	return nil
}

func (s *Server) postGitCommit(w http.ResponseWriter, r *http.Request) error {
	p, h, req, err := s.gitMutation(w, r)
	if err != nil {
		return err
	}
	res, err := h.Git().Commit(r.Context(), p, req.WorkspacePath, gitops.CommitRequest{Message: req.Message, Mode: req.Mode, Files: req.Files})
	if err != nil {
		return gitError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, protocol.GitResultMessage{Type: protocol.MsgGitResult, Action: hub.GitActionCommit, WorkspacePath: req.WorkspacePath, OK: true, SHA: res.SHA, Branch: res.Branch})
	return nil
}

func (s *Server) postGitPush(w http.ResponseWriter, r *http.Request) error {
	p, h, req, err := s.gitMutation(w, r)
	if err != nil {
		return err
	}
	res, err := h.Git().Push(r.Context(), p, req.WorkspacePath)
	if err != nil {
		return gitError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusOK, protocol.GitResultMessage{Type: protocol.MsgGitResult, Action: hub.GitActionPush, WorkspacePath: req.WorkspacePath, OK: true, Branch: res.Branch, Push: &res})
	return nil
}

func (s *Server) postGitPR(w http.ResponseWriter, r *http.Request) error {
	p, h, req, err := s.gitMutation(w, r)
	if err != nil {
		return err
	}
	if strings.TrimSpace(req.Title) == "" {
		return invalid("title", "required")
	}
	pr, err := h.Git().CreatePR(r.Context(), p, req.WorkspacePath, gitops.PRInput{Title: req.Title, Body: req.Body, Base: req.Base, Draft: req.Draft})
	if err != nil {
		return gitError(w, err)
	}
	httpapi.WriteJSON(w, http.StatusCreated, protocol.GitResultMessage{Type: protocol.MsgGitResult, Action: hub.GitActionPR, WorkspacePath: req.WorkspacePath, OK: true, PRURL: pr.URL, PRNumber: pr.Number})
	return nil
}
