// Package egress is a sandbox's way to the internet: an HTTP(S) forward
// proxy (CONNECT tunnels and absolute-form plain HTTP) that the sandbox
// provider serves on a Unix socket of each sandbox, with a policy deciding
// which destinations it may reach.
//
// Modes (SANDBOX_EGRESS):
//
//   - none: every request is refused;
//   - allowlist: only the hosts of the allowlist (SANDBOX_EGRESS_ALLOW);
//   - open: any host.
//
// In every mode a destination that resolves to a loopback, private,
// link-local, multicast or otherwise non-public address, or to one of the
// platform's own addresses (this host's interfaces, the hosts of the
// platform's URLs), is refused unless an allowlist entry names that exact
// host:port. Names are resolved once per connection by the proxy and the
// checked address is dialed, so a name cannot resolve to a public address
// for the check and to an internal one for the connection.
//
// Allowlist entries are host names (github.com), wildcards (*.github.com:
// any name under github.com, not github.com itself) or IP literals, each
// with an optional :port; without a port every port of the host is
// allowed.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Modes.
const (
	ModeNone      = "none"
	ModeAllowlist = "allowlist"
	ModeOpen      = "open"
)

// DefaultAllow is the default allowlist: the git host and the package
// registries of the common toolchains. config's SANDBOX_EGRESS_ALLOW
// default is the same list (a test keeps them equal).
var DefaultAllow = []string{
	"github.com", "*.github.com", "*.githubusercontent.com",
	"registry.npmjs.org", "registry.yarnpkg.com",
	"pypi.org", "files.pythonhosted.org",
	"proxy.golang.org", "sum.golang.org",
	"crates.io", "*.crates.io",
	"rubygems.org", "repo.maven.apache.org", "repo1.maven.org",
	"deb.debian.org", "security.debian.org",
}

// Refusal reasons (the reason label of the refused-connections metric).
const (
	ReasonDisabled       = "egress_disabled"      // SANDBOX_EGRESS=none
	ReasonNotAllowed     = "not_allowlisted"      // allowlist mode, host not listed
	ReasonInternal       = "internal_address"     // resolves to a non-public or platform address
	ReasonPlatform       = "platform_host"        // one of the platform's own host names
	ReasonBadRequest     = "bad_request"          // not a proxy request, or an invalid target
	ReasonTooManyConns   = "too_many_connections" // the sandbox's connection limit
	ReasonResolveFailure = "resolve_failed"       // the name does not resolve
)

// Target is a destination host and port. Host is canonical: lower case
// without a trailing dot, or an IP address in its canonical form (IPv4
// for IPv4-mapped IPv6); IP is set when Host is an address.
type Target struct {
	Host string
	Port int
	IP   netip.Addr
}

// String is host:port, with brackets for IPv6.
func (t Target) String() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// ParseTarget parses a request authority (host:port, [v6]:port, or host
// when defaultPort is not 0).
func ParseTarget(authority string, defaultPort int) (Target, error) {
	host, port, err := splitAuthority(authority, false)
	if err != nil {
		return Target{}, err
	}
	if port == 0 {
		if defaultPort == 0 {
			return Target{}, fmt.Errorf("egress: %q has no port", authority)
		}
		port = defaultPort
	}
	h, ip, err := canonicalHost(host)
	if err != nil {
		return Target{}, err
	}
	return Target{Host: h, Port: port, IP: ip}, nil
}

// splitAuthority splits host[:port]; port 0 means none. bareV6 accepts an
// IPv6 address without brackets (and then without a port).
func splitAuthority(s string, bareV6 bool) (string, int, error) {
	if s == "" {
		return "", 0, errors.New("egress: empty host")
	}
	var host, port string
	switch {
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("egress: %q: missing ]", s)
		}
		host = s[:end+1]
		rest := s[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", 0, fmt.Errorf("egress: %q: junk after ]", s)
			}
			port = p
			if port == "" {
				return "", 0, fmt.Errorf("egress: %q: empty port", s)
			}
		}
	case strings.Count(s, ":") > 1:
		if !bareV6 {
			return "", 0, fmt.Errorf("egress: %q: an IPv6 address needs brackets", s)
		}
		host = s
	default:
		h, p, found := strings.Cut(s, ":")
		host = h
		if found {
			if p == "" {
				return "", 0, fmt.Errorf("egress: %q: empty port", s)
			}
			port = p
		}
	}
	n := 0
	if port != "" {
		if len(port) > 5 {
			return "", 0, fmt.Errorf("egress: %q: invalid port", s)
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return "", 0, fmt.Errorf("egress: %q: invalid port", s)
			}
		}
		n, _ = strconv.Atoi(port)
		if n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("egress: %q: port out of range", s)
		}
	}
	return host, n, nil
}

// canonicalHost validates a host name or IP literal ([v6] or bare) and
// returns its canonical form.
func canonicalHost(h string) (string, netip.Addr, error) {
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") {
			return "", netip.Addr{}, fmt.Errorf("egress: %q: missing ]", h)
		}
		ip, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("egress: %q is not an IPv6 address", h)
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("egress: %q: zones are not allowed", h)
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	if name == "" || len(name) > 253 {
		return "", netip.Addr{}, fmt.Errorf("egress: invalid host name %q", h)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", netip.Addr{}, fmt.Errorf("egress: invalid host name %q", h)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", netip.Addr{}, fmt.Errorf("egress: invalid host name %q", h)
			}
		}
	}
	// A numeric last label is no DNS name: it is an address in a form
	// netip refuses (127.1, 0177.0.0.1…) that a resolver could accept.
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", netip.Addr{}, fmt.Errorf("egress: %q is not a valid address or host name", h)
	}
	return name, netip.Addr{}, nil
}

