package local

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// openAt opens name under the directory handle dir without following a
// symlink at its last element that is not procfs's own.
func openAt(dir *os.File, name string) (*os.File, error) {
	fd, err := syscall.Openat(int(dir.Fd()), name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: dir.Name() + "/" + name, Err: err}
	}
	return os.NewFile(uintptr(fd), dir.Name()+"/"+name), nil
}

// readAt reads at most max bytes of name under dir.
func readAt(dir *os.File, name string, max int64) ([]byte, error) {
	f, err := openAt(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// parentAt is the parent pid of the process whose /proc dir is dir.
func parentAt(dir *os.File) (int, error) {
	b, err := readAt(dir, "stat", 4096)
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(f[1])
}
