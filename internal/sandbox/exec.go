package sandbox

import (
	"context"
	"time"
)

// Executor is implemented by providers that can run a command inside a
// sandbox's workspace (git operations, diagnostics). It is optional: callers
// type-assert a Provider to Executor.
//
// Exec runs cmd.Args (no shell) in cmd.Dir, a path relative to the
// workspace that must stay inside it (absolute paths, ".." escapes and
// symlinks leading out are refused). A non-zero exit status is not an
// error: it is reported in ExecResult.ExitCode. Errors mean the command
// could not be run (unknown sandbox, invalid Dir, timeout, context end).
type Executor interface {
	Exec(ctx context.Context, sandboxID string, cmd ExecCommand) (ExecResult, error)
}

// ExecCommand is one command to run in a sandbox.
type ExecCommand struct {
	// Args is the program and its arguments; Args[0] is looked up in PATH.
	Args []string
	// Dir is the working directory relative to the workspace ("" = root).
	Dir string
	// Env adds environment variables (never logged).
	Env map[string]string
	// Stdin is the command's standard input (nil = empty).
	Stdin []byte
	// Timeout bounds the command; 0 means the provider's default.
	Timeout time.Duration
}

// ExecResult is a finished command's outcome.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}
