package hub

import (
	"context"
	"errors"
	"strings"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// GitDeps configure the hub's git operations (Deps.Git).
type GitDeps struct {
	// GitHub opens pull requests and its Tokens authenticate pushes to
	// HTTPS remotes; nil refuses PR creation and pushes without a token.
	GitHub *gitops.GitHub
	// Options tune the git commands (timeouts, commit author).
	Options gitops.Options
}

// Git errors.
var (
	// ErrGitUnsupported: the sandbox provider cannot run commands.
	ErrGitUnsupported = errors.New("hub: the sandbox provider does not support git operations")
)

// Git actions (protocol.GitResultMessage.Action).
const (
	GitActionStatus = "status"
	GitActionBranch = "create_branch"
	GitActionCommit = "commit"
	GitActionPush   = "push"
	GitActionPR     = "create_pr"
)

// canRead: principals that may attach (service, or a member of the
// session's organization).
func (h *Hub) canRead(p *auth.Principal) bool {
	if p == nil || p.Kind == auth.KindSandbox {
		return false
	}
	return p.Kind == auth.KindService || p.OrgID == h.Session().OrgID
}

// gitRepo makes the runtime ready and opens the workspace repository.
func (h *Hub) gitRepo(ctx context.Context, workspacePath string) (*gitops.Repo, error) {
	ex, ok := h.m.d.Provider.(sandbox.Executor)
	if !ok {
		return nil, ErrGitUnsupported
	}
	if _, err := gitops.CleanPath(workspacePath); err != nil {
		return nil, err
	}
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return nil, err
	}
	h.mu.Lock()
	rt := h.rt
	h.mu.Unlock()
	if rt == nil {
		return nil, ErrClosed
	}
	return gitops.Open(ex, rt.sb.ID, workspacePath, h.m.d.Git.Options)
}

// GitStatus returns the status of the repository at workspacePath.
func (h *Hub) GitStatus(ctx context.Context, p *auth.Principal, workspacePath string) (gitops.Status, error) {
	if !h.canRead(p) {
		return gitops.Status{}, ErrForbidden
	}
	r, err := h.gitRepo(ctx, workspacePath)
	if err != nil {
		return gitops.Status{}, err
	}
	return r.Status(ctx)
}

// GitDiff returns the uncommitted changes of the repository at
// workspacePath (readable by anyone who may see the session).
func (h *Hub) GitDiff(ctx context.Context, p *auth.Principal, workspacePath string, o gitops.DiffOptions) (gitops.Diff, error) {
	if !h.canRead(p) {
		return gitops.Diff{}, ErrForbidden
	}
	r, err := h.gitRepo(ctx, workspacePath)
	if err != nil {
		return gitops.Diff{}, err
	}
	return r.Diff(ctx, o)
}

// GitCreateBranch creates and checks out a branch.
func (h *Hub) GitCreateBranch(ctx context.Context, p *auth.Principal, workspacePath, branch string) error {
	if !h.canMutate(p) {
		return ErrForbidden
	}
	r, err := h.gitRepo(ctx, workspacePath)
	if err != nil {
		return err
	}
	return r.CreateBranch(ctx, branch)
}

// GitCommit commits (gitops.ErrNothingToCommit for an empty change set).
func (h *Hub) GitCommit(ctx context.Context, p *auth.Principal, workspacePath string, req gitops.CommitRequest) (gitops.CommitResult, error) {
	if !h.canMutate(p) {
		return gitops.CommitResult{}, ErrForbidden
	}
	r, err := h.gitRepo(ctx, workspacePath)
	if err != nil {
		return gitops.CommitResult{}, err
	}
	return r.Commit(ctx, req)
}

// GitPush pushes the current branch (setting its upstream when missing).
func (h *Hub) GitPush(ctx context.Context, p *auth.Principal, workspacePath string) (gitops.PushResult, error) {
	if !h.canMutate(p) {
		return gitops.PushResult{}, ErrForbidden
	}
	r, err := h.gitRepo(ctx, workspacePath)
	if err != nil {
		return gitops.PushResult{}, err
	}
	token, err := h.pushToken(ctx, r)
	if err != nil {
		return gitops.PushResult{}, err
	}
	return r.Push(ctx, token)
}

// pushToken returns the token for an HTTPS origin when GitHub is
// configured ("" otherwise).
func (h *Hub) pushToken(ctx context.Context, r *gitops.Repo) (string, error) {
	gh := h.m.d.Git.GitHub
	if gh == nil || gh.Tokens == nil {
		return "", nil
	}
	remote, err := r.Remote(ctx, "origin")
	if err != nil || !strings.HasPrefix(remote, "https://") {
		return "", nil //nolint:nilerr // non-HTTPS or missing origin: push without a token
	}
	owner, repo, err := gitops.ParseRemote(remote)
	if err != nil {
		return "", nil //nolint:nilerr // unparsable remote: push without a token
	}
	return gh.Tokens.Token(ctx, h.Session().OrgID, owner, repo)
}

