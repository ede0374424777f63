package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ErrPortReserved reports a port the provider keeps for the sandbox's own
// plumbing (the agent, the in-sandbox ends of its channels, the provider's
// daemon): previews never reach it.
var ErrPortReserved = errors.New("sandbox: port is reserved for the sandbox's own use")

// ErrPortsUnsupported reports a sandbox whose ports cannot be reached
// safely (the local provider without isolation: its "sandbox" ports are
// the host's).
var ErrPortsUnsupported = errors.New("sandbox: this sandbox's ports cannot be reached")

// Ports is implemented by providers whose sandboxes' TCP ports the
// gateway can reach (previews, port forwarding). It is optional: callers
// type-assert a Provider to Ports.
type Ports interface {
	// PortTarget returns how to reach TCP port on the sandbox's loopback:
	// the base URL to send requests to (scheme and host; the path is the
	// caller's) and the RoundTripper that carries them, WebSocket upgrades
	// included (it returns 101 responses with a writable body, as
	// http.Transport does). The RoundTripper reaches nothing but that
	// sandbox's ports. ErrNotFound when the sandbox is not live,
	// ErrPortReserved for the provider's own ports, ErrPortsUnsupported
	// when the provider cannot contain the connection.
	PortTarget(ctx context.Context, sessionID, sandboxID string, port int) (*url.URL, http.RoundTripper, error)
	// ListeningPorts lists the TCP ports something listens on inside the
	// sandbox (any address, IPv4 or IPv6), sorted, without the reserved
	// ones.
	ListeningPorts(ctx context.Context, sessionID, sandboxID string) ([]int, error)
}

// tcpListen is the state column's value of a listening socket in
// /proc/net/tcp{,6}.
const tcpListen = "0A"

// ParseProcNetTCP returns the ports of the listening sockets in the
// contents of /proc/net/tcp and /proc/net/tcp6 (concatenated or not),
// sorted and without duplicates. Malformed lines are skipped.
func ParseProcNetTCP(data []byte) []int {
	var ports []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st ...
		if len(f) < 4 || f[3] != tcpListen || !strings.HasSuffix(f[0], ":") {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || p == 0 {
			continue
		}
		ports = append(ports, int(p))
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}
