package opencode

import "syscall"

// sysProcAttr puts the agent in its own process group (so Stop reaches its
// children) and kills it if the launching process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
