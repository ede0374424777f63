// Package topics is the catalog of every Kafka topic of the platform: its key,
// partitions, retention, schema, producing role and consuming groups. The
// catalog is the single source for `proliferate topics ensure` (creating and
// checking topics on a cluster), for the consumer runner's dead-letter topics and
// for docs/topics.md, the page analytics teams read.
//
// Consumer groups are not declared here: each consumers/<group> package
// describes its own (consumers/group.Define), and the catalog derives a
// topic's consuming groups, its producing groups and the dead-letter topics
// from those descriptions.
package topics

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/schemas"
)

// Topic names. Roles refer to topics through these constants only.
const (
	WebhooksRaw        = "webhooks.raw"
	TriggersEvents     = "triggers.events"
	RunsLifecycle      = "runs.lifecycle"
	SessionsEvents     = "sessions.events"
	SessionsTranscript = "sessions.transcript"
	ToolsCalls         = "tools.calls"
	ActionsInvocations = "actions.invocations"
	AuditEvents        = "audit.events"
	LLMSpend           = "llm.spend"
	BillingUsage       = "billing.usage"
	BillingState       = "billing.state"
)

// Cleanup policies.
const (
	Delete  = "delete"
	Compact = "compact"
)

// Forever is the retention of topics that are never truncated by time.
const Forever time.Duration = -1

// Topic describes one topic.
type Topic struct {
	Name        string
	Description string
	// Key says which entity the record key identifies; records of one key stay
	// in order.
	Key        string
	Partitions int32
	Cleanup    string
	Retention  time.Duration
	// EventTypes lists the schemas (schemas.Type…) of its records; empty for
	// dead-letter topics, which hold the original record bytes unchanged.
	EventTypes []string
	// Producers are the roles that write the topic; All adds the consumer
	// groups whose Outputs name it.
	Producers []string
	// Consumers are the consumer groups whose Inputs name it (filled in by
	// All).
	Consumers []string
	// DeadLetterOf names the consumer group whose dead letters it holds.
	DeadLetterOf string
	// ContentBearing marks topics whose records hold what people and agents
	// wrote (prompts, agent messages, tool inputs and outputs: code and
	// prose), after redaction of secrets; grant read access to them as to
	// the repositories themselves.
	ContentBearing bool
	// MaxRecordBytes bounds one record (key + value + headers). Producers
	// check it before the producing transaction commits (outbox.Add) or
	// before answering (ingest); content that may be larger travels by
	// reference to the blob store. Every limit stays well below the broker's
	// default message.max.bytes (1,048,588) and franz-go's default batch
	// limit (1,000,012), so a record that passed the check is publishable.
	MaxRecordBytes int
}

// Record size limits.
const (
	// DefaultMaxRecordBytes is the limit of topics that do not set their own.
	DefaultMaxRecordBytes = 256 << 10
	// BrokerMaxRecordBytes is the largest limit a topic may set: franz-go's
	// default producer batch limit less room for the batch framing.
	BrokerMaxRecordBytes = 960_000
)

const day = 24 * time.Hour

var topics = []Topic{
	{
		Name:        WebhooksRaw,
		Description: "Every inbound webhook after signature verification. Produced before the HTTP response, so an acknowledged webhook is never lost. The body is byte for byte as received (a GitHub form delivery's payload field), inline up to INGEST_INLINE_BODY_BYTES and otherwise in the blob store, referenced by body_ref with its SHA-256 and size.",
		Key:         "webhook source: `{provider}:{integration or webhook id}`",
		Partitions:  12, Cleanup: Delete, Retention: 7 * day,
		EventTypes: []string{schemas.TypeWebhookReceived},
		Producers:  []string{"ingest"},
		// Bodies over INGEST_INLINE_BODY_BYTES travel by reference.
		MaxRecordBytes: 512 << 10,
	},
	{
		Name:        TriggersEvents,
		Description: "Normalized trigger events with their match outcome (matched, skipped with a reason, failed with the error); one per trigger considered.",
		Key:         "trigger id",
		Partitions:  12, Cleanup: Delete, Retention: 30 * day,
		EventTypes: []string{schemas.TypeTriggerEvent},
		Producers:  []string{"pollers", "scheduler"},
	},
	{
		Name:        RunsLifecycle,
		Description: "Every status transition of an automation run, in order per run. Written through the transactional outbox in the same transaction as the transition.",
		Key:         "run id",
		Partitions:  12, Cleanup: Delete, Retention: 30 * day,
		EventTypes: []string{schemas.TypeRunLifecycle},
		Producers:  []string{"api", "pollers", "scheduler", "run-finalizer"},
	},
	{
		Name:        SessionsEvents,
		Description: "Session lifecycle and telemetry: created, running, paused, resumed, stopped, with counters.",
		Key:         "session id",
		Partitions:  12, Cleanup: Delete, Retention: 30 * day,
		EventTypes: []string{schemas.TypeSessionEvent},
		Producers:  []string{"gateway"},
	},
	{
		Name:        SessionsTranscript,
		Description: "Every session's conversation as it happens: user prompts, the final text of each agent message part (never token deltas), finished tool calls (name, status, duration, input and output cut to 16 KiB each, see the schema), status changes and errors. Secrets the session received (its environment, submitted values), the organization's secrets and its redaction patterns are replaced with [REDACTED] before a record leaves the gateway. Written through the transactional outbox, in order per session. Agent message parts and tool calls have event ids derived from the session and the part or tool call id (UUID v5), so a part published twice is one event.",
		Key:         "session id",
		Partitions:  12, Cleanup: Delete, Retention: 30 * day,
		EventTypes:     []string{schemas.TypeSessionTranscript},
		Producers:      []string{"gateway"},
		ContentBearing: true,
	},
	{
		Name:        ToolsCalls,
		Description: "Tool calls made by agents in sessions, with status and duration.",
		Key:         "session id",
		Partitions:  12, Cleanup: Delete, Retention: 30 * day,
		EventTypes: []string{schemas.TypeToolCall},
		Producers:  []string{"gateway"},
	},
	{
		Name:        ActionsInvocations,
		Description: "Every state change of an action invocation (pending, approved, denied, executed, failed, expired).",
		Key:         "invocation id",
		Partitions:  12, Cleanup: Delete, Retention: 90 * day,
		EventTypes: []string{schemas.TypeActionInvocation},
		Producers:  []string{"gateway", "api"},
	},
	{
		Name:        AuditEvents,
		Description: "Security-relevant changes in an organization: secrets created, updated or deleted (names only, never values), members invited, joined, changed role or removed, API keys created or revoked (ids and prefixes only), integrations connected or disconnected, action modes set or cleared for the organization or an automation, the organization's deletion scheduled or canceled by an owner and its final deletion by the platform (org.delete: the last event of the organization, with its name and the counts of what went, never secrets). Each names its actor (user, API key or system), target and request id. Written through the transactional outbox in the same transaction as the change, so a committed change always has its event. With actions.invocations (who approved or denied what) it is the organization's audit trail.",
		Key:         "org id",
		Partitions:  12, Cleanup: Delete, Retention: 365 * day,
		EventTypes: []string{schemas.TypeAuditEvent},
		Producers:  []string{"api", "scheduler"},
	},
	{
		Name:        LLMSpend,
		Description: "One record per LLM request with tokens and cost.",
		Key:         "org id",
		Partitions:  12, Cleanup: Delete, Retention: 90 * day,
		EventTypes: []string{schemas.TypeLLMSpend},
		Producers:  []string{"llm-proxy", "litellm-collector"},
	},
	{
		Name:        BillingUsage,
		Description: "Billable usage (compute seconds, LLM credits) with an idempotency key; the billing ledger applies each key once.",
		Key:         "org id",
		Partitions:  12, Cleanup: Delete, Retention: 90 * day,
		EventTypes: []string{schemas.TypeBillingUsage},
		Producers:  []string{"compute-meter"},
	},
	{
		Name:        BillingState,
		Description: "Billing state changes per org. Compacted: the latest record per org is its current state.",
		Key:         "org id",
		Partitions:  12, Cleanup: Compact, Retention: Forever,
		EventTypes: []string{schemas.TypeBillingState},
	},
}

