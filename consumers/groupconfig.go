package consumers

import (
	"fmt"

	"github.com/proliferate/proliferate/consumers/group"
)

// ForGroup is cfg set up to run consumer group g: its name (unless cfg
// names another group id, as a replaying deployment does), its input
// topics and its own settings over cfg's. It fails when cfg's handler is
// not the kind g runs.
func ForGroup(g group.Group, cfg Config) (Config, error) {
	switch {
	case g.Kind == group.Record && (cfg.Handler == nil || cfg.BatchHandler != nil):
		return Config{}, fmt.Errorf("consumer group %s runs a record handler (consumers.Handler)", g.Name)
	case g.Kind == group.Batch && (cfg.BatchHandler == nil || cfg.Handler != nil):
		return Config{}, fmt.Errorf("consumer group %s runs a batch handler (consumers.BatchHandler)", g.Name)
	case g.Kind != group.Record && g.Kind != group.Batch:
		return Config{}, g.Validate()
	}
	if cfg.Group == "" {
		cfg.Group = g.Name
	}
	cfg.Topics = g.Inputs
	if g.Settings.MaxAttempts > 0 {
		cfg.Retry.MaxAttempts = g.Settings.MaxAttempts
	}
	if g.Settings.MaxBatch > 0 {
		cfg.MaxBatch = g.Settings.MaxBatch
	}
	return cfg, nil
}
