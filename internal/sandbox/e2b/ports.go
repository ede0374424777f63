package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Previews (sandbox.Ports): E2B exposes every port of a sandbox at
// https://{port}-{sandbox id}.{E2B_DOMAIN} (Client.PortURL), so a preview
// is a request to that host with the provider's HTTP transport
// (WebSocket upgrades included). Listening ports are read inside the
// sandbox through envd (/proc/net/tcp{,6}). The agent's port and envd's
// are the sandbox's own and refused.

var reservedPorts = []int{AgentPort, EnvdPort}

var _ sandbox.Ports = (*Provider)(nil)

// PortTarget implements sandbox.Ports.
func (p *Provider) PortTarget(ctx context.Context, sessionID, sandboxID string, port int) (*url.URL, http.RoundTripper, error) {
	if port < 1 || port > 65535 {
		return nil, nil, fmt.Errorf("e2b: port %d out of range", port)
	}
	if slices.Contains(reservedPorts, port) {
		return nil, nil, sandbox.ErrPortReserved
	}
	if err := p.sessionSandbox(ctx, sessionID, sandboxID); err != nil {
		return nil, nil, err
	}
	e2bID, _ := splitID(sandboxID)
	u, err := url.Parse(p.c.PortURL(e2bID, port))
	if err != nil {
		return nil, nil, fmt.Errorf("e2b: port URL: %w", err)
	}
	rt := p.c.HTTPClient().Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	return u, rt, nil
}

// ListeningPorts implements sandbox.Ports.
func (p *Provider) ListeningPorts(ctx context.Context, sessionID, sandboxID string) ([]int, error) {
	if err := p.sessionSandbox(ctx, sessionID, sandboxID); err != nil {
		return nil, err
	}
	e, err := p.liveEnvd(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, out, _, err := e.Run(ctx, ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"}, Cwd: Home})
	if err != nil {
		return nil, fmt.Errorf("e2b: listening ports of %s: %w", sandboxID, err)
	}
	return slices.DeleteFunc(sandbox.ParseProcNetTCP(out), func(port int) bool { return slices.Contains(reservedPorts, port) }), nil
}

// sessionSandbox checks that sandboxID is the session's running sandbox:
// this process's view first, else E2B's metadata.
func (p *Provider) sessionSandbox(ctx context.Context, sessionID, sandboxID string) error {
	p.mu.Lock()
	sb, ok := p.live[sessionID]
	p.mu.Unlock()
	if ok && sb.ID == sandboxID {
		return nil
	}
	e2bID, _ := splitID(sandboxID)
	d, err := p.c.Get(ctx, e2bID)
	if err != nil || d.State != StateRunning || d.Metadata[metaSession] != sessionID {
		return fmt.Errorf("e2b: sandbox %s of session %s: %w", sandboxID, sessionID, sandbox.ErrNotFound)
	}
	return nil
}
