//go:build !linux

package local

import (
	"errors"
	"net"
)

// dialSocket is Linux-only (so is bubblewrap).
func dialSocket(path string) (net.Conn, error) {
	return nil, errors.New("local sandbox: sandbox channels need Linux")
}
