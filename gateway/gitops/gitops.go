// Package gitops runs git operations in a session's sandbox for the
// gateway's git panel: status, create branch, commit, push, and pull
// request creation through the GitHub REST API.
//
// Every git command runs through sandbox.Executor (the provider decides
// where: a local process, a container), in a repository of the workspace
// named by a validated workspace-relative path (multi-repo workspaces),
// without a shell, with a timeout and a non-interactive environment
// (GIT_TERMINAL_PROMPT=0, GIT_ASKPASS=/bin/true, no system config) so a
// missing credential fails instead of hanging; read-only commands also set
// GIT_OPTIONAL_LOCKS=0 so status never competes with the agent for
// index.lock.
//
// Push credentials (a GitHub installation token from a TokenSource) reach
// git through GIT_CONFIG_* environment entries as an http.extraHeader: they
// appear neither in arguments nor in .git/config, and are redacted from
// errors. A push rejected because the clone is shallow ("shallow update not
// allowed") is retried once after unshallowing from the push remote, then
// from the other remotes.
package gitops

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// Errors callers map to user-facing messages.
var (
	// ErrNothingToCommit: the selected changes are empty.
	ErrNothingToCommit = errors.New("gitops: nothing to commit: no changes in the selected files")
	// ErrInvalidPath: a workspace or file path is absolute or escapes.
	ErrInvalidPath = errors.New("gitops: invalid path")
	// ErrInvalidRequest: a malformed request (empty message, bad branch name…).
	ErrInvalidRequest = errors.New("gitops: invalid request")
	// ErrDetached: HEAD is not on a branch.
	ErrDetached = errors.New("gitops: HEAD is detached; create a branch first")
	// ErrBusy: another git process holds the index lock.
	ErrBusy = errors.New("gitops: repository is busy (index.lock exists); retry shortly")
	// ErrNotRepo: the workspace path is not a git repository.
	ErrNotRepo = errors.New("gitops: not a git repository")
	// ErrGitHubUnavailable: GitHub's API could not be reached (network,
	// timeout) or answered with a server error.
	ErrGitHubUnavailable = errors.New("gitops: GitHub could not be reached")
	// ErrTokenUnavailable: the repository's GitHub credentials could not be
	// obtained (the token source failed).
	ErrTokenUnavailable = errors.New("gitops: GitHub credentials could not be obtained")
)

// errOutside is wrapped in ErrNotRepo: the directory belongs to a
// repository whose root lies outside the workspace (e.g. a workspace
// without repos inside another checkout); git must not touch it.
var errOutside = errors.New("its repository root lies outside the workspace")

// GitError is a failed git command.
type GitError struct {
	Op       string // status, commit, push…
	ExitCode int
	Stderr   string // redacted, trimmed
}

func (e *GitError) Error() string {
	return fmt.Sprintf("gitops: git %s failed (exit %d): %s", e.Op, e.ExitCode, e.Stderr)
}

// Options configure a Repo. Zero values take the defaults in brackets.
type Options struct {
	// Timeout bounds local git commands [60s].
	Timeout time.Duration
	// NetworkTimeout bounds push and fetch [5m].
	NetworkTimeout time.Duration
	// AuthorName and AuthorEmail sign commits [Proliferate Agent,
	// agent@proliferate.dev].
	AuthorName, AuthorEmail string
}

// Repo is one repository of a sandbox's workspace.
type Repo struct {
	ex        sandbox.Executor
	sandboxID string
	path      string
	opts      Options

	mu      sync.Mutex
	ceiling string // the workspace's parent, once the root is checked
}

// Open returns the repository at workspacePath (relative to the workspace
// root; "" or "." is the root) of sandbox sandboxID. It validates the path
// only; commands fail with ErrNotRepo when it is not a repository, or when
// git would find a repository whose root lies outside the workspace (a
// workspace without repos inside another checkout): before its first
// command a Repo checks that `git rev-parse --show-toplevel` lies in the
// workspace, and every command runs with GIT_CEILING_DIRECTORIES set to the
// workspace's parent.
func Open(ex sandbox.Executor, sandboxID, workspacePath string, opts Options) (*Repo, error) {
	p, err := CleanPath(workspacePath)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.NetworkTimeout <= 0 {
		opts.NetworkTimeout = 5 * time.Minute
	}
	if opts.AuthorName == "" {
		opts.AuthorName = "Proliferate Agent"
	}
	if opts.AuthorEmail == "" {
		opts.AuthorEmail = "agent@proliferate.dev"
	}
	return &Repo{ex: ex, sandboxID: sandboxID, path: p, opts: opts}, nil
}

