package consumers

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultMembershipGrace is Config.MembershipGrace when unset.
const DefaultMembershipGrace = 30 * time.Second

// membership follows the group member's state from the client's group
// callbacks: joined once a join and sync completed (franz-go calls
// OnPartitionsAssigned after every one, with or without new partitions, so a
// member with nothing to consume in a group with more members than
// partitions counts as joined), out of the group from OnPartitionsLost (the
// session ended in error: a failed heartbeat, being fenced or kicked out, the
// coordinator gone) until the next assignment.
type membership struct {
	group string
	grace time.Duration
	now   func() time.Time

	mu      sync.Mutex
	joined  bool
	ever    bool      // joined at least once
	since   time.Time // when joined last changed (or the runner was created)
	lastErr error     // why the last session ended, or the last dial error
	stopped bool
}

func newMembership(group string, grace time.Duration) *membership {
	return &membership{group: group, grace: grace, now: time.Now, since: time.Now()}
}

func (m *membership) assigned() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.joined {
		m.joined, m.ever, m.since = true, true, m.now()
	}
	m.lastErr = nil
}

func (m *membership) lost() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.joined {
		m.joined, m.since = false, m.now()
	}
}

func (m *membership) failed(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastErr = err
}

func (m *membership) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped, m.joined = true, false
}

// ready is nil while the member is in its group, or was until less than
// grace ago (a rebalance, a rejoin after a lost session); an error naming
// the group otherwise, including before the first join.
func (m *membership) ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return fmt.Errorf("consumer group %s: stopped", m.group)
	}
	if m.joined {
		return nil
	}
	out := m.now().Sub(m.since).Round(time.Millisecond)
	why := ""
	if m.lastErr != nil {
		why = ": " + m.lastErr.Error()
	}
	if !m.ever {
		return fmt.Errorf("consumer group %s has not joined yet (%s since start)%s", m.group, out, why)
	}
	if out < m.grace {
		return nil
	}
	return fmt.Errorf("consumer group %s has been out of the group for %s (more than %s)%s", m.group, out, m.grace, why)
}

// membershipHooks record why the member is out of its group: the error
// that ended its group session, or while it is not in the group, the last
// failed connection to a broker (the only sign before a first join when no
// broker answers).
type membershipHooks struct{ m *membership }

var (
	_ kgo.HookGroupManageError = membershipHooks{}
	_ kgo.HookBrokerConnect    = membershipHooks{}
)

func (h membershipHooks) OnGroupManageError(err error) { h.m.failed(err) }

func (h membershipHooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		return
	}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	if !h.m.joined {
		h.m.lastErr = fmt.Errorf("connect to broker %s: %w", net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), err)
	}
}

// Ready reports whether the group's member is in its consumer group: nil
// once it joined (with or without partitions), and for Config.MembershipGrace
// after it dropped out (a rebalance or a rejoin after a lost session); an
// error naming the group before the first join, once it has been out longer
// than the grace, or after Run returned. The client notices a session it
// lost (broker gone, kicked out) within the group session timeout (45 s by
// default). It is the group's readiness check; it asks the broker nothing.
func (r *Runner) Ready(context.Context) error { return r.member.ready() }
