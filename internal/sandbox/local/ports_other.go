//go:build !linux

package local

import (
	"errors"
	"os"
)

var errNoProc = errors.New("local sandbox: previews need Linux")

func openAt(*os.File, string) (*os.File, error)      { return nil, errNoProc }
func readAt(*os.File, string, int64) ([]byte, error) { return nil, errNoProc }
func parentAt(*os.File) (int, error)                 { return 0, errNoProc }
