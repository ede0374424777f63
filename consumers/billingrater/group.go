package billingrater

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the billing-rater consumer group; it runs Handler.
var Group = group.Define(group.Group{
	Name:        "billing-rater",
	Description: "prices LLM spend into billable usage",
	Inputs:      []string{topics.LLMSpend},
	Outputs:     []string{topics.BillingUsage},
	Kind:        group.Record,
})
