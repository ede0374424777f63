//go:build !linux

package opencode

import "syscall"

// sysProcAttr puts the agent in its own process group so Stop reaches its
// children.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
