//go:build !linux

package opencode

// killTagged is only implemented on Linux (it reads /proc); elsewhere
// detached tool processes are left to the process-group kill.
func killTagged(string) int { return 0 }
