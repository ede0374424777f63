package local

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter of every sandbox process (bwrap --seccomp): the
// system calls a coding agent never needs are refused, everything else is
// allowed. bwrap installs it (with no_new_privs) right before it executes
// the sandbox's command, so it covers the agent, its tools, terminals and
// Exec commands and everything they start; a filter cannot be removed.
//
// Refused with EPERM:
var seccompDenied = []string{
	// mounts and root changes (the sandbox's view of the filesystem is
	// fixed by bwrap)
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr",
	// new namespaces and joining others (also clone with CLONE_NEW*, below)
	"unshare", "setns",
	// tracing and reading other processes' memory
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	// kernel modules, kexec, the kernel keyring, BPF, perf, userfaultfd
	"init_module", "finit_module", "delete_module", "create_module", "kexec_load", "kexec_file_load",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "fanotify_init",
	// the machine: reboot, swap, accounting, quotas, clock, I/O ports,
	// the kernel log, obsolete calls
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "settimeofday", "clock_settime",
	"iopl", "ioperm", "syslog", "uselib", "lookup_dcookie", "nfsservctl", "_sysctl",
	// file handles bypass path permissions
	"open_by_handle_at", "name_to_handle_at",
}

// seccompAbsent are refused with ENOSYS, as if the kernel did not have
// them, so programs fall back: clone3 (glibc then uses clone, whose flags
// the filter can see) and io_uring (libuv and bun fall back to threads).
var seccompAbsent = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// cloneNamespaceFlags are the flags of clone(2) that create namespaces;
// a clone with any of them is refused with EPERM (CLONE_NEWTIME is not
// one: in clone(2) its bit is part of the exit signal).
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// seccompProgram returns the filter for this machine's architecture as
// bwrap reads it: struct sock_filter entries in native byte order. A
// system call of another architecture (the 32-bit ABIs of a 64-bit
// kernel) is refused with ENOSYS: the deny list could be bypassed there.
func seccompProgram() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("local sandbox: seccomp: %w", err)
	}
	known := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	enosys := seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: known(seccompDenied)},
			{Action: enosys, Names: known(seccompAbsent)},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{{
				Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags}},
			}}},
		},
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("local sandbox: seccomp: %w", err)
	}
	// The policy lets other architectures through to its default (allow):
	// refuse them first.
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(enosys)},
	}
	raw, err := bpf.Assemble(append(guard, insts...))
	if err != nil {
		return nil, fmt.Errorf("local sandbox: seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}
