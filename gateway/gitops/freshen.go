package gitops

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Freshness outcomes (Freshness.Outcome).
const (
	// FreshUpdated: the branch was fast-forwarded to its upstream.
	FreshUpdated = "updated"
	// FreshUpToDate: nothing new upstream (or the branch is only ahead).
	FreshUpToDate = "up_to_date"
	// FreshDirty: tracked files are modified (or a merge or rebase is in
	// progress); the tree was left alone.
	FreshDirty = "dirty"
	// FreshDiverged: the branch and its upstream both have commits the
	// other lacks; the tree was left alone.
	FreshDiverged = "diverged"
	// FreshNoUpstream: detached HEAD or a branch without an upstream.
	FreshNoUpstream = "no_upstream"
)

// Freshness is what Freshen did to one repository.
type Freshness struct {
	Path     string `json:"workspace_path"`
	Branch   string `json:"branch,omitempty"`
	Upstream string `json:"upstream,omitempty"`
	Outcome  string `json:"outcome"`
	// From and To are the HEAD commits before and after (FreshUpdated).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Ahead and Behind count commits against the fetched upstream.
	Ahead  int `json:"ahead"`
	Behind int `json:"behind"`
}

// Freshen brings a clean branch up to date with its upstream: git fetch of the upstream's remote,
// then git merge --ff-only when the branch is behind and has no commits of
// its own. A tree with modified tracked files, a merge or rebase in
// progress, or a diverged branch is left exactly as it is (Outcome says
// why); untracked files do not block it (a fast-forward that would
// overwrite one fails and is reported as an error). token (may be empty)
// authenticates HTTPS remotes and is never part of an error.
func (r *Repo) Freshen(ctx context.Context, token string) (Freshness, error) {
	out := Freshness{Path: r.path}
	st, err := r.Status(ctx)
	if err != nil {
		return out, err
	}
	out.Branch, out.Upstream, out.From = st.Branch, st.Upstream, st.Head
	if st.Busy || st.Merging || st.Rebasing || trackedChanges(st) {
		out.Outcome = FreshDirty
		return out, nil
	}
	if st.Detached || st.Upstream == "" || st.Head == "" {
		out.Outcome = FreshNoUpstream
		return out, nil
	}
	remote, _, ok := strings.Cut(st.Upstream, "/")
	if !ok {
		out.Outcome = FreshNoUpstream
		return out, nil
	}
	if _, err := r.must(ctx, runOpts{network: true, token: token}, "fetch", "fetch", "--quiet", "--", remote); err != nil {
		return out, err
	}
	res, err := r.must(ctx, runOpts{readOnly: true}, "rev-list", "rev-list", "--left-right", "--count", "HEAD...@{upstream}")
	if err != nil {
		return out, err
	}
	if out.Ahead, out.Behind, err = parseCounts(res.Stdout); err != nil {
		return out, err
	}
	switch {
	case out.Behind == 0:
		out.Outcome = FreshUpToDate
		return out, nil
	case out.Ahead > 0:
		out.Outcome = FreshDiverged
		return out, nil
	}
	if _, err := r.must(ctx, runOpts{}, "merge", "merge", "--ff-only", "--quiet", "@{upstream}"); err != nil {
		return out, err
	}
	head, err := r.must(ctx, runOpts{readOnly: true}, "rev-parse", "rev-parse", "HEAD")
	if err != nil {
		return out, err
	}
	out.To = strings.TrimSpace(string(head.Stdout))
	out.Outcome = FreshUpdated
	return out, nil
}

// trackedChanges reports modified, renamed or unmerged tracked files.
func trackedChanges(st Status) bool {
	for _, f := range st.Files {
		if f.Kind != KindUntracked && f.Kind != KindIgnored {
			return true
		}
	}
	return false
}

// parseCounts parses `git rev-list --left-right --count` ("ahead\tbehind").
func parseCounts(b []byte) (ahead, behind int, err error) {
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("gitops: rev-list: unexpected output %q", b)
	}
	if ahead, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, fmt.Errorf("gitops: rev-list: %w", err)
	}
	if behind, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, fmt.Errorf("gitops: rev-list: %w", err)
	}
	return ahead, behind, nil
}
