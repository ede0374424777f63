package enforcer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/internal/sessions"
)

// The gateway pauser over a real gateway: an unknown session (404) is
// ErrGone; a running one is paused with the reason.
func TestGatewayPauserGoneAndPaused(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := w.deps.Pauser.Pause(ctx, w.org, uuid.NewString(), sessions.PauseCreditLimit); !errors.Is(err, enforcer.ErrGone) {
		t.Fatalf("unknown session: %v", err)
	}
	sid := w.running(t)
	if err := w.deps.Pauser.Pause(ctx, w.org, sid, sessions.PauseCreditLimit); err != nil {
		t.Fatal(err)
	}
	s, err := w.store.Get(ctx, "", sid)
	if err != nil || s.Status != sessions.StatusPaused || s.PauseReason == nil || *s.PauseReason != sessions.PauseCreditLimit {
		t.Fatalf("%+v %v", s, err)
	}
}
