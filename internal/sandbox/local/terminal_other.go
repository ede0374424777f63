//go:build !linux

package local

// killSession is a no-op where /proc is not available: Close kills the
// terminal's process group only.
func killSession(int) {}
