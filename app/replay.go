package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/topics"
)

// ReplayOptions are the flags of `proliferate replay`.
type ReplayOptions struct {
	// AllowRetentionLoss replays although retention has deleted the oldest
	// records of the group's topics.
	AllowRetentionLoss bool
}

// Replay rebuilds the tables consumer group name owns (its descriptor's Owns)
// from its topics with the group's own handler, then sets the group's
// offsets to the replayed point (consumers.Replay). The group must be
// stopped; a group that owns no tables is refused.
func (a *App) Replay(ctx context.Context, name string, o ReplayOptions) (consumers.ReplayReport, error) {
	g, ok := topics.LookupGroup(name)
	if !ok {
		var names []string
		for _, g := range topics.Groups() {
			names = append(names, g.Name)
		}
		return consumers.ReplayReport{}, fmt.Errorf("unknown consumer group %q (groups: %s)", name, strings.Join(names, ", "))
	}
	if len(g.Owns) == 0 {
		var replayable []string
		for _, g := range topics.Groups() {
			if len(g.Owns) > 0 {
				replayable = append(replayable, g.Name)
			}
		}
		return consumers.ReplayReport{}, fmt.Errorf("consumer group %s owns no tables (group.Group.Owns in its package): its effects are not a pure function of its topics, so it cannot be replayed (replayable: %s)",
			name, strings.Join(replayable, ", "))
	}
	w, ok := wiring(name)
	if !ok {
		return consumers.ReplayReport{}, fmt.Errorf("consumer group %s is not built into this binary", name)
	}
	if err := a.OpenPostgres(ctx); err != nil {
		return consumers.ReplayReport{}, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return consumers.ReplayReport{}, err
	}
	var cfg consumers.Config
	if err := w.handlers(ctx, a, &cfg); err != nil {
		return consumers.ReplayReport{}, fmt.Errorf("consumer group %s: %w", name, err)
	}
	ro := consumers.ReplayOptions{Group: name, Topics: g.Inputs, Tables: g.Owns, Pool: a.Pool,
		Kafka: a.KafkaOptions("replay/" + name), Codec: a.Codec, AllowRetentionLoss: o.AllowRetentionLoss,
		Logger: a.Log, Handler: cfg.Handler, BatchHandler: cfg.BatchHandler}
	return consumers.Replay(ctx, ro)
}
