package local

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMount is where the cgroup hierarchies are mounted.
const cgroupMount = "/sys/fs/cgroup"

// cgroupParent is the directory, under this process's own cgroup of each
// hierarchy, that holds the sandboxes' cgroups (one per sandbox, named
// after its id).
const cgroupParent = "proliferate-sandboxes"

// cgroupRoot is where sandbox cgroups are created: cgroup v2 (the unified
// hierarchy, /sys/fs/cgroup/cgroup.controllers exists) or v1 with the
// memory, pids and cpu controllers mounted under /sys/fs/cgroup/<name>.
type cgroupRoot struct {
	v2 bool
	// memory, pids, cpu are the parent dirs of the sandboxes' cgroups in
	// each controller's hierarchy (the same dir on v2).
	memory, pids, cpu string
	// memsw: v1 with swap accounting (memory.memsw.limit_in_bytes);
	// swapMax: v2 with memory.swap.max. The memory limit then covers
	// swap too.
	memsw, swapMax bool
	limits         Limits
}

// openCgroups finds this process's cgroups and prepares the parent dirs
// of the sandboxes' cgroups; an error means the limits cannot be
// enforced here (not root, no delegation, controllers missing).
func openCgroups(limits Limits) (*cgroupRoot, error) {
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	r := &cgroupRoot{limits: limits}
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		r.v2 = true
		base, err := prepareV2(filepath.Join(cgroupMount, own[""]))
		if err != nil {
			return nil, err
		}
		r.memory, r.pids, r.cpu = base, base, base
		_, err = os.Stat(filepath.Join(base, "memory.swap.max"))
		r.swapMax = err == nil
		return r, nil
	}
	for _, c := range []struct {
		name string
		dir  *string
	}{{"memory", &r.memory}, {"pids", &r.pids}, {"cpu", &r.cpu}} {
		path, ok := own[c.name]
		if !ok {
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted", c.name)
		}
		mount := filepath.Join(cgroupMount, c.name)
		if _, err := os.Stat(mount); err != nil {
			return nil, fmt.Errorf("cgroup v1 controller %s: %w", c.name, err)
		}
		*c.dir = filepath.Join(mount, path, cgroupParent)
		if err := os.MkdirAll(*c.dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 controller %s: %w", c.name, err)
		}
	}
	_, err = os.Stat(filepath.Join(r.memory, "memory.memsw.limit_in_bytes"))
	r.memsw = err == nil
	r.removeStale()
	return r, nil
}

// staleCgroupAge is how old an empty sandbox cgroup must be before a new
// provider removes it as left behind.
const staleCgroupAge = 10 * time.Minute

// removeStale removes the empty cgroups of sandboxes a previous gateway
// process left behind (killed before it could stop them; their
// processes died with it). A cgroup with processes cannot be removed
// (EBUSY); a young one may be another provider's sandbox being started.
func (r *cgroupRoot) removeStale() {
	for _, parent := range []string{r.memory, r.pids, r.cpu} {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "lsb_") {
				continue
			}
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleCgroupAge {
				_ = os.Remove(filepath.Join(parent, e.Name()))
			}
		}
	}
}

// ownCgroups reads /proc/self/cgroup: controller → path ("" is the
// unified hierarchy's path).
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// prepareV2 makes own/proliferate-sandboxes with the memory, pids and cpu
// controllers enabled for its children. A cgroup with processes cannot
// enable controllers for its children (the "no internal processes" rule):
// when own holds processes (this one), they move first into a leaf
// own/proliferate-gateway.
func prepareV2(own string) (string, error) {
	enable := func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
	}
	if err := enable(own); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return "", fmt.Errorf("cgroup v2: enable controllers in %s: %w", own, err)
		}
		leaf := filepath.Join(own, "proliferate-gateway")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("cgroup v2: %w", err)
		}
		pids, err := cgroupProcs(own)
		if err != nil {
			return "", err
		}
		for _, pid := range pids {
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
				return "", fmt.Errorf("cgroup v2: move process %d to %s: %w", pid, leaf, err)
			}
		}
		if err := enable(own); err != nil {
			return "", fmt.Errorf("cgroup v2: enable controllers in %s: %w", own, err)
		}
	}
	base := filepath.Join(own, cgroupParent)
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	if err := enable(base); err != nil {
		return "", fmt.Errorf("cgroup v2: enable controllers in %s: %w", base, err)
	}
	return base, nil
}