// FieldError is an ErrInvalidRequest about one field of the request
// (errors.Is(err, ErrInvalidRequest) holds).
type FieldError struct {
	Field   string // the request's field: branch, message…
	Problem string
}

func (e *FieldError) Error() string { return "gitops: invalid request: " + e.Problem }

// Unwrap makes errors.Is(err, ErrInvalidRequest) hold.
func (e *FieldError) Unwrap() error { return ErrInvalidRequest }

// CleanPath validates a relative path: not absolute, no ".." escape, no
// NUL; "" becomes ".".
func CleanPath(p string) (string, error) {
	if strings.ContainsRune(p, 0) || filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %q must be relative", ErrInvalidPath, p)
	}
	c := filepath.Clean("./" + p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q escapes the workspace", ErrInvalidPath, p)
	}
	return c, nil
}

// Path is the repository's workspace-relative path.
func (r *Repo) Path() string { return r.path }

type runOpts struct {
	readOnly bool
	network  bool
	token    string
}

// git runs a git command and returns its result; a non-zero exit is not
// an error here.
func (r *Repo) git(ctx context.Context, o runOpts, args ...string) (sandbox.ExecResult, error) {
	env := gitEnv(o)
	timeout := r.opts.Timeout
	if o.network {
		timeout = r.opts.NetworkTimeout
	}
	res, err := r.exec(ctx, sandbox.ExecCommand{
		Args: append([]string{"git"}, args...), Dir: r.path, Env: env, Timeout: timeout,
	})
	if err != nil {
		return res, execError("git "+args[0], err)
	}
	return res, nil
}

// execError wraps an error of exec, leaving the repository check's own
// errors as they are.
func execError(op string, err error) error {
	if errors.Is(err, ErrNotRepo) {
		return err
	}
	return fmt.Errorf("gitops: %s: %w", op, err)
}

// exec runs a command in the repository once its root is known to lie in
// the workspace, with GIT_CEILING_DIRECTORIES set to the workspace's parent.
func (r *Repo) exec(ctx context.Context, cmd sandbox.ExecCommand) (sandbox.ExecResult, error) {
	ceiling, err := r.checkRoot(ctx)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	cmd.Env["GIT_CEILING_DIRECTORIES"] = ceiling
	return r.ex.Exec(ctx, r.sandboxID, cmd)
}

// rootProbe prints the workspace root, then the root of the repository
// git finds from the repository's directory (without a ceiling, so that a
// repository around the workspace is named as such). A directory that does
// not exist exits 3.
const rootProbe = `root=$(pwd -P) || exit 1
printf '%s\n' "$root"
cd -- "$1" 2>/dev/null || exit 3
exec git rev-parse --show-toplevel`

// checkRoot checks, once per Repo, that the repository's root lies inside
// the workspace, and returns the workspace's parent (the ceiling of every
// git command). The check holds whatever the executor (its own
// environment, isolation or none).
func (r *Repo) checkRoot(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ceiling != "" {
		return r.ceiling, nil
	}
	res, err := r.ex.Exec(ctx, r.sandboxID, sandbox.ExecCommand{
		Args: []string{"sh", "-c", rootProbe, "sh", r.path}, Dir: ".", Env: gitEnv(runOpts{readOnly: true}), Timeout: r.opts.Timeout,
	})
	if err != nil {
		return "", fmt.Errorf("gitops: repository probe: %w", err)
	}
	out := lines(res.Stdout)
	if len(out) == 0 || !filepath.IsAbs(out[0]) {
		return "", fmt.Errorf("gitops: repository probe: unexpected output %q (exit %d): %s", res.Stdout, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	root := out[0]
	if res.ExitCode != 0 {
		if res.ExitCode == 3 {
			return "", fmt.Errorf("%w: %s: no such directory", ErrNotRepo, r.path)
		}
		if strings.Contains(string(res.Stderr), "not a git repository") {
			return "", fmt.Errorf("%w: %s", ErrNotRepo, r.path)
		}
		return "", r.gitError("rev-parse", res, "")
	}
	if len(out) != 2 || !filepath.IsAbs(out[1]) {
		return "", fmt.Errorf("gitops: repository probe: unexpected output %q", res.Stdout)
	}
	top := out[1]
	if top != root && !strings.HasPrefix(top, strings.TrimSuffix(root, "/")+"/") {
		return "", fmt.Errorf("%w: %s: %w", ErrNotRepo, r.path, errOutside)
	}
	r.ceiling = filepath.Dir(root)
	return r.ceiling, nil
}

// gitEnv is the non-interactive environment of every command.
func gitEnv(o runOpts) map[string]string {
	env := map[string]string{
		"GIT_TERMINAL_PROMPT": "0",
		"GIT_ASKPASS":         "/bin/true",
		"SSH_ASKPASS":         "/bin/true",
		"GIT_SSH_COMMAND":     "ssh -o BatchMode=yes",
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_EDITOR":          "true",
		"GIT_PAGER":           "cat",
		"LC_ALL":              "C",
	}
	if o.readOnly {
		env["GIT_OPTIONAL_LOCKS"] = "0"
	}
	if o.token != "" {
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + o.token))
		env["GIT_CONFIG_COUNT"] = "1"
		env["GIT_CONFIG_KEY_0"] = "http.extraHeader"
		env["GIT_CONFIG_VALUE_0"] = "Authorization: Basic " + basic
	}
	return env
}

