package runartifacts

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the run-artifacts consumer group; it runs Handler.
var Group = group.Define(group.Group{
	Name:        "run-artifacts",
	Description: "writes run enrichment and completion JSON to the blob store (apart from notifications, so a storage outage never delays them)",
	Inputs:      []string{topics.RunsLifecycle},
	Kind:        group.Record,
})
