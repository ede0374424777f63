package protocol

// Git file kinds in GitStatus.Files.
const (
	GitKindChanged   = "changed"
	GitKindRenamed   = "renamed"
	GitKindUnmerged  = "unmerged"
	GitKindUntracked = "untracked"
	GitKindIgnored   = "ignored"
)

// GitFileStatus is one entry of `git status --porcelain=v2`.
type GitFileStatus struct {
	Path string `json:"path"`
	// OrigPath is the source of a rename or copy.
	OrigPath string `json:"orig_path,omitempty"`
	Kind     string `json:"kind"`
	// Index and Worktree are the XY status letters ("." = unchanged; "?"
	// for untracked files).
	Index    string `json:"index"`
	Worktree string `json:"worktree"`
}

// GitStatus is a repository's state.
type GitStatus struct {
	// Branch is the current branch; empty when Detached.
	Branch   string `json:"branch"`
	Detached bool   `json:"detached"`
	// Head is the HEAD commit; empty on an unborn branch.
	Head string `json:"head,omitempty"`
	// Upstream is the tracking branch (origin/main); Ahead and Behind are
	// counted against it.
	Upstream string          `json:"upstream,omitempty"`
	Ahead    int             `json:"ahead"`
	Behind   int             `json:"behind"`
	Files    []GitFileStatus `json:"files"`
	Clean    bool            `json:"clean"`
	// Probes: another git process holds index.lock; the clone is shallow;
	// a rebase or merge is in progress.
	Busy     bool `json:"busy"`
	Shallow  bool `json:"shallow"`
	Rebasing bool `json:"rebasing"`
	Merging  bool `json:"merging"`
}

// GitPushResult is what a push did.
type GitPushResult struct {
	Branch string `json:"branch"`
	Remote string `json:"remote"`
	// SetUpstream: the branch had no upstream; it now tracks Remote/Branch.
	SetUpstream bool `json:"set_upstream"`
	// Unshallowed: the push was rejected for a shallow clone, the history
	// was fetched and the push retried.
	Unshallowed bool `json:"unshallowed"`
}

// GitStatusMessage answers get_git_status.
type GitStatusMessage struct {
	Type          string     `json:"type"`
	WorkspacePath string     `json:"workspace_path"`
	OK            bool       `json:"ok"`
	Error         string     `json:"error,omitempty"`
	Status        *GitStatus `json:"status,omitempty"`
}

// GitResultMessage answers git_create_branch, git_commit, git_push and
// git_create_pr (Action: create_branch | commit | push | create_pr).
type GitResultMessage struct {
	Type          string         `json:"type"`
	Action        string         `json:"action"`
	WorkspacePath string         `json:"workspace_path"`
	OK            bool           `json:"ok"`
	Error         string         `json:"error,omitempty"`
	Branch        string         `json:"branch,omitempty"`
	SHA           string         `json:"sha,omitempty"`
	Push          *GitPushResult `json:"push,omitempty"`
	PRURL         string         `json:"pr_url,omitempty"`
	PRNumber      int            `json:"pr_number,omitempty"`
}
