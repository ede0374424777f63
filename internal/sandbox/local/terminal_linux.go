package local

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// killSession SIGKILLs every process of session sid (a terminal's shell
// and what it started, including background jobs, which interactive shells
// put in process groups of their own), rescanning until none is left or
// after a few rounds.
func killSession(sid int) {
	for range 3 {
		if killSessionOnce(sid) == 0 {
			return
		}
	}
}

func killSessionOnce(sid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		if s, ok := procSession(pid); ok && s == sid {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// procSession reads the session id of pid from /proc/<pid>/stat (field 6;
// the command name in field 2 may contain spaces and parentheses, so
// fields are counted after its last ')').
func procSession(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp session …
	if len(f) < 4 {
		return 0, false
	}
	sid, err := strconv.Atoi(f[3])
	return sid, err == nil
}
