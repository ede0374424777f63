package local

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// killJail ends the sandbox the bwrap process outer runs: it SIGKILLs
// outer's child, the init of the sandbox's pid namespace, whose death ends
// every process of the namespace; bwrap then reaps it and exits with it.
// (Killing bwrap itself would leave that init to be reaped by the host's
// init, later.) It reports whether it found the sandbox.
func killJail(outer int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	parent := strconv.Itoa(outer)
	found := false
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == parent {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				found = true
			}
		}
	}
	return found
}

// ownedByMe reports whether a file belongs to this process's user.
func ownedByMe(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}
