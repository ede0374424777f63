package hub

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
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

// SessionGit runs git operations on the repositories in one session's
// sandbox workspace, for the HTTP git routes (Hub.Git) and the git client
// messages. It reaches the hub only through the functions it was built
// with: the session row, a ready runtime's sandbox, and the telemetry of
// pull requests.
type SessionGit struct {
	exec sandbox.Executor // nil: the provider cannot run commands
	deps GitDeps
	log  *slog.Logger
	// session returns the hub's copy of the session row.
	session func() sessions.Session
	// sandbox makes the runtime ready and returns its sandbox id.
	sandbox func(ctx context.Context) (string, error)
	// recordPR adds a pull request URL to the session's telemetry and
	// flushes it.
	recordPR func(ctx context.Context, url string)
}

func newSessionGit(provider sandbox.Provider, deps GitDeps, log *slog.Logger, session func() sessions.Session,
	sandboxID func(context.Context) (string, error), recordPR func(context.Context, string)) *SessionGit {
	ex, _ := provider.(sandbox.Executor)
	return &SessionGit{exec: ex, deps: deps, log: log, session: session, sandbox: sandboxID, recordPR: recordPR}
}

// canRead: principals that may attach (service, or a member of the
// session's organization).
func canRead(sess sessions.Session, p *auth.Principal) bool {
	if p == nil || p.Kind == auth.KindSandbox {
		return false
	}
	return p.Kind == auth.KindService || p.OrgID == sess.OrgID
}

// repo makes the runtime ready and opens the workspace repository.
func (g *SessionGit) repo(ctx context.Context, workspacePath string) (*gitops.Repo, error) {
	if g.exec == nil {
		return nil, ErrGitUnsupported
	}
	if _, err := gitops.CleanPath(workspacePath); err != nil {
		return nil, err
	}
	sandboxID, err := g.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	return gitops.Open(g.exec, sandboxID, workspacePath, g.deps.Options)
}

// Status returns the status of the repository at workspacePath.
func (g *SessionGit) Status(ctx context.Context, p *auth.Principal, workspacePath string) (gitops.Status, error) {
	if !canRead(g.session(), p) {
		return gitops.Status{}, ErrForbidden
	}
	r, err := g.repo(ctx, workspacePath)
	if err != nil {
		return gitops.Status{}, err
	}
	return r.Status(ctx)
}

// Diff returns the uncommitted changes of the repository at
// workspacePath (readable by anyone who may see the session).
func (g *SessionGit) Diff(ctx context.Context, p *auth.Principal, workspacePath string, o gitops.DiffOptions) (gitops.Diff, error) {
	if !canRead(g.session(), p) {
		return gitops.Diff{}, ErrForbidden
	}
	r, err := g.repo(ctx, workspacePath)
	if err != nil {
		return gitops.Diff{}, err
	}
	return r.Diff(ctx, o)
}

// CreateBranch creates and checks out a branch.
func (g *SessionGit) CreateBranch(ctx context.Context, p *auth.Principal, workspacePath, branch string) error {
	if !canMutate(g.session(), p) {
		return ErrForbidden
	}
	r, err := g.repo(ctx, workspacePath)
	if err != nil {
		return err
	}
	return r.CreateBranch(ctx, branch)
}

// Commit commits (gitops.ErrNothingToCommit for an empty change set).
func (g *SessionGit) Commit(ctx context.Context, p *auth.Principal, workspacePath string, req gitops.CommitRequest) (gitops.CommitResult, error) {
	if !canMutate(g.session(), p) {
		return gitops.CommitResult{}, ErrForbidden
	}
	r, err := g.repo(ctx, workspacePath)
	if err != nil {
		return gitops.CommitResult{}, err
	}
	return r.Commit(ctx, req)
}

