package local

import "context"

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
