package local

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/proliferate/proliferate/internal/sandbox/egress"
)

// Internet egress of an isolated sandbox (Options.Egress): its fourth
// channel, egress.sock in the runtime dir, is an HTTP(S) forward proxy
// (package egress) that applies the provider's policy and logs every
// refusal with the session id. Inside, socat listens on 127.0.0.1:4102 and
// forwards to it, and the agent, every terminal and every Exec command get
// HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (and their lower-case forms) set
// to it, with NO_PROXY for the sandbox's own loopback (its gateway and LLM
// channels). Terminals use the agent's forwarder (they share its network
// namespace, terminal.go). Exec commands run in network namespaces of
// their own: each gets the socket bound in and a forwarder of its own,
// listening before the command starts. Nothing else leaves a sandbox: its
// network namespace holds only lo.

// jailEgressPort is the egress forwarder's port on a sandbox's loopback.
const jailEgressPort = 4102

// egressSockName is the egress channel's socket in the runtime dir.
const egressSockName = "egress.sock"

// egressConf is the provider's egress policy and what its sandboxes'
// proxies share.
type egressConf struct {
	policy  *egress.Policy
	metrics *egress.Metrics
	setsid  string       // setsid(1), "" when missing
	log     *slog.Logger // the proxies log refusals with the session id
}

// initEgress validates the egress options.
func (p *Provider) initEgress() error {
	mode := p.opts.Egress
	if mode == "" {
		mode = egress.ModeAllowlist
	}
	allow := p.opts.EgressAllow
	if allow == nil {
		allow = egress.DefaultAllow
	}
	policy, err := egress.NewPolicy(context.Background(), mode, allow, p.opts.EgressPlatformHosts)
	if err != nil {
		return fmt.Errorf("local sandbox: %w", err)
	}
	m, err := egress.NewMetrics(p.opts.Registerer)
	if err != nil {
		return fmt.Errorf("local sandbox: %w", err)
	}
	p.egress = &egressConf{policy: policy, metrics: m, log: p.log.With("channel", "egress")}
	p.egress.setsid, _ = exec.LookPath("setsid")
	p.opts.Egress = mode
	p.log.Info("sandbox egress policy", "mode", mode, "allow", strings.Join(allow, ","))
	return nil
}

// serveEgress starts the sandbox's egress proxy on egress.sock.
func (c *channels) serveEgress(conf *egressConf, sessionID string) error {
	ln, err := net.Listen("unix", filepath.Join(c.dir, egressSockName))
	if err != nil {
		return fmt.Errorf("local sandbox: listen on %s: %w", egressSockName, err)
	}
	srv, err := egress.Serve(ln, egress.Options{Policy: conf.policy, Metrics: conf.metrics, SessionID: sessionID,
		Log: conf.log})
	if err != nil {
		ln.Close()
		return fmt.Errorf("local sandbox: %w", err)
	}
	c.mu.Lock()
	c.egress = srv
	c.mu.Unlock()
	return nil
}

// egressSock is the host path of a running isolated sandbox's egress
// socket ("" without isolation).
func (in *instance) egressSock() string {
	if in.ch == nil || in.ch.egress == nil {
		return ""
	}
	return filepath.Join(in.ch.dir, egressSockName)
}

// egressURL is the proxy URL inside a sandbox.
var egressURL = "http://127.0.0.1:" + strconv.Itoa(jailEgressPort)

// egressEnv is the proxy environment of the sandbox's processes.
func egressEnv() []string {
	const noProxy = "localhost,127.0.0.1"
	return []string{
		"HTTP_PROXY=" + egressURL, "HTTPS_PROXY=" + egressURL, "ALL_PROXY=" + egressURL,
		"http_proxy=" + egressURL, "https_proxy=" + egressURL, "all_proxy=" + egressURL,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
}

// egressForwarder is the shell line starting the egress forwarder in the
// background, in a session of its own (with setsid: a signal to the
// command's process group must not end it).
func (j *jail) egressForwarder(setsid string) string {
	cmd := fmt.Sprintf("%s -lf /dev/null TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:%s/%s </dev/null >/dev/null 2>&1 &",
		j.socat, jailEgressPort, jailRun, egressSockName)
	if setsid != "" {
		cmd = setsid + " " + cmd
	}
	return cmd
}

// egressListening is a shell loop that returns once the forwarder listens
// (127.0.0.1:4102 in LISTEN state in /proc/net/tcp of the sandbox's own
// network namespace), or after many tries: then the command starts anyway
// and a connection may be refused.
var egressListening = fmt.Sprintf(`i=0; while [ $i -lt 5000 ] && ! grep -qs ' 0100007F:%04X 00000000:0000 0A ' /proc/net/tcp; do i=$((i+1)); done`, jailEgressPort)

// withEgress wraps the command line of an Exec command: the forwarder starts and listens, then argv replaces the shell.
func (j *jail) withEgress(setsid string, argv []string) []string {
	script := j.egressForwarder(setsid) + "\n" + egressListening + "\nexec \"$@\""
	return append([]string{"/bin/sh", "-c", script, "sandbox-egress"}, argv...)
}
