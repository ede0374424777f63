package sessions_test

import (
	"context"
	"errors"
	"testing"

	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/schemas"
)

// A sandbox limit becomes a limit_exceeded session event carrying the
// limit, without a status (the session's state is unchanged).
func TestRecordLimitEmitsALimitEvent(t *testing.T) {
	s, pool, org := newStore(t)
	ctx := context.Background()
	id := sessionstest.New(t, pool, org, sessionstest.Options{Status: "running", SandboxID: "sb"})
	limit := schemas.SandboxLimit{Kind: "memory", Detail: "the sandbox ran out of memory (limit 2 GiB): the kernel killed one of its processes", AgentAlive: true}
	if err := s.RecordLimit(ctx, id, limit); err != nil {
		t.Fatal(err)
	}
	evs := sessionEvents(t, pool, id)
	last := evs[len(evs)-1]
	if last.Kind != schemas.SessionKindLimitExceeded || last.Status != nil || last.Limit == nil || *last.Limit != limit ||
		last.SandboxID == nil || *last.SandboxID != "sb" {
		t.Fatalf("event %+v (limit %+v)", last, last.Limit)
	}
	if err := s.RecordLimit(ctx, "00000000-0000-0000-0000-000000000000", limit); !errors.Is(err, sessions.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}
