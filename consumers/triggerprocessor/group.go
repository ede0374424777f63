package triggerprocessor

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the trigger-processor consumer group; it runs Handler.
var Group = group.Define(group.Group{
	Name:        "trigger-processor",
	Description: "parses raw webhooks and poll results into trigger events, matches triggers, queues runs",
	Inputs:      []string{topics.WebhooksRaw},
	Outputs:     []string{topics.TriggersEvents, topics.RunsLifecycle},
	Kind:        group.Record,
})
