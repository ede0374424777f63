package hub

import (
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sessions"
)

// The idle policy's decisions are pure functions of a hub's state and the
// time: these tables pin them without a hub, a clock or a sleep.

var policyT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testPolicy() idlePolicy {
	return idlePolicy{grace: 5 * time.Minute, headlessGrace: 30 * time.Second, expiryLead: 5 * time.Minute, evictAfter: 10 * time.Minute}
}

// idleRuntime is a hub with a runtime, its stream up, nobody attached and
// its last activity at policyT0: idle, once the grace period has passed.
func idleRuntime() idleState {
	return idleState{runtime: true, streamUp: true, activity: policyT0, lastUsed: policyT0, clientType: sessions.ClientWeb,
		sandboxID: "sb-1", storedSandboxID: "sb-1"}
}

func TestIdlePolicyGrace(t *testing.T) {
	p := testPolicy()
	for _, tc := range []struct {
		clientType string
		want       time.Duration
	}{
		{sessions.ClientWeb, 5 * time.Minute},
		{sessions.ClientAPI, 5 * time.Minute},
		{sessions.ClientCLI, 5 * time.Minute},
		{"", 5 * time.Minute},
		{sessions.ClientAutomation, 30 * time.Second},
		{sessions.ClientSlack, 30 * time.Second},
	} {
		if got := p.graceFor(tc.clientType); got != tc.want {
			t.Errorf("graceFor(%q) = %v, want %v", tc.clientType, got, tc.want)
		}
	}
}

func TestIdlePolicyShouldSnapshot(t *testing.T) {
	p := testPolicy()
	afterGrace := policyT0.Add(5 * time.Minute)
	for _, tc := range []struct {
		name string
		edit func(*idleState)
		now  time.Time
		want bool
	}{
		{"idle past the grace period", nil, afterGrace, true},
		{"idle, grace period not over", nil, afterGrace.Add(-time.Nanosecond), false},
		{"headless grace is shorter", func(s *idleState) { s.clientType = sessions.ClientAutomation }, policyT0.Add(30 * time.Second), true},
		{"headless, before its grace", func(s *idleState) { s.clientType = sessions.ClientSlack }, policyT0.Add(29 * time.Second), false},
		{"closed", func(s *idleState) { s.closed = true }, afterGrace, false},
		{"no runtime (constraint 13)", func(s *idleState) { s.runtime = false }, afterGrace, false},
		{"booting", func(s *idleState) { s.booting = true }, afterGrace, false},
		{"being moved", func(s *idleState) { s.migrating = true }, afterGrace, false},
		{"a client attached", func(s *idleState) { s.clients = 1 }, afterGrace, false},
		{"a proxy connection", func(s *idleState) { s.proxies = 1 }, afterGrace, false},
		{"a tool call in flight", func(s *idleState) { s.tools = 1 }, afterGrace, false},
		{"the agent is working", func(s *idleState) { s.agentBusy = true }, afterGrace, false},
		{"stream down, agent state unknown", func(s *idleState) { s.streamUp = false }, afterGrace, false},
		{"stream down, agent known idle (constraint 10)", func(s *idleState) { s.streamUp, s.knownIdle = false, policyT0 }, afterGrace, true},
		// The idle work flag only keeps the monitor from starting a second
		// snapshot (checkIdle); the re-check under the lock ignores it.
		{"idle work in flight", func(s *idleState) { s.idleWork = true }, afterGrace, true},
		{"later activity restarts the grace", func(s *idleState) { s.activity = policyT0.Add(time.Minute) }, afterGrace, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := idleRuntime()
			if tc.edit != nil {
				tc.edit(&s)
			}
			if got := p.shouldSnapshot(s, tc.now); got != tc.want {
				t.Fatalf("shouldSnapshot = %v, want %v (state %+v)", got, tc.want, s)
			}
		})
	}
}

func TestIdlePolicyExpiry(t *testing.T) {
	p := testPolicy()
	exp := policyT0.Add(time.Hour)
	leadStart := exp.Add(-5 * time.Minute)
	for _, tc := range []struct {
		name    string
		edit    func(*idleState)
		now     time.Time
		due     bool
		migrate bool
	}{
		{"no expiry known", func(s *idleState) { s.expiresAt = nil }, exp, false, false},
		{"before the lead time", nil, leadStart.Add(-time.Nanosecond), false, false},
		{"at the lead time", nil, leadStart, true, false},
		{"past the expiry", nil, exp.Add(time.Minute), true, false},
		{"the session moved to another sandbox", func(s *idleState) { s.storedSandboxID = "sb-2" }, leadStart, false, false},
		{"no runtime", func(s *idleState) { s.runtime, s.sandboxID = false, "" }, leadStart, false, false},
		{"a client attached: migrate", func(s *idleState) { s.clients = 2 }, leadStart, true, true},
		{"a proxy connection: migrate", func(s *idleState) { s.proxies = 1 }, leadStart, true, true},
		{"an automation: migrate", func(s *idleState) { s.clientType = sessions.ClientAutomation }, leadStart, true, true},
		{"a Slack session alone: pause", func(s *idleState) { s.clientType = sessions.ClientSlack }, leadStart, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := idleRuntime()
			s.expiresAt = &exp
			if tc.edit != nil {
				tc.edit(&s)
			}
			if got := p.expiryDue(s, tc.now); got != tc.due {
				t.Fatalf("expiryDue = %v, want %v", got, tc.due)
			}
			if got := p.expiryMigrates(s); tc.due && got != tc.migrate {
				t.Fatalf("expiryMigrates = %v, want %v", got, tc.migrate)
			}
		})
	}
}

func TestIdlePolicyEviction(t *testing.T) {
	p := testPolicy()
	unused := idleState{lastUsed: policyT0}
	ttl := policyT0.Add(10 * time.Minute)
	for _, tc := range []struct {
		name        string
		edit        func(*idleState)
		now         time.Time
		idleFor     time.Duration
		evict, kept bool
	}{
		{"unused, before IdleTTL", nil, ttl.Add(-time.Second), 10*time.Minute - time.Second, false, false},
		{"unused for IdleTTL", nil, ttl, 10 * time.Minute, true, false},
		{"a runtime is up (constraint 1)", func(s *idleState) { s.runtime = true }, ttl, -1, false, true},
		{"booting", func(s *idleState) { s.booting = true }, ttl, -1, false, true},
		{"a client", func(s *idleState) { s.clients = 1 }, ttl, -1, false, true},
		{"a proxy connection", func(s *idleState) { s.proxies = 1 }, ttl, -1, false, true},
		{"a tool call", func(s *idleState) { s.tools = 1 }, ttl, -1, false, true},
		{"a migration", func(s *idleState) { s.migrating = true }, ttl, -1, false, true},
		{"idle work", func(s *idleState) { s.idleWork = true }, ttl, -1, false, true},
		{"busy, used recently", func(s *idleState) { s.tools = 1 }, ttl.Add(-time.Second), -1, false, false},
		{"closed", func(s *idleState) { s.closed = true }, ttl, -1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := unused
			if tc.edit != nil {
				tc.edit(&s)
			}
			if got := p.idleFor(s, tc.now); got != tc.idleFor {
				t.Fatalf("idleFor = %v, want %v", got, tc.idleFor)
			}
			if evict, kept := p.evict(s, tc.now); evict != tc.evict || kept != tc.kept {
				t.Fatalf("evict = %v, kept = %v; want %v, %v", evict, kept, tc.evict, tc.kept)
			}
		})
	}
}
