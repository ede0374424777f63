package hub

import (
	"context"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// ReadWorkspaceFile reads a file of the session's workspace through its
// provider (sandbox.ReadWorkspaceFile: confined to the workspace, regular
// files of at most limit bytes). The runtime is made ready first.
func (h *Hub) ReadWorkspaceFile(ctx context.Context, rel string, limit int64) ([]byte, error) {
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return nil, err
	}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt == nil {
		return nil, ErrClosed
	}
	return sandbox.ReadWorkspaceFile(ctx, h.m.d.Provider, rt.sb.ID, rel, limit)
}
