package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// launchScript starts every bwrap of a sandbox (the agent's, a
// terminal's, an Exec's) on the host: the shell writes its own pid into
// the sandbox's cgroups (one cgroup.procs per hierarchy) and optionally
// raises its OOM score, then replaces itself with bwrap, handing it the
// seccomp filter on fd 9. So bwrap and everything it starts are in the
// cgroup from their first instruction (nothing forks before the join; on
// cgroup v1 there is no CLONE_INTO_CGROUP), and the shell is gone.
//
// Arguments: the filter file, the OOM score adjustment (0: unchanged),
// the cgroup.procs files, "--", then bwrap's command line.
const launchScript = `bpf=$1 adj=$2
shift 2
while [ "$1" != -- ]; do echo $$ >"$1" || exit 125; shift; done
shift
if [ "$adj" != 0 ]; then echo "$adj" >/proc/self/oom_score_adj || exit 125; fi
exec "$@" 9<"$bpf"`

// execOOMScore is the OOM score adjustment of terminals and Exec commands:
// when a sandbox runs out of memory, the kernel kills them (and what they
// started) before the agent.
const execOOMScore = 500

// launch returns the command line that runs argv (bwrap and its
// arguments) in cg (nil: no cgroup) under the seccomp filter.
func (j *jail) launch(cg *sandboxCgroup, oomAdj int, argv []string) []string {
	return j.launchIn(cg, oomAdj, nil, argv)
}

// launchIn is launch with enter (nil: none) run between the launcher and
// bwrap: a command line that ends by running its arguments (a terminal's
// nsenter into the agent sandbox's namespaces, portAccess.enter).
func (j *jail) launchIn(cg *sandboxCgroup, oomAdj int, enter, argv []string) []string {
	out := []string{"/bin/sh", "-c", launchScript, "sandbox-launch", j.seccomp, strconv.Itoa(oomAdj)}
	if cg != nil {
		out = append(out, cg.procsFiles()...)
	}
	out = append(append(out, "--"), enter...)
	out = append(out, argv[0], "--seccomp", "9")
	return append(out, argv[1:]...)
}

// writeSeccomp compiles the seccomp filter into the jail's dir.
func (j *jail) writeSeccomp() error {
	prog, err := seccompProgram()
	if err != nil {
		return err
	}
	j.seccomp = filepath.Join(j.etc, "seccomp.bpf")
	tmp, err := os.CreateTemp(j.etc, ".seccomp-*")
	if err != nil {
		return fmt.Errorf("local sandbox: seccomp: %w", err)
	}
	_, err = tmp.Write(prog)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), j.seccomp) // providers sharing a data dir never read half a filter
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("local sandbox: seccomp: %w", err)
	}
	return nil
}
