package sessions_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// The idle-snapshot write is fenced on the sandbox: a stale actor's pause
// changes nothing and emits nothing.
func TestPauseIfSandboxIsFenced(t *testing.T) {
	st, pool, org := newStore(t)
	ctx := context.Background()
	id := sessionstest.New(t, pool, org, sessionstest.Options{})
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := st.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb-1", ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
	if s, _ := st.Get(ctx, "", id); s.SandboxExpiresAt == nil || !s.SandboxExpiresAt.Equal(exp) {
		t.Fatalf("expires %v, want %v", s.SandboxExpiresAt, exp)
	}
	if n, err := st.RecordIdleSnapshotFailure(ctx, id, "sb-1"); err != nil || n != 1 {
		t.Fatalf("failures %d %v", n, err)
	}
	if n, _ := st.RecordIdleSnapshotFailure(ctx, id, "sb-old"); n != 0 {
		t.Fatalf("a failure on another sandbox counted: %d", n)
	}
	// The session moved to sb-2 meanwhile.
	if _, err := st.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb-2"}); err != nil {
		t.Fatal(err)
	}
	before := len(sessionEvents(t, pool, id))
	if _, err := st.PauseIfSandbox(ctx, id, "sb-1", sessions.PauseInactivity, "snap-stale", false); !errors.Is(err, sessions.ErrSandboxChanged) {
		t.Fatalf("stale pause: %v, want ErrSandboxChanged", err)
	}
	s, _ := st.Get(ctx, "", id)
	if s.Status != sessions.StatusRunning || *s.SandboxID != "sb-2" || s.SnapshotID != nil || len(sessionEvents(t, pool, id)) != before {
		t.Fatalf("stale pause changed the session: %+v", s)
	}
	p, err := st.PauseIfSandbox(ctx, id, "sb-2", sessions.PauseInactivity, "snap-1", false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != sessions.StatusPaused || p.SandboxID != nil || p.SandboxExpiresAt != nil || *p.SnapshotID != "snap-1" ||
		*p.PauseReason != sessions.PauseInactivity || p.IdleSnapshotFailures != 0 || p.EndedAt != nil {
		t.Fatalf("paused: %+v", p)
	}
	if k := kinds(sessionEvents(t, pool, id)); k[len(k)-1] != "paused" {
		t.Fatalf("events %v", k)
	}
	// A sandbox that could not be stopped stays recorded for the sweeper.
	id2 := sessionstest.New(t, pool, org, sessionstest.Options{})
	if _, err := st.MarkRunning(ctx, id2, sessions.Runtime{SandboxID: "sb-x"}); err != nil {
		t.Fatal(err)
	}
	if p, err := st.PauseIfSandbox(ctx, id2, "sb-x", sessions.PauseInactivity, "snap-x", true); err != nil || p.SandboxID == nil {
		t.Fatalf("keep sandbox: %+v %v", p, err)
	}
}

// A lost snapshot is cleared only while it is still the session's.
func TestClearSnapshotIsCompareAndSet(t *testing.T) {
	st, pool, org := newStore(t)
	ctx := context.Background()
	id := sessionstest.New(t, pool, org, sessionstest.Options{})
	if err := st.SetSnapshot(ctx, id, "snap-new"); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.ClearSnapshot(ctx, id, "snap-old"); err != nil || ok {
		t.Fatalf("cleared a snapshot the session no longer uses: %v %v", ok, err)
	}
	if ok, err := st.ClearSnapshot(ctx, id, "snap-new"); err != nil || !ok {
		t.Fatalf("clear: %v %v", ok, err)
	}
	if s, _ := st.Get(ctx, "", id); s.SnapshotID != nil {
		t.Fatalf("snapshot %v", *s.SnapshotID)
	}
}

// The expiry scan finds running sessions due before a time, soonest first.
func TestExpiringRunning(t *testing.T) {
	st, pool, org := newStore(t)
	ctx := context.Background()
	now := time.Now()
	soon := sessionstest.New(t, pool, org, sessionstest.Options{})
	sooner := sessionstest.New(t, pool, org, sessionstest.Options{})
	later := sessionstest.New(t, pool, org, sessionstest.Options{})
	for id, at := range map[string]time.Time{soon: now.Add(2 * time.Minute), sooner: now.Add(time.Minute), later: now.Add(time.Hour)} {
		if _, err := st.MarkRunning(ctx, id, sessions.Runtime{SandboxID: "sb-" + id[:8], ExpiresAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.ExpiringRunning(ctx, now.Add(5*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		if s.OrgID == org {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) != 2 || ids[0] != sooner || ids[1] != soon {
		t.Fatalf("due = %v, want [sooner soon]", ids)
	}
}
