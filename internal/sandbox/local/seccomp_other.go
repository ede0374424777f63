//go:build !linux

package local

import "errors"

// seccompProgram is Linux-only (so is bubblewrap).
func seccompProgram() ([]byte, error) {
	return nil, errors.New("local sandbox: seccomp filters need Linux")
}
