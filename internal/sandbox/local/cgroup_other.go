//go:build !linux

package local

import "errors"

// Cgroups are Linux-only (so is bubblewrap).
type cgroupRoot struct {
	v2     bool
	limits Limits
}

type sandboxCgroup struct{ limits Limits }

func openCgroups(Limits) (*cgroupRoot, error) {
	return nil, errors.New("cgroups need Linux")
}

func (r *cgroupRoot) create(string) (*sandboxCgroup, error) {
	return nil, errors.New("cgroups need Linux")
}

func (cg *sandboxCgroup) procsFiles() []string                           { return nil }
func (cg *sandboxCgroup) remove()                                        {}
func (cg *sandboxCgroup) newLimitEvents() (oomKills, pidsRefused uint64) { return 0, 0 }
