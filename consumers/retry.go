package consumers

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// RetryOptions configure Retry.
type RetryOptions struct {
	// MaxAttempts is how many times the handler runs before giving up (≥ 1).
	MaxAttempts int
	// InitialBackoff is the wait after the first failure; it doubles per attempt.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait.
	MaxBackoff time.Duration
	// Logger receives one line per failed attempt.
	Logger *slog.Logger
}

// Backoff returns the wait before attempt+1 after attempt failed (attempt ≥ 1).
func (o RetryOptions) Backoff(attempt int) time.Duration {
	d := o.InitialBackoff
	for i := 1; i < attempt && d < o.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.MaxBackoff)
}

// Retry runs the handler up to MaxAttempts times with exponential backoff.
// Permanent errors are returned at once. A stop signal during a wait returns
// errStopping so the record stays uncommitted for its next owner.
func (o RetryOptions) Retry(next Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		for {
			m.Attempt++
			err := next(ctx, m)
			if err == nil || IsPermanent(err) || m.Attempt >= o.MaxAttempts {
				return err
			}
			wait := o.Backoff(m.Attempt)
			if o.Logger != nil {
				o.Logger.Warn("record failed, retrying", recordAttrs(m.Record, "attempt", m.Attempt, "retry_in", wait, "error", err)...)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stoppingFrom(ctx):
				t.Stop()
				return fmt.Errorf("%w after attempt %d: %w", errStopping, m.Attempt, err)
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%w: %w", errStopping, ctx.Err())
			}
		}
	}
}