// GitCreatePR opens a pull request from the current branch and records its
// URL in the session's telemetry (pr_urls).
func (h *Hub) GitCreatePR(ctx context.Context, p *auth.Principal, workspacePath string, in gitops.PRInput) (gitops.PullRequest, error) {
	if !h.canMutate(p) {
		return gitops.PullRequest{}, ErrForbidden
	}
	if h.m.d.Git.GitHub == nil {
		return gitops.PullRequest{}, errors.New("hub: GitHub is not configured; pull requests cannot be created")
	}
	r, err := h.gitRepo(ctx, workspacePath)
	if err != nil {
		return gitops.PullRequest{}, err
	}
	in.OrgID = h.Session().OrgID
	pr, err := r.CreatePR(ctx, h.m.d.Git.GitHub, in)
	if err != nil {
		return gitops.PullRequest{}, err
	}
	h.counters.RecordPRURL(pr.URL)
	h.flushTelemetry(context.WithoutCancel(ctx))
	return pr, nil
}

// RecordPullRequest records a pull request opened for the session (by its
// sandbox, through the gateway): its URL joins the session's pr_urls at once.
func (h *Hub) RecordPullRequest(ctx context.Context, url string) {
	h.counters.RecordPRURL(url)
	h.flushTelemetry(context.WithoutCancel(ctx))
}

// handleGit answers a git client message off the read loop: git_status for
// get_git_status, git_result for the mutations, to the requesting client.
func (h *Hub) handleGit(c Client, p *auth.Principal, msg protocol.ClientMessage) {
	done := h.ToolCallStarted() // keeps the hub from being evicted meanwhile
	go func() {
		defer done()
		ctx := h.life
		if msg.Type == protocol.ClientGetGitStatus {
			st, err := h.GitStatus(ctx, p, msg.WorkspacePath)
			out := protocol.GitStatusMessage{Type: protocol.MsgGitStatus, WorkspacePath: msg.WorkspacePath, OK: err == nil}
			if err != nil {
				out.Error = GitErrorText(err)
			} else {
				out.Status = &st
			}
			h.sendTo(c, out)
			return
		}
		res := protocol.GitResultMessage{Type: protocol.MsgGitResult, WorkspacePath: msg.WorkspacePath}
		var err error
		switch msg.Type {
		case protocol.ClientGitCreateBranch:
			res.Action, res.Branch = GitActionBranch, msg.Branch
			err = h.GitCreateBranch(ctx, p, msg.WorkspacePath, msg.Branch)
		case protocol.ClientGitCommit:
			res.Action = GitActionCommit
			var cr gitops.CommitResult
			cr, err = h.GitCommit(ctx, p, msg.WorkspacePath, gitops.CommitRequest{Message: msg.Message, Mode: msg.Mode, Files: msg.Files})
			res.SHA, res.Branch = cr.SHA, cr.Branch
		case protocol.ClientGitPush:
			res.Action = GitActionPush
			var pr gitops.PushResult
			pr, err = h.GitPush(ctx, p, msg.WorkspacePath)
			if err == nil {
				res.Push = &pr
				res.Branch = pr.Branch
			}
		case protocol.ClientGitCreatePR:
			res.Action = GitActionPR
			var pr gitops.PullRequest
			pr, err = h.GitCreatePR(ctx, p, msg.WorkspacePath, gitops.PRInput{Title: msg.Title, Body: msg.Body, Base: msg.Base, Draft: msg.Draft})
			res.PRURL, res.PRNumber = pr.URL, pr.Number
		}
		res.OK = err == nil
		if err != nil {
			res.Error = GitErrorText(err)
			h.log.Info("hub: git operation failed", "action", res.Action, "err", err)
		}
		h.sendTo(c, res)
	}()
}

// GitErrorText is the user-facing text of a git operation error: git's and
// GitHub's own messages (tokens redacted) for operation failures, a generic
// text for internal ones.
func GitErrorText(err error) string {
	var ge *gitops.GitError
	var ae *gitops.APIError
	switch {
	case errors.Is(err, ErrForbidden):
		return "forbidden: only the session's creator can do this"
	case errors.Is(err, ErrGitUnsupported):
		return "git operations are not supported by this sandbox"
	case errors.Is(err, ErrSessionEnded):
		return "the session has ended"
	case errors.Is(err, ErrNotOwner):
		return protocol.ReasonNotOwner
	case errors.Is(err, gitops.ErrNothingToCommit), errors.Is(err, gitops.ErrInvalidPath),
		errors.Is(err, gitops.ErrInvalidRequest), errors.Is(err, gitops.ErrDetached),
		errors.Is(err, gitops.ErrBusy), errors.Is(err, gitops.ErrNotRepo),
		errors.As(err, &ge), errors.As(err, &ae):
		return strings.TrimPrefix(err.Error(), "gitops: ")
	case strings.Contains(err.Error(), "GitHub is not configured"):
		return "GitHub is not configured; pull requests cannot be created"
	}
	return "the git operation failed; please retry"
}
