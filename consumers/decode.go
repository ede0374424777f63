package consumers

import (
	"context"
	"fmt"

	"github.com/proliferate/proliferate/schemas"
)

// Decode fills Message.Event from the record value. A value that does not
// decode (unknown schema fingerprint, corrupt body) is a permanent failure: it
// goes to the dead-letter topic and never reaches the handler.
func Decode(codec *schemas.Codec) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			if m.Event == nil {
				ev, err := codec.Decode(m.Record.Value)
				if err != nil {
					m.Attempt = max(m.Attempt, 1) // delivered once, never retried
					return Permanent(fmt.Errorf("decode record: %w", err))
				}
				m.Event = ev
			}
			return next(ctx, m)
		}
	}
}
