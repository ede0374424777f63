package opencode

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// killTagged SIGKILLs every process whose environment carries tag (a
// KEY=VALUE entry given only to one agent). Tool commands that detach into
// their own session (OpenCode's bash tool does) and are reparented to init
// escape the process group; they still inherit the environment. It returns
// how many processes it signalled.
func killTagged(tag string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	needle := []byte(tag)
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for entry := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(entry, needle) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
				break
			}
		}
	}
	return n
}
