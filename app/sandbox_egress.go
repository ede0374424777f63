package app

import (
	"net/url"

	"github.com/proliferate/proliferate/internal/config"
)

// egressPlatformHosts are the hosts of the platform's own URLs: a
// sandbox's egress proxy refuses them (and their addresses) unless
// SANDBOX_EGRESS_ALLOW names the exact host:port. A sandbox reaches the
// platform only through its gateway and LLM channels.
func egressPlatformHosts(cfg *config.Config) []string {
	var hosts []string
	seen := map[string]bool{}
	for _, raw := range []string{cfg.PublicURL, cfg.GatewayPublicURL, cfg.IngestPublicURL, cfg.WebAppURL,
		cfg.LLMProxyURL, cfg.LLMProxyAdminURL, cfg.LLMProxyPublicURL} {
		u, err := url.Parse(raw)
		if raw == "" || err != nil || u.Hostname() == "" || seen[u.Hostname()] {
			continue
		}
		seen[u.Hostname()] = true
		hosts = append(hosts, u.Hostname())
	}
	return hosts
}
