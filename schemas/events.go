package schemas

import (
	"slices"
	"time"

	"github.com/google/uuid"
)

// Event type names. Each is the event_type envelope field of its records, the
// value of the HeaderEventType record header, and the stem of its schema
// files (avro/<type>.v<N>.avsc).
const (
	TypeWebhookReceived   = "webhook.received"
	TypeTriggerEvent      = "trigger.event"
	TypeRunLifecycle      = "run.lifecycle"
	TypeSessionEvent      = "session.event"
	TypeToolCall          = "tool.call"
	TypeSessionTranscript = "session.transcript"
	TypeActionInvocation  = "action.invocation"
	TypeAuditEvent        = "audit.event"
	TypeLLMSpend          = "llm.spend"
	TypeBillingUsage      = "billing.usage"
	TypeBillingState      = "billing.state"
)

// HeaderEventType is the Kafka record header producers set to the event type,
// so consumers and tools can route or filter records without decoding them.
// Event type names are plain ASCII, safe as header values.
const HeaderEventType = "event_type"

// Envelope holds the fields every event carries, in every schema, before the
// type-specific payload.
type Envelope struct {
	// EventID is a UUID (v7 from New) that consumers deduplicate on.
	EventID string `avro:"event_id"`
	// EventType names the payload's type; it must equal Payload.EventType().
	EventType string `avro:"event_type"`
	// OccurredAt is when the event happened; it is stored with millisecond
	// precision, so decoded values are truncated to the millisecond, in UTC.
	OccurredAt time.Time `avro:"occurred_at"`
	// OrgID is the owning organization, "" when there is none.
	OrgID string `avro:"org_id"`
	// TraceID is the W3C trace id of the producing operation, "" if untraced.
	TraceID string `avro:"trace_id"`
	// CorrelationID ties together the events caused by one stimulus.
	CorrelationID string `avro:"correlation_id"`
}

// Payload is the type-specific part of an event. It is implemented by the
// pointer types of this package's payload structs (*RunLifecycle, ...).
type Payload interface {
	EventType() string
}

// Event is one record on a topic: the common envelope plus a payload whose
// concrete type is selected by Envelope.EventType.
type Event struct {
	Envelope
	Payload Payload
}

// New returns an event for p with a fresh UUIDv7 id, the payload's event
// type and the current time truncated to milliseconds (the precision the wire
// format keeps, so the event compares equal to its decoded copy).
func New(orgID string, p Payload) *Event {
	e := &Event{Payload: p}
	e.EventID = uuid.Must(uuid.NewV7()).String()
	if p != nil {
		e.EventType = p.EventType()
	}
	e.OccurredAt = time.Now().UTC().Truncate(time.Millisecond)
	e.OrgID = orgID
	return e
}

// Types returns the names of all event types, sorted.
func Types() []string {
	ps := builtinPayloads()
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.EventType())
	}
	slices.Sort(out)
	return out
}
