package hub

// Previews: while clients watch a session (its WebSocket stream), the hub
// lists the TCP ports listening in its sandbox every PreviewDeps.PollEvery
// (sandbox.Ports) and announces each port that starts listening, within
// the allowed range, with one preview_url frame per client: the
// preview's URL and, for a person, a link they can open in a browser
// (PreviewDeps.URL mints it for them alone). A port is announced once
// while it keeps listening; one that stops and starts again is announced
// again. A client attaching later gets the ports listening now. Polling
// stops when the last client leaves and starts again with the next.

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// PreviewDeps configure the announcements.
type PreviewDeps struct {
	// PollEvery is the period of the listening-port checks [2s].
	PollEvery time.Duration
	// PortMin and PortMax bound the ports announced [1024, 65535].
	PortMin, PortMax int
	// URL returns the preview URL of port and, for a person p, a link to
	// open it ("" when none). nil: no announcements.
	URL func(ctx context.Context, p *auth.Principal, sessionID string, port int) (url, openURL string)
}

// previewState is a hub's announcement state.
type previewState struct {
	running   bool
	sandboxID string
	seen      []int // ports listening at the last check, sorted
}

// ErrNoPreviews: the provider cannot reach its sandboxes' ports.
var ErrNoPreviews = errors.New("hub: this sandbox provider has no previews")

// PortTarget returns how to reach port in the session's live sandbox
// (sandbox.Ports): ErrClosed without a running sandbox, ErrNoPreviews
// when the provider has no ports, the provider's errors otherwise
// (sandbox.ErrPortReserved, ErrPortsUnsupported, ErrNotFound).
func (h *Hub) PortTarget(ctx context.Context, port int) (*url.URL, http.RoundTripper, error) {
	pp, ok := h.m.d.Provider.(sandbox.Ports)
	if !ok {
		return nil, nil, ErrNoPreviews
	}
	sb, ok := h.Sandbox()
	if !ok {
		return nil, nil, ErrClosed
	}
	return pp.PortTarget(ctx, h.id, sb.ID, port)
}

// ListeningPorts lists the ports listening in the session's live sandbox
// within the allowed range.
func (h *Hub) ListeningPorts(ctx context.Context) ([]int, error) {
	pp, ok := h.m.d.Provider.(sandbox.Ports)
	if !ok {
		return nil, ErrNoPreviews
	}
	sb, ok := h.Sandbox()
	if !ok {
		return nil, ErrClosed
	}
	ports, err := pp.ListeningPorts(ctx, h.id, sb.ID)
	if err != nil {
		return nil, err
	}
	pd := h.m.d.Previews
	return slices.DeleteFunc(ports, func(p int) bool { return p < pd.PortMin || p > pd.PortMax }), nil
}

// WatchPreviews sends c (attached as p) the ports listening now and
// makes sure the hub watches for new ones while clients are attached.
func (h *Hub) WatchPreviews(c Client, p *auth.Principal) {
	pd := h.m.d.Previews
	if pd.URL == nil {
		return
	}
	if _, ok := h.m.d.Provider.(sandbox.Ports); !ok {
		return
	}
	h.pvMu.Lock()
	seen := slices.Clone(h.pv.seen)
	start := !h.pv.running
	h.pv.running = true
	h.pvMu.Unlock()
	for _, port := range seen {
		h.sendPreview(c, p, port)
	}
	if start {
		go h.watchPreviews()
	}
}

// watchPreviews polls the listening ports until no client is attached.
func (h *Hub) watchPreviews() {
	t := time.NewTicker(h.m.d.Previews.PollEvery)
	defer t.Stop()
	for {
		h.pvMu.Lock()
		if len(*h.clientsSnap.Load()) == 0 || h.life.Err() != nil {
			h.pv.running = false
			h.pvMu.Unlock()
			return
		}
		h.pvMu.Unlock()
		h.checkPorts()
		select {
		case <-h.life.Done():
		case <-t.C:
		}
	}
}

// checkPorts lists the ports once and announces the new ones.
func (h *Hub) checkPorts() {
	sb, ok := h.Sandbox()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(h.life, 10*time.Second)
	defer cancel()
	ports, err := h.ListeningPorts(ctx)
	if err != nil {
		if h.life.Err() == nil && !errors.Is(err, ErrClosed) && !errors.Is(err, sandbox.ErrNotFound) {
			h.log.Warn("hub: listening ports", "err", err)
		}
		return
	}
	h.pvMu.Lock()
	var fresh []int
	for _, port := range ports {
		if h.pv.sandboxID != sb.ID || !slices.Contains(h.pv.seen, port) {
			fresh = append(fresh, port)
		}
	}
	h.pv.sandboxID, h.pv.seen = sb.ID, ports
	h.pvMu.Unlock()
	if len(fresh) == 0 {
		return
	}
	h.mu.Lock()
	clients := maps.Clone(h.clients)
	h.mu.Unlock()
	for _, port := range fresh {
		h.log.Info("hub: port listening in the sandbox", "port", port)
		for c, p := range clients {
			h.sendPreview(c, p, port)
		}
	}
}

// sendPreview sends c the preview_url frame of port.
func (h *Hub) sendPreview(c Client, p *auth.Principal, port int) {
	ctx, cancel := context.WithTimeout(h.life, 5*time.Second)
	defer cancel()
	u, open := h.m.d.Previews.URL(ctx, p, h.id, port)
	h.sendTo(c, protocol.PreviewURLMessage{Type: protocol.MsgPreviewURL, Port: port, URL: u, OpenURL: open})
}
