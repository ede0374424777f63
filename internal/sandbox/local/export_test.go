package local

import (
	"context"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Hooks for the benchmarks (package local_test).

// WriteSnapshotFile writes a snapshot of workspace and agentDir (the
// agent's database directory, quiet) to dest, as Pause does.
func WriteSnapshotFile(ctx context.Context, sessionID, workspace, agentDir, dest string) (int64, error) {
	return writeSnapshot(ctx, snapshotSource{sessionID: sessionID, workspace: workspace, agentDir: agentDir}, dest)
}

// SnapshotPath is where the provider stores snapshot id.
func (p *Provider) SnapshotPath(id string) string { return p.snapshotPath(id) }

// RestoreSnapshot restores snapshot id for a session as EnsureSandbox does,
// without starting the agent.
func (p *Provider) RestoreSnapshot(id, sessionID string) error {
	_, err := p.restore(id, sessionID)
	return err
}

// AgentPID is the host pid of the process the provider started for the
// session's agent (opencode, or the bwrap launching it), 0 when none runs.
func (p *Provider) AgentPID(sessionID string) int {
	in := p.instanceFor(sessionID, "")
	if in == nil {
		return 0
	}
	return in.proc.Pid()
}

// TerminalPID is the host pid of the process the provider started for a
// terminal (the shell, or the bwrap launching it): its session id.
func TerminalPID(t sandbox.Terminal) int { return t.(*terminal).cmd.Process.Pid }

// JailGatewayURL is PROLIFERATE_GATEWAY_URL inside an isolated sandbox
// for a gateway URL without a path.
const JailGatewayURL = "http://127.0.0.1:4100"

// RunRoot is where the provider creates its sandboxes' runtime dirs.
func (p *Provider) RunRoot() string { return p.runRoot }
