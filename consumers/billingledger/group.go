package billingledger

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// Group is the billing-ledger consumer group; it runs BatchHandler (one
// transaction per organization per fetched batch).
var Group = group.Define(group.Group{
	Name:        "billing-ledger",
	Description: "applies usage to org credit balances and drives the billing state machine",
	Inputs:      []string{topics.BillingUsage},
	Outputs:     []string{topics.BillingState},
	Kind:        group.Batch,
})
