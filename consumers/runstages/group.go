package runstages

import (
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/topics"
)

// The run pipeline's consumer groups, both on runs.lifecycle.
var (
	// EnricherGroup runs Enricher.
	EnricherGroup = group.Define(group.Group{
		Name:        "run-enricher",
		Description: "enriches queued runs with context (stage queued → enriching → ready)",
		Inputs:      []string{topics.RunsLifecycle},
		Outputs:     []string{topics.RunsLifecycle},
		Kind:        group.Record,
	})
	// ExecutorGroup runs Executor.
	ExecutorGroup = group.Define(group.Group{
		Name:        "run-executor",
		Description: "starts a session for ready runs (ready → running)",
		Inputs:      []string{topics.RunsLifecycle},
		Outputs:     []string{topics.RunsLifecycle},
		Kind:        group.Record,
	})
)
