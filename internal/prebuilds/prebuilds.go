// Package prebuilds resolves and records configuration snapshots: a setup session's snapshot becomes its configuration's, and later
// sessions of the configuration boot from it instead of cloning.
//
// Resolution order at boot (the hub): the session's own snapshot, then the
// configuration's ready snapshot when it was made for the current repo
// revisions and toolchain, then a fresh clone.
//
// The version key is a SHA-256 over the toolchain (the sandbox provider and
// SANDBOX_IMAGE_VERSION, which pins the image/OpenCode build) and, per repo in
// configuration order, its workspace path and the commit its branch points
// to on the remote (git ls-remote, authenticated like the clone). It is
// computed when the snapshot is recorded and again at every boot; a
// different key (a repo moved on, a repo added, another toolchain) means the
// snapshot is stale and the session clones fresh (logged with the reason).
// Remote revisions rather than the sandbox's HEAD are used on both sides so
// the comparison needs no running sandbox; a snapshot recorded while the
// remote had already moved past the sandbox's checkout is fast-forwarded by
// the freshness pass after restore.
package prebuilds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Rev is one repository's revision in a version key.
type Rev struct {
	WorkspacePath string
	SHA           string
}

// VersionKey hashes the toolchain and the repo revisions (order matters:
// configuration order).
func VersionKey(toolchain string, revs []Rev) string {
	h := sha256.New()
	fmt.Fprintf(h, "proliferate-configuration-snapshot/v1\x00%s\x00", toolchain)
	for _, r := range revs {
		fmt.Fprintf(h, "%s\x00%s\x00", r.WorkspacePath, r.SHA)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RemoteRevs asks each repository's remote which commit its branch (or
// HEAD, when no branch is set) points to. Tokens travel as an
// http.extraHeader in GIT_CONFIG_* variables, never on the command line,
// and never appear in errors.
func RemoteRevs(ctx context.Context, repos []sandbox.Repo) ([]Rev, error) {
	out := make([]Rev, 0, len(repos))
	for _, r := range repos {
		sha, err := lsRemote(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, Rev{WorkspacePath: r.WorkspacePath, SHA: sha})
	}
	return out, nil
}

func lsRemote(ctx context.Context, r sandbox.Repo) (string, error) {
	ref := "HEAD"
	if r.Branch != "" {
		ref = "refs/heads/" + r.Branch
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "ls-remote", "--", r.CloneURL, ref)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
	}
	if r.Token != "" {
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + r.Token))
		cmd.Env = append(cmd.Env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+basic)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if r.Token != "" {
			msg = strings.ReplaceAll(msg, r.Token, "***")
		}
		return "", fmt.Errorf("prebuilds: git ls-remote %s: %w: %s", redactURL(r.CloneURL), err, msg)
	}
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		sha, name, ok := strings.Cut(line, "\t")
		if ok && name == ref && len(sha) >= 40 {
			return sha, nil
		}
	}
	return "", fmt.Errorf("prebuilds: git ls-remote %s: %s not found", redactURL(r.CloneURL), ref)
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// Snapshot is a configuration's current snapshot.
type Snapshot struct {
	ID, Provider, VersionKey string
}

// Resolver finds and records configuration snapshots.
type Resolver struct {
	Pool *pgxpool.Pool
	// Toolchain is the toolchain part of the version key (provider name
	// and SANDBOX_IMAGE_VERSION).
	Toolchain string
	// Repos lists a session's repositories with clone URLs and tokens
	// (the gateway's repo resolver).
	Repos func(ctx context.Context, s sessions.Session) ([]sandbox.Repo, error)
	Log   *slog.Logger
}

func (r *Resolver) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// Current returns the configuration's usable snapshot: its snapshot_id
// made from the current repo list (snapshot_repos_version =
// repos_version). While a rebuild runs (building) or after it failed, the
// previous snapshot stays usable (repos-prebuilds.md: "a previous
// snapshot_id stays usable"); the version key still decides at boot.
func (r *Resolver) Current(ctx context.Context, orgID, configurationID string) (Snapshot, bool, error) {
	row, err := prebuildsdb.New(r.Pool).CurrentSnapshot(ctx, prebuildsdb.CurrentSnapshotParams{ID: configurationID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Snapshot{}, false, nil
	}
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("prebuilds: configuration snapshot: %w", err)
	}
	s := Snapshot{ID: row.SnapshotID}
	if row.SnapshotProvider != nil {
		s.Provider = *row.SnapshotProvider
	}
	if row.SnapshotVersionKey != nil {
		s.VersionKey = *row.SnapshotVersionKey
	}
	return s, true, nil
}

