package consumers

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A member that had joined stays ready through a short absence (a
// rebalance, a rejoin) and fails once it has been out longer than the grace;
// a member that never joined is not ready at all.
func TestMembershipGrace(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newMembership("g1", time.Minute)
	m.now = func() time.Time { return clock }
	m.since = clock

	if err := m.ready(); err == nil || !strings.Contains(err.Error(), "g1 has not joined yet") {
		t.Fatalf("before the first join: %v", err)
	}
	m.assigned()
	if err := m.ready(); err != nil {
		t.Fatalf("joined: %v", err)
	}
	clock = clock.Add(time.Hour)
	m.lost()
	m.failed(errors.New("UNKNOWN_MEMBER_ID"))
	clock = clock.Add(59 * time.Second)
	if err := m.ready(); err != nil {
		t.Fatalf("out of the group for less than the grace: %v", err)
	}
	clock = clock.Add(time.Second)
	err := m.ready()
	if err == nil || !strings.Contains(err.Error(), "g1 has been out of the group for 1m0s") || !strings.Contains(err.Error(), "UNKNOWN_MEMBER_ID") {
		t.Fatalf("out of the group for the grace: %v", err)
	}
	m.assigned()
	if err := m.ready(); err != nil {
		t.Fatalf("rejoined: %v", err)
	}
	m.stop()
	if err := m.ready(); err == nil || !strings.Contains(err.Error(), "g1: stopped") {
		t.Fatalf("stopped: %v", err)
	}
}
