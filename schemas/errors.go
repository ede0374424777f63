package schemas

import "errors"

// Sentinel errors. Every error returned by Decode, Encode and CheckBackward
// wraps at most one of these, so callers can branch with errors.Is: a consumer
// typically dead-letters ErrCorrupt and ErrUnknownSchema records (retrying
// cannot help) and retries anything else (a registry that is briefly down).
var (
	// ErrUnknownSchema means the record names a schema this binary does not
	// know: an unknown single-object fingerprint, a registry id whose schema is
	// not one of the embedded versions, or an event type without a schema.
	ErrUnknownSchema = errors.New("schemas: unknown schema")

	// ErrCorrupt means the bytes are not a valid record: bad magic, truncated
	// header or body, a body that does not decode with its writer schema, or
	// trailing bytes after the body.
	ErrCorrupt = errors.New("schemas: corrupt record")

	// ErrInvalidEvent means Encode was given an event it refuses to write: no
	// payload, a missing or malformed event id, a zero occurred_at, or an
	// event_type that does not match the payload's type.
	ErrInvalidEvent = errors.New("schemas: invalid event")

	// ErrIncompatible means a newer schema cannot read data written with an
	// older one (see CheckBackward).
	ErrIncompatible = errors.New("schemas: incompatible schema change")
)
