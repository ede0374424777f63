package providers_test

import (
	"testing"

	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// Polling triggers choose their poll interval; the poll groups read it.
func TestLinearAcceptsPollInterval(t *testing.T) {
	if p := providers.ValidateConfig("linear", map[string]any{"poll_interval_seconds": 30}); len(p) != 0 {
		t.Fatalf("valid interval refused: %v", p)
	}
	p := providers.ValidateConfig("linear", map[string]any{"poll_interval_seconds": 5})
	if len(p) != 1 || p[0].Path != "poll_interval_seconds" {
		t.Fatalf("too-short interval: %v", p)
	}
}
