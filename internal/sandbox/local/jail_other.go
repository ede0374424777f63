//go:build !linux

package local

// killJail is Linux-only (so is bubblewrap).
func killJail(outer int) bool { return false }
