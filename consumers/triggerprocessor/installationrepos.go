package triggerprocessor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// InstallationRepos applies GitHub's installation_repositories events (an
// installation gained or lost repositories) to the org's repos;
// *integrations.Service implements it. Deps.Integrations is used when it
// implements this too.
type InstallationRepos interface {
	SyncInstallationRepos(ctx context.Context, installationID int64, added []integrations.GitHubRepository, removed []int64) (integrations.SyncResult, error)
}

// installationReposEvent is the part of an installation_repositories payload
// read here.
type installationReposEvent struct {
	Action       string `json:"action"`
	Installation struct {
		ID int64 `json:"id"`
	} `json:"installation"`
	Added   []integrations.GitHubRepository `json:"repositories_added"`
	Removed []struct {
		ID int64 `json:"id"`
	} `json:"repositories_removed"`
}

// installationRepos handles an installation_repositories webhook (done =
// true) by updating the installation's repos; it starts no run. A payload
// that cannot be read is dropped with a warning, as lifecycle webhooks are.
func (p *processor) installationRepos(ctx context.Context, log *slog.Logger, w providers.Webhook) (done bool, err error) {
	if w.Provider != providers.GitHub || w.Headers["x-github-event"] != "installation_repositories" {
		return false, nil
	}
	var ev installationReposEvent
	if err := json.Unmarshal(w.Body, &ev); err != nil || ev.Installation.ID <= 0 {
		log.Warn("unparseable installation_repositories webhook dropped", "error", err)
		return true, nil
	}
	sync, ok := p.d.Integrations.(InstallationRepos)
	if !ok {
		return true, consumers.Permanent(errors.New("trigger-processor: installation_repositories webhook but no integrations service"))
	}
	var removed []int64
	for _, r := range ev.Removed {
		if r.ID > 0 {
			removed = append(removed, r.ID)
		}
	}
	var added []integrations.GitHubRepository
	for _, r := range ev.Added {
		if r.ID > 0 && r.FullName != "" {
			added = append(added, r)
		}
	}
	res, err := sync.SyncInstallationRepos(ctx, ev.Installation.ID, added, removed)
	if err != nil {
		return true, fmt.Errorf("sync repositories of installation %d: %w", ev.Installation.ID, err)
	}
	log.Info("installation repositories synced", "installation_id", ev.Installation.ID, "action", ev.Action,
		"integrations", res.Integrations, "imported", res.Imported, "updated", res.Updated, "skipped", res.Skipped,
		"unbound", res.Unbound, "orphaned", res.Orphaned)
	return true, nil
}
