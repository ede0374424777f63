package enforcer

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the enforcer consumer group; it runs Handler.
var Group = group.Define(group.Group{
	Name:        "enforcer",
	Description: "pauses the sessions of exhausted or suspended orgs",
	Inputs:      []string{topics.BillingState},
	Kind:        group.Record,
})