// Key computes the current version key of the given repositories.
func (r *Resolver) Key(ctx context.Context, repos []sandbox.Repo) (string, error) {
	revs, err := RemoteRevs(ctx, repos)
	if err != nil {
		return "", err
	}
	return VersionKey(r.Toolchain, revs), nil
}

// Resolve returns the configuration snapshot a fresh boot of sess (no
// snapshot of its own) should restore, or "" to clone; repos are the
// session's repositories (already resolved by the caller). It never fails
// the boot: any problem means a fresh clone, logged with the reason.
func (r *Resolver) Resolve(ctx context.Context, sess sessions.Session, provider string, repos []sandbox.Repo) string {
	if sess.ConfigurationID == nil || len(repos) == 0 {
		return ""
	}
	log := r.log().With("session_id", sess.ID, "configuration_id", *sess.ConfigurationID)
	if sess.SessionType == sessions.TypeSetup {
		// A configuration build's session builds from a fresh clone.
		build, err := prebuildsdb.New(r.Pool).BuildOfSession(ctx, sess.ID)
		if err != nil {
			log.Warn("configuration snapshot not resolved; cloning fresh", "err", err)
			return ""
		}
		if build {
			log.Info("configuration build: cloning fresh")
			return ""
		}
	}
	snap, ok, err := r.Current(ctx, sess.OrgID, *sess.ConfigurationID)
	if err != nil {
		log.Warn("configuration snapshot not resolved; cloning fresh", "err", err)
		return ""
	}
	if !ok {
		return ""
	}
	switch {
	case snap.Provider != "" && snap.Provider != provider:
		log.Info("configuration snapshot of another provider; cloning fresh", "snapshot_id", snap.ID, "snapshot_provider", snap.Provider)
		return ""
	case snap.VersionKey == "":
		log.Info("configuration snapshot has no version key; cloning fresh", "snapshot_id", snap.ID)
		return ""
	}
	key, err := r.Key(ctx, repos)
	if err != nil {
		log.Warn("configuration snapshot: repo revisions unknown; cloning fresh", "snapshot_id", snap.ID, "err", err)
		return ""
	}
	if key != snap.VersionKey {
		log.Info("configuration snapshot is stale (other repo revisions or toolchain); cloning fresh", "snapshot_id", snap.ID)
		return ""
	}
	log.Info("booting from the configuration snapshot", "snapshot_id", snap.ID)
	return snap.ID
}

// Record makes snapshotID the configuration's ready snapshot (a setup
// session's save_snapshot or finalization), with the version key of the
// session's repositories now. It reports whether the configuration (of the
// session's organization) was updated. A key that cannot be computed is
// stored as NULL: the snapshot is kept but never restored.
func (r *Resolver) Record(ctx context.Context, sess sessions.Session, snapshotID string) (bool, error) {
	if sess.ConfigurationID == nil {
		return false, nil
	}
	var key *string
	if r.Repos != nil {
		repos, err := r.Repos(ctx, sess)
		if err == nil {
			var k string
			if k, err = r.Key(ctx, repos); err == nil {
				key = &k
			}
		}
		if err != nil {
			r.log().Warn("configuration snapshot recorded without a version key (it will not be restored)",
				"session_id", sess.ID, "configuration_id", *sess.ConfigurationID, "err", err)
		}
	}
	n, err := prebuildsdb.New(r.Pool).RecordSessionSnapshot(ctx, prebuildsdb.RecordSessionSnapshotParams{
		ID: *sess.ConfigurationID, OrgID: sess.OrgID, SnapshotID: snapshotID, Provider: sess.SandboxProvider, VersionKey: key,
	})
	if err != nil {
		return false, fmt.Errorf("prebuilds: record configuration snapshot: %w", err)
	}
	return n == 1, nil
}
