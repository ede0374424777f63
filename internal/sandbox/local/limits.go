package local

import (
	"fmt"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Default resource limits of an isolated sandbox (Options.Limits fields
// left 0).
const (
	DefaultMemoryBytes = 2 << 30 // 2 GiB: OpenCode takes 0.3-0.5 GB, the rest is for builds and tests
	DefaultPids        = 512     // processes and threads (OpenCode alone runs ~30 threads)
	DefaultCPUPercent  = 200     // two CPUs: at one, the agent's start-up (Bun loading OpenCode on several threads) is throttled, +0.9 s per cold start
)

// limitPollInterval is how often the limit counters of a running sandbox
// are read (they are also read when its agent exits and after each Exec).
const limitPollInterval = time.Second

// Limits are the resources of one isolated sandbox: the agent, its
// terminals and Exec commands together (one cgroup per sandbox). For each,
// 0 means the default and a negative value no limit.
type Limits struct {
	// MemoryBytes is the memory limit (swap included where the kernel
	// accounts it); at the limit the kernel kills the sandbox's largest
	// process.
	MemoryBytes int64
	// Pids is the number of processes and threads; at the limit fork and
	// thread creation fail.
	Pids int
	// CPUPercent is the CPU time per period in percent of one CPU (100 =
	// one CPU, 250 = two and a half); a busy sandbox is throttled to it.
	CPUPercent int
}

// withDefaults resolves 0 to the defaults and negative values to 0 (no
// limit).
func (l Limits) withDefaults() Limits {
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return Limits{
		MemoryBytes: pick(l.MemoryBytes, DefaultMemoryBytes),
		Pids:        int(pick(int64(l.Pids), DefaultPids)),
		CPUPercent:  int(pick(int64(l.CPUPercent), DefaultCPUPercent)),
	}
}

func (l Limits) any() bool { return l.MemoryBytes > 0 || l.Pids > 0 || l.CPUPercent > 0 }

// Confinement describes how the provider contains its sandboxes (for
// status pages and logs).
type Confinement struct {
	// Isolation is IsolationBwrap or IsolationNone.
	Isolation string
	// Seccomp is whether sandbox processes run under the seccomp filter.
	Seccomp bool
	// Cgroups is "v1" or "v2" when limits are enforced, else "" and
	// LimitsOff says why.
	Cgroups   string
	LimitsOff string
	// Limits are the enforced limits (zero fields: unlimited).
	Limits Limits
}

// Confinement reports how the provider contains its sandboxes.
func (p *Provider) Confinement() Confinement {
	c := Confinement{Isolation: p.opts.Isolation, Seccomp: p.jail != nil && p.jail.seccomp != "", LimitsOff: p.limitsOff}
	if p.cgroups != nil {
		c.Cgroups, c.Limits = "v1", p.cgroups.limits
		if p.cgroups.v2 {
			c.Cgroups = "v2"
		}
	}
	return c
}

// initLimits opens the cgroups of the sandboxes. Where they cannot be
// used the provider runs without limits, loudly, unless
// Options.RequireLimits.
func (p *Provider) initLimits() error {
	limits := p.opts.Limits.withDefaults()
	if !limits.any() {
		p.limitsOff = "disabled by configuration"
		return nil
	}
	root, err := openCgroups(limits)
	if err != nil {
		if p.opts.RequireLimits {
			return fmt.Errorf("local sandbox: resource limits cannot be enforced here (cgroups: %w); run the gateway as root or with a delegated cgroup", err)
		}
		p.limitsOff = err.Error()
		p.log.Warn("SANDBOX RESOURCE LIMITS ARE OFF: cgroups are not usable here, so one session can take all memory, processes and CPU of this host. "+
			"Run the gateway as root or in a delegated cgroup (PROLIFERATE_ENV=production refuses to start like this).", "error", err)
		return nil
	}
	p.cgroups = root
	version := "v1"
	if root.v2 {
		version = "v2"
	}
	p.log.Info("sandbox resource limits", "cgroups", version, "memory_bytes", limits.MemoryBytes, "pids", limits.Pids, "cpu_percent", limits.CPUPercent)
	return nil
}

// WatchLimits implements sandbox.LimitWatcher.
func (p *Provider) WatchLimits(f func(sandbox.LimitEvent)) (stop func()) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	p.watchID++
	id := p.watchID
	p.watchers[id] = f
	return func() {
		p.watchMu.Lock()
		delete(p.watchers, id)
		p.watchMu.Unlock()
	}
}

// limitState is the limit bookkeeping of one instance.
type limitState struct {
	mu   sync.Mutex
	cg   *sandboxCgroup // nil without limits
	done chan struct{}  // closed when the sandbox stops
}

// watchLimits reads the sandbox's limit counters until it stops: every
// limitPollInterval and as soon as its agent exits.
func (p *Provider) watchLimits(in *instance) {
	t := time.NewTicker(limitPollInterval)
	defer t.Stop()
	exited := in.proc.Exited()
	for {
		select {
		case <-in.limits.done:
			return
		case <-exited:
			exited = nil
			p.checkLimits(in)
		case <-t.C:
			p.checkLimits(in)
		}
	}
}

// checkLimits reports the limit events of the sandbox since the last
// check to the watchers and the log.
func (p *Provider) checkLimits(in *instance) {
	ls := &in.limits
	ls.mu.Lock()
	if ls.cg == nil {
		ls.mu.Unlock()
		return
	}
	oom, pids := ls.cg.newLimitEvents()
	limits := ls.cg.limits
	ls.mu.Unlock()
	var events []sandbox.LimitEvent
	if oom > 0 {
		events = append(events, sandbox.LimitEvent{Kind: sandbox.LimitMemory,
			Detail: fmt.Sprintf("the sandbox ran out of memory (limit %s): the kernel killed %s of its processes", formatBytes(limits.MemoryBytes), plural(oom, "one", "%d"))})
	}
	if pids > 0 {
		events = append(events, sandbox.LimitEvent{Kind: sandbox.LimitPids,
			Detail: fmt.Sprintf("the sandbox reached its limit of %d processes and threads: %s refused", limits.Pids, plural(pids, "a fork was", "%d forks were"))})
	}
	if len(events) == 0 {
		return
	}
	alive := in.alive()
	p.watchMu.Lock()
	watchers := make([]func(sandbox.LimitEvent), 0, len(p.watchers))
	for _, f := range p.watchers {
		watchers = append(watchers, f)
	}
	p.watchMu.Unlock()
	for _, ev := range events {
		ev.SessionID, ev.SandboxID, ev.AgentAlive = in.sessionID, in.id, alive
		p.log.Warn("sandbox limit hit", "session_id", in.sessionID, "sandbox_id", in.id, "limit", ev.Kind,
			"detail", ev.Detail, "agent_alive", alive)
		for _, f := range watchers {
			f(ev)
		}
	}
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// stopLimits reports the sandbox's last limit events and removes its
// cgroup, killing whatever still runs in it (Exec commands of a stopped
// sandbox). Idempotent.
func (p *Provider) stopLimits(in *instance) {
	p.checkLimits(in)
	ls := &in.limits
	ls.mu.Lock()
	cg := ls.cg
	ls.cg = nil
	if cg != nil {
		close(ls.done)
	}
	ls.mu.Unlock()
	if cg != nil {
		cg.remove()
	}
}

// sandboxCgroup returns the cgroup a new process of the sandbox joins
// (nil without limits); false when the sandbox has limits but is stopping
// (its cgroup is gone: nothing may start outside it).
func (p *Provider) sandboxCgroup(in *instance) (*sandboxCgroup, bool) {
	if p.cgroups == nil {
		return nil, true
	}
	in.limits.mu.Lock()
	defer in.limits.mu.Unlock()
	return in.limits.cg, in.limits.cg != nil
}
