package schemas

// AuditEvent is one security-relevant change in an organization (topic
// audit.events): who (actor), did what (action) to what (target), with the
// request that did it. Details never hold secret values, tokens or key
// material.
type AuditEvent struct {
	Action         string  `avro:"action"`
	ActorType      string  `avro:"actor_type"`
	ActorID        *string `avro:"actor_id"`
	APIKeyID       *string `avro:"api_key_id"`
	ImpersonatorID *string `avro:"impersonator_id"`
	TargetType     string  `avro:"target_type"`
	TargetID       string  `avro:"target_id"`
	RequestID      *string `avro:"request_id"`
	DetailsJSON    *string `avro:"details_json"`
}

// EventType implements Payload.
func (*AuditEvent) EventType() string { return TypeAuditEvent }

// Audit actor types (AuditEvent.ActorType).
const (
	AuditActorUser   = "user"
	AuditActorAPIKey = "api_key"
	AuditActorSystem = "system"
)
