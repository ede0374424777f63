package local

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// oPath is O_PATH (an fd naming a file without opening it), missing from
// package syscall.
const oPath = 0o10000000

// dialSocket connects to the Unix socket at path without following a
// symlink in its last element (the sandbox can write the directory): the
// socket is opened with O_PATH|O_NOFOLLOW, checked to be a socket, and
// connected to through /proc/self/fd.
func dialSocket(path string) (net.Conn, error) {
	fd, err := syscall.Open(path, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("local sandbox: open %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("local sandbox: stat %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, fmt.Errorf("local sandbox: %s is not a socket", path)
	}
	return net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(fd))
}
