package app

import (
	"slices"
	"testing"

	"github.com/proliferate/proliferate/internal/config"
)

func TestEgressPlatformHosts(t *testing.T) {
	cfg := &config.Config{PublicURL: "https://app.example.com", GatewayPublicURL: "https://gw.example.com:8443/base",
		IngestPublicURL: "https://app.example.com/hooks", LLMProxyURL: "http://10.0.0.7:8060"}
	if got, want := egressPlatformHosts(cfg), []string{"app.example.com", "gw.example.com", "10.0.0.7"}; !slices.Equal(got, want) {
		t.Fatalf("platform hosts %q, want %q", got, want)
	}
}
