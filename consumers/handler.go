// Package consumers runs Proliferate's consumer groups. Each group's logic lives
// in its own package below this one and is a single Handler (or, for groups
// that amortise work over many records, a BatchHandler); the Runner here
// gives every group the same delivery guarantees:
//
//   - partitions are processed in parallel, the records of one partition in
//     order, one at a time (in batch mode: up to MaxBatch at a time, in
//     offset order, falling back to one at a time when a batch fails);
//   - a record's offset is marked for commit only after its handler returned
//     nil (so after the handler's database transaction committed); a crash
//     replays at most the records processed since the last commit, and handlers
//     are idempotent, so a replay changes nothing;
//   - failures retry with exponential backoff a bounded number of times, then
//     the record goes to the group's dead-letter topic with error headers and
//     the partition moves on;
//   - records that cannot be decoded (unknown schema, corrupt body) go to the
//     dead-letter topic at once: retrying cannot fix them;
//   - shutdown stops fetching, lets in-flight records finish, commits and
//     leaves the group.
package consumers

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Message is one record handed to a handler.
type Message struct {
	Record *kgo.Record
	// Event is the decoded record value when the runner has a codec.
	Event *schemas.Event
	// Attempt counts deliveries to the handler in this process, from 1.
	Attempt int
}

// Handler applies one record. It must be idempotent: the same record can be
// delivered again after a crash or a rebalance. Returning nil means the effects
// are durable; returning an error retries, and wrapping it with Permanent sends
// the record to the dead-letter topic without retrying.
type Handler func(ctx context.Context, m *Message) error

// Middleware wraps a handler with one concern (decoding, retrying, metrics).
type Middleware func(Handler) Handler

// Chain applies middlewares so that the first one is the outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks an error that retrying cannot fix (malformed input, a
// violated invariant): the record goes straight to the dead-letter topic.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent, or is an
// output record over its topic's size limit (the same input produces the
// same record again).
func IsPermanent(err error) bool {
	var p permanentError
	if errors.As(err, &p) {
		return true
	}
	_, tooLarge := errors.AsType[*topics.RecordTooLargeError](err)
	return tooLarge
}

// errStopping is returned when a partition is being revoked or the runner is
// shutting down while a record waits for a retry: the record is neither
// committed nor dead-lettered, so its next owner processes it.
var errStopping = errors.New("consumer stopping")

type stoppingKey struct{}

// withStopping attaches a partition worker's stop signal to ctx. Handlers keep
// the undisturbed ctx so an in-flight transaction can finish; only waits between
// attempts observe the signal.
func withStopping(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stoppingKey{}, stop)
}

func stoppingFrom(ctx context.Context) <-chan struct{} {
	stop, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return stop // nil blocks forever in a select, which is what no signal means
}
