package notifier

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the notifier consumer group; it runs Handler.
var Group = group.Define(group.Group{
	Name:        "notifier",
	Description: "posts run and session outcomes to Slack",
	Inputs:      []string{topics.RunsLifecycle, topics.SessionsEvents},
	Kind:        group.Record,
})