// sandboxCgroup is one sandbox's cgroup (a dir per v1 hierarchy, one on
// v2). Every process of the sandbox joins it before bwrap starts (see
// jail.launch).
type sandboxCgroup struct {
	v2                bool
	memory, pids, cpu string
	limits            Limits
	// seen are the event counters already reported.
	seenOOM, seenPids uint64
}

// create makes the cgroup of sandbox id with the limits set.
func (r *cgroupRoot) create(id string) (*sandboxCgroup, error) {
	cg := &sandboxCgroup{v2: r.v2, limits: r.limits,
		memory: filepath.Join(r.memory, id), pids: filepath.Join(r.pids, id), cpu: filepath.Join(r.cpu, id)}
	for _, d := range cg.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("local sandbox: create cgroup: %w", err)
		}
	}
	type setting struct{ dir, file, value string }
	var set []setting
	l := r.limits
	if r.v2 {
		if l.MemoryBytes > 0 {
			set = append(set, setting{cg.memory, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)})
			if r.swapMax {
				set = append(set, setting{cg.memory, "memory.swap.max", "0"})
			}
		}
		if l.Pids > 0 {
			set = append(set, setting{cg.pids, "pids.max", strconv.Itoa(l.Pids)})
		}
		if l.CPUPercent > 0 {
			set = append(set, setting{cg.cpu, "cpu.max", fmt.Sprintf("%d 100000", l.CPUPercent*1000)})
		}
	} else {
		if l.MemoryBytes > 0 {
			set = append(set, setting{cg.memory, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
			if r.memsw {
				// At least the memory limit: memory and swap together may
				// not exceed it, so the sandbox cannot swap past it.
				set = append(set, setting{cg.memory, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
			}
		}
		if l.Pids > 0 {
			set = append(set, setting{cg.pids, "pids.max", strconv.Itoa(l.Pids)})
		}
		if l.CPUPercent > 0 {
			set = append(set, setting{cg.cpu, "cpu.cfs_period_us", "100000"},
				setting{cg.cpu, "cpu.cfs_quota_us", strconv.Itoa(l.CPUPercent * 1000)})
		}
	}
	for _, s := range set {
		if err := os.WriteFile(filepath.Join(s.dir, s.file), []byte(s.value), 0); err != nil {
			cg.remove()
			return nil, fmt.Errorf("local sandbox: cgroup %s: %w", s.file, err)
		}
	}
	return cg, nil
}

// dirs are the cgroup's directories, one per hierarchy.
func (cg *sandboxCgroup) dirs() []string {
	if cg.v2 {
		return []string{cg.memory}
	}
	return []string{cg.memory, cg.pids, cg.cpu}
}

// procsFiles are the files a process writes its pid to to join the
// cgroup.
func (cg *sandboxCgroup) procsFiles() []string {
	var out []string
	for _, d := range cg.dirs() {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// remove kills whatever still runs in the cgroup (nothing of a stopped
// sandbox may survive it) and removes it. A cgroup is removable once its
// killed processes have exited, which takes the kernel a moment.
func (cg *sandboxCgroup) remove() {
	for _, d := range cg.dirs() {
		for attempt := 0; ; attempt++ {
			pids, err := cgroupProcs(d)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			err = os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) || attempt == 100 {
				break
			}
			time.Sleep(20 * time.Millisecond) // killed processes still exiting
		}
	}
}

// cgroupProcs lists the processes of cgroup dir.
func cgroupProcs(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// counters reads the cgroup's out-of-memory kills and refused forks so
// far (v1 memory.oom_control oom_kill, v2 memory.events oom_kill;
// pids.events max on both).
func (cg *sandboxCgroup) counters() (oomKills, pidsMax uint64) {
	memFile := "memory.oom_control"
	if cg.v2 {
		memFile = "memory.events"
	}
	return readCounter(filepath.Join(cg.memory, memFile), "oom_kill"), readCounter(filepath.Join(cg.pids, "pids.events"), "max")
}

// readCounter reads the value of key in a flat-keyed cgroup file; 0 when
// it is missing.
func readCounter(file, key string) uint64 {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// newLimitEvents returns what happened since the last call: out-of-memory
// kills and refused forks (their counts).
func (cg *sandboxCgroup) newLimitEvents() (oomKills, pidsRefused uint64) {
	oom, pids := cg.counters()
	if oom > cg.seenOOM {
		oomKills = oom - cg.seenOOM
		cg.seenOOM = oom
	}
	if pids > cg.seenPids {
		pidsRefused = pids - cg.seenPids
		cg.seenPids = pids
	}
	return oomKills, pidsRefused
}