// must runs git and turns a non-zero exit into a *GitError.
func (r *Repo) must(ctx context.Context, o runOpts, op string, args ...string) (sandbox.ExecResult, error) {
	res, err := r.git(ctx, o, args...)
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		return res, r.gitError(op, res, o.token)
	}
	return res, nil
}

func (r *Repo) gitError(op string, res sandbox.ExecResult, token string) error {
	msg := strings.TrimSpace(string(res.Stderr))
	if msg == "" {
		msg = strings.TrimSpace(string(res.Stdout))
	}
	if token != "" {
		msg = strings.ReplaceAll(msg, token, "***")
	}
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	switch {
	case strings.Contains(msg, "not a git repository"):
		return fmt.Errorf("%w: %s", ErrNotRepo, r.path)
	case strings.Contains(msg, "index.lock"):
		return ErrBusy
	}
	return &GitError{Op: op, ExitCode: res.ExitCode, Stderr: msg}
}

// Status returns the repository's status with its probes.
func (r *Repo) Status(ctx context.Context) (Status, error) {
	ro := runOpts{readOnly: true}
	res, err := r.must(ctx, ro, "status", "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all")
	if err != nil {
		return Status{}, err
	}
	st, err := ParseStatus(res.Stdout)
	if err != nil {
		return Status{}, err
	}
	probe, err := r.must(ctx, ro, "rev-parse", "rev-parse", "--is-shallow-repository",
		"--git-path", "index.lock", "--git-path", "rebase-merge", "--git-path", "rebase-apply", "--git-path", "MERGE_HEAD")
	if err != nil {
		return Status{}, err
	}
	out := lines(probe.Stdout)
	if len(out) != 5 {
		return Status{}, fmt.Errorf("gitops: unexpected rev-parse output %q", probe.Stdout)
	}
	st.Shallow = out[0] == "true"
	existing, err := r.existing(ctx, out[1:])
	if err != nil {
		return Status{}, err
	}
	st.Busy = existing[out[1]]
	st.Rebasing = existing[out[2]] || existing[out[3]]
	st.Merging = existing[out[4]]
	return st, nil
}

// existing reports which of paths (relative to the repository) exist.
func (r *Repo) existing(ctx context.Context, paths []string) (map[string]bool, error) {
	args := append([]string{"sh", "-c", `for p do [ -e "$p" ] && printf '%s\n' "$p"; done; exit 0`, "sh"}, paths...)
	res, err := r.exec(ctx, sandbox.ExecCommand{Args: args, Dir: r.path, Env: gitEnv(runOpts{readOnly: true}), Timeout: r.opts.Timeout})
	if err != nil {
		return nil, execError("probe", err)
	}
	found := map[string]bool{}
	for _, l := range lines(res.Stdout) {
		found[l] = true
	}
	return found, nil
}

