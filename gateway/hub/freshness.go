package hub

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// GitFreshness configures git freshness on restore (Deps.GitFreshness): when a boot restores a snapshot (a paused
// session resumed, or a configuration's snapshot), each repository of the
// session is fetched and fast-forwarded when its tree is clean and its
// branch has not diverged, before the agent gets a prompt. A dirty or
// diverged tree is left alone and the agent is told in front of its next
// prompt.
type GitFreshness struct {
	// PullOnRestore enables it (SANDBOX_GIT_PULL_ON_RESTORE); false = off.
	PullOnRestore bool
	// Cadence is the least time between two freshness passes of a session
	// (SANDBOX_GIT_PULL_CADENCE_SECONDS); 0 = at every restore. It only
	// advances when every repository's fetch succeeded, so a failed pass
	// is retried at the next restore.
	Cadence time.Duration
}

// FreshnessTimeout bounds a restore's freshness pass (all repositories).
const FreshnessTimeout = 90 * time.Second

func freshKey(sessionID string) string { return "session:" + sessionID + ":git_fresh_at" }

// freshen runs the freshness pass on a restored sandbox. It never fails the
// boot: a repository it cannot reach is reported to the agent like a dirty
// one.
// repos are the session's repositories when the boot already resolved
// them (a configuration's snapshot); nil resolves them here.
func (h *Hub) freshen(ctx context.Context, sess sessions.Session, sb sandbox.Sandbox, repos []sandbox.Repo) {
	d := h.m.d
	ex, ok := d.Provider.(sandbox.Executor)
	if !d.GitFreshness.PullOnRestore || !ok || d.Repos == nil {
		return
	}
	now := d.Now()
	if d.GitFreshness.Cadence > 0 && d.Redis != nil {
		if v, err := d.Redis.Get(ctx, freshKey(sess.ID)).Result(); err == nil {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && now.Sub(time.UnixMilli(ms)) < d.GitFreshness.Cadence {
				return
			}
		}
	}
	start := time.Now()
	// A remote that does not answer delays the resume by this much at
	// most; its repository is reported as not checked.
	ctx, cancel := context.WithTimeout(ctx, FreshnessTimeout)
	defer cancel()
	if repos == nil {
		var err error
		if repos, err = d.Repos.ResolveRepos(ctx, sess); err != nil {
			h.log.Warn("hub: git freshness: resolve repos", "err", err)
			return
		}
	}
	var results []gitops.Freshness
	failed := 0
	for _, rp := range repos {
		p := rp.WorkspacePath
		if p == "" {
			p = strings.TrimSuffix(path.Base(strings.TrimRight(rp.CloneURL, "/")), ".git")
		}
		r, err := gitops.Open(ex, sb.ID, p, d.Git.Options)
		var f gitops.Freshness
		if err == nil {
			f, err = r.Freshen(ctx, rp.Token)
		}
		if err != nil {
			failed++
			h.log.Warn("hub: git freshness: repository left as it was", "workspace_path", p, "err", err)
			f = gitops.Freshness{Path: p, Outcome: "failed"}
		}
		results = append(results, f)
	}
	if failed == 0 && d.GitFreshness.Cadence > 0 && d.Redis != nil {
		ttl := max(d.GitFreshness.Cadence, time.Minute)
		if err := d.Redis.Set(ctx, freshKey(sess.ID), strconv.FormatInt(now.UnixMilli(), 10), ttl).Err(); err != nil {
			h.log.Warn("hub: git freshness: record cadence", "err", err)
		}
	}
	h.log.Info("hub: git freshness", "repos", len(results), "failed", failed, "took", time.Since(start))
	if note := FreshnessNote(results); note != "" {
		h.mu.Lock()
		h.freshNote = note
		h.mu.Unlock()
	}
}

// FreshnessNote is what the agent is told about a freshness pass, in front
// of its next prompt: the repositories brought up to date and those left
// alone (dirty, diverged, unreachable); "" when nothing is worth telling.
func FreshnessNote(results []gitops.Freshness) string {
	var b strings.Builder
	for _, f := range results {
		switch f.Outcome {
		case gitops.FreshUpdated:
			fmt.Fprintf(&b, "- `%s`: fast-forwarded %s to %s (%s, %d new commits).\n", f.Path, f.Branch, short(f.To), f.Upstream, f.Behind)
		case gitops.FreshDirty:
			fmt.Fprintf(&b, "- `%s`: has uncommitted changes, so it was NOT updated; run `git fetch` and integrate %s yourself when appropriate.\n", f.Path, orDefault(f.Upstream, "the upstream"))
		case gitops.FreshDiverged:
			fmt.Fprintf(&b, "- `%s`: %s has diverged from %s (%d local, %d new upstream commits), so it was NOT updated; rebase or merge yourself when appropriate.\n", f.Path, f.Branch, f.Upstream, f.Ahead, f.Behind)
		case "failed":
			fmt.Fprintf(&b, "- `%s`: could not be checked against its remote; it may be out of date.\n", f.Path)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "[Proliferate] This session's workspace was restored from a snapshot; its repositories were checked against their remotes:\n" + b.String() + "\n"
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// takeFreshNote returns and clears the pending freshness note.
func (h *Hub) takeFreshNote() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.freshNote
	h.freshNote = ""
	return n
}
