package app

import (
	"context"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/actionmaterializer"
	"github.com/proliferate/proliferate/consumers/billingledger"
	"github.com/proliferate/proliferate/consumers/billingrater"
	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/consumers/notifier"
	"github.com/proliferate/proliferate/consumers/runartifacts"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/consumers/toolmaterializer"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
)

// groupWiring builds one consumer group's handler from the App: record for
// a group of kind group.Record, batch for a group of kind group.Batch. The
// group itself (name, topics, kind, settings) is its package's descriptor.
type groupWiring struct {
	group  group.Group
	record func(a *App, ctx context.Context) (consumers.Handler, error)
	batch  func(a *App, ctx context.Context) (consumers.BatchHandler, error)
	// alongside, when set, is work the worker runs next to the group (a
	// role of its own), built after the group's handler.
	alongside func(a *App) Role
}

// groupWirings are the consumer groups this build runs: every group the
// catalog (topics.Groups) lists, and no other.
func groupWirings() []groupWiring {
	return []groupWiring{
		{group: triggerprocessor.Group, record: (*App).triggerProcessorHandler},
		{group: runstages.EnricherGroup, record: (*App).runEnricherHandler},
		{group: runstages.ExecutorGroup, record: (*App).runExecutorHandler},
		{group: runartifacts.Group, record: (*App).runArtifactsHandler},
		{group: notifier.Group, record: (*App).notifierHandler},
		{group: sessionmaterializer.Group, batch: (*App).sessionMaterializerHandler, alongside: (*App).sessionSearchIndexer},
		{group: toolmaterializer.Group, batch: (*App).toolMaterializerHandler},
		{group: actionmaterializer.Group, batch: (*App).actionMaterializerHandler},
		{group: billingrater.Group, record: (*App).billingRaterHandler},
		{group: billingledger.Group, batch: (*App).billingLedgerHandler},
		{group: enforcer.Group, record: (*App).enforcerHandler},
	}
}

// wiring finds the wiring of consumer group name.
func wiring(name string) (groupWiring, bool) {
	for _, w := range groupWirings() {
		if w.group.Name == name {
			return w, true
		}
	}
	return groupWiring{}, false
}

// handlers builds w's handler into cfg (Handler or BatchHandler, by the
// group's kind).
func (w groupWiring) handlers(ctx context.Context, a *App, cfg *consumers.Config) error {
	var err error
	if w.batch != nil {
		cfg.BatchHandler, err = w.batch(a, ctx)
	} else {
		cfg.Handler, err = w.record(a, ctx)
	}
	return err
}
