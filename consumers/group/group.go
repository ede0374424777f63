// Package group describes a consumer group in one value: its name, the
// topics it reads and writes, the kind of handler it runs and its runner
// settings. Each consumers/<group> package defines its groups with Define;
// the topic catalog (topics.Groups, docs/topics.md, the dead-letter topics
// `proliferate topics ensure` creates), the worker's wiring and
// `proliferate worker --groups` all read these values, so a group is
// declared in exactly one place.
//
// The package imports nothing of the platform, so the topic catalog and
// the consumer runner can both depend on it.
package group

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Kind is how a group's handler takes records.
type Kind int

const (
	// Record groups handle one record at a time (consumers.Handler).
	Record Kind = iota + 1
	// Batch groups apply a partition's fetched records together
	// (consumers.BatchHandler).
	Batch
)

func (k Kind) String() string {
	switch k {
	case Record:
		return "record"
	case Batch:
		return "batch"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Group describes one consumer group.
type Group struct {
	// Name is the Kafka consumer group id; its dead-letter topic is
	// dlq.<Name>.
	Name string
	// Description says what the group does (docs/topics.md).
	Description string
	// Inputs are the topics the group consumes.
	Inputs []string
	// Outputs are the event topics the group's handler writes, directly or
	// through the transactional outbox; the dead-letter topic is implied
	// (Produces lists both).
	Outputs []string
	// Owns lists the Postgres tables the group alone writes and that are a
	// pure function of its Inputs: `proliferate replay --group NAME`
	// truncates exactly these and rebuilds them by consuming Inputs from the
	// beginning. A group that owns none cannot be replayed.
	Owns []string
	// Kind is the handler the group runs.
	Kind Kind
	// Settings are the group's own runner settings; zero values take the
	// process's (CONSUMER_* settings) or the runner's defaults.
	Settings Settings
}

// Settings tune one group's runner.
type Settings struct {
	// MaxAttempts bounds the attempts per record before it is
	// dead-lettered; 0 takes CONSUMER_MAX_ATTEMPTS.
	MaxAttempts int
	// MaxBatch bounds the records a batch group's handler gets at once; 0
	// takes the runner's default (1000).
	MaxBatch int
}

// DeadLetterTopic is the dead-letter topic of consumer group name.
func DeadLetterTopic(name string) string { return "dlq." + name }

// DeadLetter is the group's dead-letter topic.
func (g Group) DeadLetter() string { return DeadLetterTopic(g.Name) }

// Produces lists every topic the group writes: its Outputs and its
// dead-letter topic.
func (g Group) Produces() []string { return append(slices.Clone(g.Outputs), g.DeadLetter()) }

// Validate reports what is missing from g.
func (g Group) Validate() error {
	var missing []string
	if g.Name == "" {
		missing = append(missing, "Name")
	}
	if g.Description == "" {
		missing = append(missing, "Description")
	}
	if len(g.Inputs) == 0 {
		missing = append(missing, "Inputs")
	}
	if g.Kind != Record && g.Kind != Batch {
		missing = append(missing, "Kind")
	}
	if len(missing) > 0 {
		return fmt.Errorf("consumer group %q lacks %s", g.Name, strings.Join(missing, ", "))
	}
	return nil
}

var (
	mu      sync.Mutex
	defined = map[string]Group{}
)

// Define registers g (at package initialization: `var Group =
// group.Define(group.Group{...})`) and returns it. It panics when g is
// incomplete or its name is taken: both are programming errors that every
// test binary linking the package reports at once.
func Define(g Group) Group {
	if err := g.Validate(); err != nil {
		panic(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := defined[g.Name]; dup {
		panic(fmt.Sprintf("consumer group %q defined twice", g.Name))
	}
	defined[g.Name] = g
	return g
}

// All lists the groups defined by the packages linked into this binary,
// sorted by name.
func All() []Group {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Group, 0, len(defined))
	for _, g := range defined {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Group) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Lookup finds a defined group by name.
func Lookup(name string) (Group, bool) {
	mu.Lock()
	defer mu.Unlock()
	g, ok := defined[name]
	return g, ok
}