// entry is one allowlist entry.
type entry struct {
	host     string // canonical; for a wildcard the suffix without "*."
	wildcard bool
	port     int // 0: any
}

// Allowlist is a parsed SANDBOX_EGRESS_ALLOW.
type Allowlist struct {
	entries []entry
}

// ParseAllowlist parses allowlist entries (see the package doc).
func ParseAllowlist(entries []string) (Allowlist, error) {
	var a Allowlist
	var errs []error
	for _, raw := range entries {
		e, err := parseEntry(strings.TrimSpace(raw))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a.entries = append(a.entries, e)
	}
	return a, errors.Join(errs...)
}

func parseEntry(s string) (entry, error) {
	wild := false
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		wild, s = true, rest
	}
	host, port, err := splitAuthority(s, !wild)
	if err != nil {
		return entry{}, err
	}
	h, ip, err := canonicalHost(host)
	if err != nil {
		return entry{}, err
	}
	if wild && ip.IsValid() {
		return entry{}, fmt.Errorf("egress: %q: a wildcard needs a host name", "*."+s)
	}
	return entry{host: h, wildcard: wild, port: port}, nil
}

// match reports whether an entry lists t, and whether one names exactly
// t's host and port.
func (a Allowlist) match(t Target) (listed, exact bool) {
	for _, e := range a.entries {
		if e.port != 0 && e.port != t.Port {
			continue
		}
		switch {
		case e.wildcard:
			if !t.IP.IsValid() && strings.HasSuffix(t.Host, "."+e.host) {
				listed = true
			}
		case e.host == t.Host:
			listed = true
			if e.port != 0 {
				exact = true
			}
		}
	}
	return listed, exact
}

// Len is the number of entries.
func (a Allowlist) Len() int { return len(a.entries) }

// Policy decides which destinations a sandbox may reach.
type Policy struct {
	mode  string
	allow Allowlist
	// platformHosts are the platform's own host names; platformIPs their
	// addresses, resolved once (best effort).
	platformHosts map[string]bool
	platformIPs   map[netip.Addr]bool
	// ownAddrs lists this host's interface addresses (per check: they can
	// change); a test may replace it.
	ownAddrs func() []netip.Addr
}

// NewPolicy validates mode and the allowlist. platformHosts are host names
// (or IP literals) of the platform's own endpoints, always refused unless
// named exactly by an allowlist entry.
func NewPolicy(ctx context.Context, mode string, allow []string, platformHosts []string) (*Policy, error) {
	switch mode {
	case ModeNone, ModeAllowlist, ModeOpen:
	default:
		return nil, fmt.Errorf("egress: unknown mode %q (want %s, %s or %s)", mode, ModeNone, ModeAllowlist, ModeOpen)
	}
	a, err := ParseAllowlist(allow)
	if err != nil {
		return nil, err
	}
	p := &Policy{mode: mode, allow: a, platformHosts: map[string]bool{}, platformIPs: map[netip.Addr]bool{}, ownAddrs: interfaceAddrs}
	for _, h := range platformHosts {
		host, _, err := splitAuthority(h, true)
		if err != nil {
			continue
		}
		name, ip, err := canonicalHost(host)
		if err != nil {
			continue
		}
		if ip.IsValid() {
			p.platformIPs[ip] = true
			continue
		}
		p.platformHosts[name] = true
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", name)
		cancel()
		for _, a := range addrs {
			p.platformIPs[a.Unmap()] = true
		}
		_ = err // unresolvable now: the name still matches
	}
	return p, nil
}

// Mode is the policy's mode.
func (p *Policy) Mode() string { return p.mode }

// checkName is the decision before resolution: "" when t may be dialed
// (subject to the address check), else the refusal reason. exact reports
// an allowlist entry naming t's host:port exactly (internal addresses are
// then allowed).
func (p *Policy) checkName(t Target) (reason string, exact bool) {
	listed, exact := p.allow.match(t)
	switch {
	case p.mode == ModeNone:
		return ReasonDisabled, false
	case exact:
		return "", true
	case p.platformHosts[t.Host]:
		return ReasonPlatform, false
	case p.mode == ModeAllowlist && !listed:
		return ReasonNotAllowed, false
	}
	return "", false
}

// addrClass names why an address may not be dialed without an exact
// allowlist entry; "" when it is a public address.
func (p *Policy) addrClass(a netip.Addr) string {
	a = a.Unmap()
	if c := internalClass(a); c != "" {
		return c
	}
	if p.platformIPs[a] {
		return "platform address"
	}
	for _, own := range p.ownAddrs() {
		if own == a {
			return "this host's address"
		}
	}
	return ""
}

// nonPublic are ranges that are not the internet, beyond what netip's
// predicates cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT, cloud internals)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
}

// internalClass classifies addresses that are not on the internet. IPv6
// forms embedding an IPv4 address (NAT64, 6to4) are judged by it.
func internalClass(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "invalid address"
	case a.IsLoopback():
		return "loopback address"
	case a.IsPrivate():
		return "private address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local address"
	case a.IsUnspecified():
		return "unspecified address"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast address"
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return "reserved address"
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(a): // NAT64
			return internalClass(netip.AddrFrom4([4]byte(b[12:16])))
		case netip.MustParsePrefix("2002::/16").Contains(a): // 6to4
			return internalClass(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return ""
}

func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
