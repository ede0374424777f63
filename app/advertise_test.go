package app

import (
	"os"
	"testing"
)

// Without GATEWAY_ADVERTISE_URL a gateway advertises its listen address;
// a wildcard host, which other replicas cannot dial, becomes the hostname.
func TestAdvertiseURL(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "127.0.0.1"
	}
	for addr, want := range map[string]string{
		"127.0.0.1:8070":     "http://127.0.0.1:8070",
		"10.0.0.7:8070":      "http://10.0.0.7:8070",
		"[::1]:8070":         "http://[::1]:8070",
		"0.0.0.0:8070":       "http://" + host + ":8070",
		"[::]:8070":          "http://" + host + ":8070",
		"gateway-3.svc:8070": "http://gateway-3.svc:8070",
	} {
		if got := advertiseURL(addr); got != want {
			t.Errorf("advertiseURL(%q) = %q, want %q", addr, got, want)
		}
	}
}