// CurrentBranch returns the checked-out branch (ErrDetached when none).
func (r *Repo) CurrentBranch(ctx context.Context) (string, error) {
	res, err := r.git(ctx, runOpts{readOnly: true}, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return "", err
	}
	if res.ExitCode == 1 {
		return "", ErrDetached
	}
	if res.ExitCode != 0 {
		return "", r.gitError("symbolic-ref", res, "")
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// CreateBranch creates branch name at HEAD and checks it out.
func (r *Repo) CreateBranch(ctx context.Context, name string) error {
	if name == "" || strings.HasPrefix(name, "-") {
		return &FieldError{Field: "branch", Problem: fmt.Sprintf("invalid branch name %q", name)}
	}
	res, err := r.git(ctx, runOpts{readOnly: true}, "check-ref-format", "--branch", name)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &FieldError{Field: "branch", Problem: fmt.Sprintf("invalid branch name %q", name)}
	}
	_, err = r.must(ctx, runOpts{}, "checkout", "checkout", "-b", name)
	return err
}

// Commit modes.
const (
	// CommitSelected commits only CommitRequest.Files (new, modified or
	// deleted), leaving other staged changes staged.
	CommitSelected = "selected"
	// CommitTracked commits every change to tracked files (git commit -a).
	CommitTracked = "tracked"
	// CommitAll stages and commits everything, untracked files included.
	CommitAll = "all"
)

// CommitRequest describes a commit.
type CommitRequest struct {
	Message string   `json:"message"`
	Mode    string   `json:"mode"`  // selected | tracked | all [all, or selected when Files is set]
	Files   []string `json:"files"` // for selected
}

// CommitResult is the created commit.
type CommitResult struct {
	SHA    string `json:"sha"`
	Branch string `json:"branch,omitempty"`
}

// Commit creates a commit; an empty change set is ErrNothingToCommit.
func (r *Repo) Commit(ctx context.Context, req CommitRequest) (CommitResult, error) {
	if strings.TrimSpace(req.Message) == "" {
		return CommitResult{}, &FieldError{Field: "message", Problem: "commit message is required"}
	}
	mode := req.Mode
	if mode == "" {
		mode = CommitAll
		if len(req.Files) > 0 {
			mode = CommitSelected
		}
	}
	var files []string
	for _, f := range req.Files {
		c, err := CleanPath(f)
		if err != nil {
			return CommitResult{}, err
		}
		if c == "." {
			return CommitResult{}, fmt.Errorf("%w: %q is not a file", ErrInvalidPath, f)
		}
		files = append(files, c)
	}
	slices.Sort(files)
	files = slices.Compact(files)
	hasHead := r.hasHead(ctx)
	base := "HEAD"
	if !hasHead {
		base = emptyTree
	}
	args := []string{"-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-F", "-"}
	switch mode {
	case CommitSelected:
		if len(files) == 0 {
			return CommitResult{}, &FieldError{Field: "files", Problem: "mode selected needs files"}
		}
		if _, err := r.must(ctx, runOpts{}, "add", append([]string{"add", "-A", "--"}, files...)...); err != nil {
			return CommitResult{}, err
		}
		if err := r.requireDiff(ctx, append([]string{"diff", "--cached", "--quiet", base, "--"}, files...)); err != nil {
			return CommitResult{}, err
		}
		args = append(args, "--only", "--")
		args = append(args, files...)
	case CommitTracked:
		if err := r.requireDiff(ctx, []string{"diff", "--quiet", base}); err != nil {
			return CommitResult{}, err
		}
		args = append(args, "-a")
	case CommitAll:
		if _, err := r.must(ctx, runOpts{}, "add", "add", "-A"); err != nil {
			return CommitResult{}, err
		}
		if err := r.requireDiff(ctx, []string{"diff", "--cached", "--quiet", base}); err != nil {
			return CommitResult{}, err
		}
	default:
		return CommitResult{}, &FieldError{Field: "mode", Problem: fmt.Sprintf("unknown commit mode %q (selected, tracked or all)", mode)}
	}
	commitEnv := gitEnv(runOpts{})
	commitEnv["GIT_AUTHOR_NAME"], commitEnv["GIT_AUTHOR_EMAIL"] = r.opts.AuthorName, r.opts.AuthorEmail
	commitEnv["GIT_COMMITTER_NAME"], commitEnv["GIT_COMMITTER_EMAIL"] = r.opts.AuthorName, r.opts.AuthorEmail
	res, err := r.exec(ctx, sandbox.ExecCommand{
		Args: append([]string{"git"}, args...), Dir: r.path, Stdin: []byte(req.Message), Timeout: r.opts.Timeout,
		Env: commitEnv,
	})
	if err != nil {
		return CommitResult{}, execError("git commit", err)
	}
	if res.ExitCode != 0 {
		return CommitResult{}, r.gitError("commit", res, "")
	}
	sha, err := r.must(ctx, runOpts{readOnly: true}, "rev-parse", "rev-parse", "HEAD")
	if err != nil {
		return CommitResult{}, err
	}
	out := CommitResult{SHA: strings.TrimSpace(string(sha.Stdout))}
	if b, err := r.CurrentBranch(ctx); err == nil {
		out.Branch = b
	}
	return out, nil
}

// emptyTree is git's empty tree object (the base of an unborn branch).
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

func (r *Repo) hasHead(ctx context.Context) bool {
	res, err := r.git(ctx, runOpts{readOnly: true}, "rev-parse", "--verify", "--quiet", "HEAD")
	return err == nil && res.ExitCode == 0
}

// requireDiff runs a `git diff --quiet` variant: exit 0 (no difference) is
// ErrNothingToCommit, 1 means changes.
func (r *Repo) requireDiff(ctx context.Context, args []string) error {
	res, err := r.git(ctx, runOpts{readOnly: true}, args...)
	if err != nil {
		return err
	}
	switch res.ExitCode {
	case 0:
		return ErrNothingToCommit
	case 1:
		return nil
	}
	return r.gitError("diff", res, "")
}

// PushResult describes a push.
type PushResult = protocol.GitPushResult

// Push pushes the current branch: to its upstream when it has one,
// otherwise with `-u origin <branch>`. token (may be empty) authenticates
// HTTPS remotes.
func (r *Repo) Push(ctx context.Context, token string) (PushResult, error) {
	branch, err := r.CurrentBranch(ctx)
	if err != nil {
		return PushResult{}, err
	}
	out := PushResult{Branch: branch, Remote: "origin"}
	args := []string{"push", "--porcelain"}
	up, err := r.git(ctx, runOpts{readOnly: true}, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
	if err != nil {
		return PushResult{}, err
	}
	if up.ExitCode == 0 {
		if remote, _, ok := strings.Cut(strings.TrimSpace(string(up.Stdout)), "/"); ok {
			out.Remote = remote
		}
	} else {
		out.SetUpstream = true
		args = append(args, "-u", "origin", branch)
	}
	o := runOpts{network: true, token: token}
	res, err := r.git(ctx, o, args...)
	if err != nil {
		return PushResult{}, err
	}
	if res.ExitCode != 0 && isShallowRejection(res) {
		if err := r.unshallow(ctx, out.Remote, token); err != nil {
			return PushResult{}, err
		}
		out.Unshallowed = true
		res, err = r.git(ctx, o, args...)
		if err != nil {
			return PushResult{}, err
		}
	}
	if res.ExitCode != 0 {
		return PushResult{}, r.gitError("push", res, token)
	}
	return out, nil
}

func isShallowRejection(res sandbox.ExecResult) bool {
	s := string(res.Stdout) + string(res.Stderr)
	return strings.Contains(s, "shallow update not allowed")
}

// unshallow fetches the full history from the push remote, then from the
// other remotes, until the clone is complete.
func (r *Repo) unshallow(ctx context.Context, pushRemote, token string) error {
	res, err := r.must(ctx, runOpts{readOnly: true}, "remote", "remote")
	if err != nil {
		return err
	}
	remotes := []string{pushRemote}
	for _, rm := range lines(res.Stdout) {
		if rm != pushRemote {
			remotes = append(remotes, rm)
		}
	}
	var last error
	for _, rm := range remotes {
		res, err := r.git(ctx, runOpts{network: true, token: token}, "fetch", "--quiet", "--unshallow", rm)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			last = r.gitError("fetch --unshallow", res, token)
		}
		if !r.isShallow(ctx) {
			return nil
		}
	}
	if last == nil {
		last = errors.New("history unavailable")
	}
	return fmt.Errorf("gitops: push rejected for a shallow clone and the history could not be fetched: %w", last)
}

func (r *Repo) isShallow(ctx context.Context) bool {
	res, err := r.git(ctx, runOpts{readOnly: true}, "rev-parse", "--is-shallow-repository")
	return err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) == "true"
}

// Remote returns a remote's URL.
func (r *Repo) Remote(ctx context.Context, name string) (string, error) {
	res, err := r.must(ctx, runOpts{readOnly: true}, "remote get-url", "remote", "get-url", "--", name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// DefaultBranch returns origin's default branch (refs/remotes/origin/HEAD),
// or "" when unknown.
func (r *Repo) DefaultBranch(ctx context.Context) string {
	res, err := r.git(ctx, runOpts{readOnly: true}, "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD")
	if err != nil || res.ExitCode != 0 {
		return ""
	}
	return strings.TrimPrefix(strings.TrimSpace(string(res.Stdout)), "origin/")
}
