package invocations

import "context"

// Allow exposes the rate limiter to the package's external tests and
// benchmarks.
func (s *Svc) Allow(ctx context.Context, sessionID string) error { return s.allow(ctx, sessionID) }