// DeadLetterTopic is the dead-letter topic of a consumer group.
func DeadLetterTopic(name string) string { return group.DeadLetterTopic(name) }

// LookupGroup finds a consumer group by name.
func LookupGroup(name string) (group.Group, bool) { return group.Lookup(name) }

// Groups lists every consumer group, sorted by name: the groups the
// consumers/<group> packages linked into this binary define.
func Groups() []group.Group { return group.All() }

// All lists every topic: the event topics in pipeline order, then one
// dead-letter topic per consumer group. Consumers, and the producing
// groups after the other producers, are filled in from Groups.
func All() []Topic {
	groups := Groups()
	out := make([]Topic, 0, len(topics)+len(groups))
	for _, t := range topics {
		t.Consumers = nil
		t.Producers = slices.Clone(t.Producers)
		for _, g := range groups {
			if slices.Contains(g.Inputs, t.Name) {
				t.Consumers = append(t.Consumers, g.Name)
			}
			if slices.Contains(g.Outputs, t.Name) {
				t.Producers = append(t.Producers, g.Name)
			}
		}
		out = append(out, t)
	}
	for _, g := range groups {
		out = append(out, Topic{
			Name:         g.DeadLetter(),
			Description:  "Records the " + g.Name + " group could not process after its retries: the original key, value and headers, plus dlq.* headers with the error, the attempts and the source coordinates.",
			Key:          "the original record's key",
			Partitions:   3,
			Cleanup:      Delete,
			Retention:    30 * day,
			Producers:    []string{g.Name},
			DeadLetterOf: g.Name,
		})
	}
	return out
}

// MaxRecordBytes is the record size limit of topic: its catalog value, the
// default for a topic that sets none, and for a name outside the catalog
// the broker's limit (such a record fails at the broker anyway).
func MaxRecordBytes(topic string) int {
	t, ok := byName()[topic]
	switch {
	case !ok:
		return BrokerMaxRecordBytes
	case t.MaxRecordBytes > 0:
		return t.MaxRecordBytes
	}
	return DefaultMaxRecordBytes
}

// RecordTooLargeError says a record is over its topic's MaxRecordBytes.
type RecordTooLargeError struct {
	Topic string
	Size  int
	Limit int
}

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("record for %s is %d bytes, over the topic's limit of %d", e.Topic, e.Size, e.Limit)
}

// CheckRecordSize returns a *RecordTooLargeError when a record of size bytes
// (key + value + header keys and values) is over topic's limit.
func CheckRecordSize(topic string, size int) error {
	if limit := MaxRecordBytes(topic); size > limit {
		return &RecordTooLargeError{Topic: topic, Size: size, Limit: limit}
	}
	return nil
}

// byName indexes All once: MaxRecordBytes runs for every produced record.
var byName = sync.OnceValue(func() map[string]Topic {
	m := map[string]Topic{}
	for _, t := range All() {
		m[t.Name] = t
	}
	return m
})

// Lookup finds a topic by name.
func Lookup(name string) (Topic, bool) {
	for _, t := range All() {
		if t.Name == name {
			return t, true
		}
	}
	return Topic{}, false
}