// Push pushes the current branch (setting its upstream when missing).
func (g *SessionGit) Push(ctx context.Context, p *auth.Principal, workspacePath string) (gitops.PushResult, error) {
	if !canMutate(g.session(), p) {
		return gitops.PushResult{}, ErrForbidden
	}
	r, err := g.repo(ctx, workspacePath)
	if err != nil {
		return gitops.PushResult{}, err
	}
	token, err := g.pushToken(ctx, r)
	if err != nil {
		return gitops.PushResult{}, err
	}
	return r.Push(ctx, token)
}

// pushToken returns the token for an HTTPS origin when GitHub is
// configured ("" otherwise).
func (g *SessionGit) pushToken(ctx context.Context, r *gitops.Repo) (string, error) {
	gh := g.deps.GitHub
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
	return gh.Tokens.Token(ctx, g.session().OrgID, owner, repo)
}

// CreatePR opens a pull request from the current branch and records its
// URL in the session's telemetry (pr_urls).
func (g *SessionGit) CreatePR(ctx context.Context, p *auth.Principal, workspacePath string, in gitops.PRInput) (gitops.PullRequest, error) {
	if !canMutate(g.session(), p) {
		return gitops.PullRequest{}, ErrForbidden
	}
	if g.deps.GitHub == nil {
		return gitops.PullRequest{}, errors.New("hub: GitHub is not configured; pull requests cannot be created")
	}
	r, err := g.repo(ctx, workspacePath)
	if err != nil {
		return gitops.PullRequest{}, err
	}
	in.OrgID = g.session().OrgID
	pr, err := r.CreatePR(ctx, g.deps.GitHub, in)
	if err != nil {
		return gitops.PullRequest{}, err
	}
	g.recordPR(ctx, pr.URL)
	return pr, nil
}

// RecordPullRequest records a pull request opened for the session (by its
// sandbox, through the gateway): its URL joins the session's pr_urls at once.
func (g *SessionGit) RecordPullRequest(ctx context.Context, url string) {
	g.recordPR(ctx, url)
}

// reply answers a git client message: git_status for get_git_status,
// git_result for the mutations (the hub sends it to the requesting
// client, off the read loop).
func (g *SessionGit) reply(ctx context.Context, p *auth.Principal, msg protocol.ClientMessage) any {
	if msg.Type == protocol.ClientGetGitStatus {
		st, err := g.Status(ctx, p, msg.WorkspacePath)
		out := protocol.GitStatusMessage{Type: protocol.MsgGitStatus, WorkspacePath: msg.WorkspacePath, OK: err == nil}
		if err != nil {
			out.Error = GitErrorText(err)
		} else {
			out.Status = &st
		}
		return out
	}
	res := protocol.GitResultMessage{Type: protocol.MsgGitResult, WorkspacePath: msg.WorkspacePath}
	var err error
	switch msg.Type {
	case protocol.ClientGitCreateBranch:
		res.Action, res.Branch = GitActionBranch, msg.Branch
		err = g.CreateBranch(ctx, p, msg.WorkspacePath, msg.Branch)
	case protocol.ClientGitCommit:
		res.Action = GitActionCommit
		var cr gitops.CommitResult
		cr, err = g.Commit(ctx, p, msg.WorkspacePath, gitops.CommitRequest{Message: msg.Message, Mode: msg.Mode, Files: msg.Files})
		res.SHA, res.Branch = cr.SHA, cr.Branch
	case protocol.ClientGitPush:
		res.Action = GitActionPush
		var pr gitops.PushResult
		pr, err = g.Push(ctx, p, msg.WorkspacePath)
		if err == nil {
			res.Push = &pr
			res.Branch = pr.Branch
		}
	case protocol.ClientGitCreatePR:
		res.Action = GitActionPR
		var pr gitops.PullRequest
		pr, err = g.CreatePR(ctx, p, msg.WorkspacePath, gitops.PRInput{Title: msg.Title, Body: msg.Body, Base: msg.Base, Draft: msg.Draft})
		res.PRURL, res.PRNumber = pr.URL, pr.Number
	}
	res.OK = err == nil
	if err != nil {
		res.Error = GitErrorText(err)
		g.log.Info("hub: git operation failed", "action", res.Action, "err", err)
	}
	return res
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
