package local_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// testLimits are small, so abuse hits them fast; the memory leaves room
// for the agent (OpenCode takes ~300 MB) and the pids for its ~15
// threads.
var testLimits = local.Limits{MemoryBytes: 640 << 20, Pids: 64, CPUPercent: 50}

// limitEvents collects a provider's limit events.
type limitEvents struct {
	mu  sync.Mutex
	evs []sandbox.LimitEvent
}

func watchLimitEvents(t *testing.T, p *local.Provider) *limitEvents {
	le := &limitEvents{}
	t.Cleanup(p.WatchLimits(func(ev sandbox.LimitEvent) {
		le.mu.Lock()
		le.evs = append(le.evs, ev)
		le.mu.Unlock()
	}))
	return le
}

func (le *limitEvents) of(sessionID, kind string) []sandbox.LimitEvent {
	le.mu.Lock()
	defer le.mu.Unlock()
	var out []sandbox.LimitEvent
	for _, ev := range le.evs {
		if ev.SessionID == sessionID && (kind == "" || ev.Kind == kind) {
			out = append(out, ev)
		}
	}
	return out
}

// TestLimitsContainAnAbusiveSandbox: a busy loop, a fork bomb and a memory
// hog in one session's sandbox hit its limits (reported as limit events
// before the Exec that hit them returns) while another session's sandbox
// keeps answering commands and its agent its health checks.
func TestLimitsContainAnAbusiveSandbox(t *testing.T) {
	e := setup(t)
	p, _ := newProviderWith(t, e, func(o *local.Options) {
		o.Isolation = local.IsolationBwrap
		o.Limits = testLimits
		o.RequireLimits = true
	})
	c := p.Confinement()
	if c.Cgroups == "" || c.Limits != testLimits {
		t.Fatalf("confinement %+v: limits not enforced", c)
	}
	events := watchLimitEvents(t, p)
	abuser, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-abuser", LLM: e.llm, GatewayURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	victim, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-victim", LLM: e.llm, GatewayURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}

	// The victim answers commands and health checks throughout.
	abuseCtx, endAbuse := context.WithCancel(t.Context())
	type rtt struct {
		what string
		d    time.Duration
		err  error
	}
	var (
		mu   sync.Mutex
		rtts []rtt
	)
	oc, err := opencode.NewClient(victim.AgentURL, opencode.ClientOptions{Password: victim.AgentPassword})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for abuseCtx.Err() == nil {
			start := time.Now()
			res, err := p.Exec(t.Context(), victim.ID, sandbox.ExecCommand{Args: []string{"true"}, Timeout: time.Minute})
			if err == nil && res.ExitCode != 0 {
				err = errors.New(string(res.Stderr))
			}
			d := time.Since(start)
			_, herr := oc.Health(t.Context())
			mu.Lock()
			rtts = append(rtts, rtt{"exec", d, err}, rtt{"health", time.Since(start) - d, herr})
			mu.Unlock()
		}
	})

	// A busy loop for the whole abuse.
	wg.Go(func() {
		_, _ = p.Exec(abuseCtx, abuser.ID, sandbox.ExecCommand{Args: []string{"sh", "-c", "while :; do :; done"}, Timeout: 10 * time.Minute})
	})

	// A fork bomb: its shell spins (without forking) until the Exec's
	// timeout kills the whole sandbox of the command.
	_, err = p.Exec(t.Context(), abuser.ID, sandbox.ExecCommand{Args: []string{"bash", "-c", "b() { b | b & }; b; while :; do :; done"}, Timeout: 3 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fork bomb: %v, want its timeout", err)
	}
	if evs := events.of("sess-abuser", sandbox.LimitPids); len(evs) == 0 {
		t.Fatalf("no pids limit event after the fork bomb: %+v", events.of("", ""))
	}

	// A memory hog: the kernel kills it (Exec commands go first), not the
	// agent.
	res, err := p.Exec(t.Context(), abuser.ID, sandbox.ExecCommand{
		Args:    []string{"perl", "-e", `my @a; my $s = "x" x (1 << 20); push @a, $s . $_ while 1`},
		Timeout: time.Minute})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("memory hog: %v (exit %d), want it killed", err, res.ExitCode)
	}
	evs := events.of("sess-abuser", sandbox.LimitMemory)
	if len(evs) == 0 {
		t.Fatalf("no memory limit event after the memory hog: %+v", events.of("", ""))
	}
	if ev := evs[0]; ev.SandboxID != abuser.ID || ev.Detail == "" || !ev.AgentAlive {
		t.Fatalf("memory event %+v: want the abuser's sandbox, a detail and its agent alive", ev)
	}

	endAbuse()
	wg.Wait()
	if evs := events.of("sess-victim", ""); len(evs) != 0 {
		t.Fatalf("the victim got limit events: %+v", evs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rtts) == 0 {
		t.Fatal("the victim answered nothing during the abuse")
	}
	var exec, health []time.Duration
	for _, r := range rtts {
		if r.err != nil {
			t.Fatalf("victim %s during the abuse: %v", r.what, r.err)
		}
		if r.what == "exec" {
			exec = append(exec, r.d)
		} else {
			health = append(health, r.d)
		}
	}
	slices.Sort(exec)
	slices.Sort(health)
	t.Logf("victim during the abuse: %d execs, median %v, max %v; agent health median %v, max %v",
		len(exec), exec[len(exec)/2], exec[len(exec)-1], health[len(health)/2], health[len(health)-1])
	for _, sb := range []sandbox.Sandbox{abuser, victim} {
		if alive, _ := p.Alive(t.Context(), sb.ID); !alive {
			t.Fatalf("sandbox %s died", sb.ID)
		}
	}
}
