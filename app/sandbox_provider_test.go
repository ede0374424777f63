package app

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/e2b/e2bfake"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

func loadWith(t *testing.T, vars map[string]string) (*config.Config, error) {
	t.Helper()
	return config.LoadFrom(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
}

// TestSandboxProviderSetting: SANDBOX_PROVIDER=e2b needs E2B_API_KEY and
// builds the E2B provider on E2B_API_URL (its requests reach the fake with
// the key); local stays the default and builds the local provider.
func TestSandboxProviderSetting(t *testing.T) {
	if _, err := loadWith(t, map[string]string{"SANDBOX_PROVIDER": "e2b"}); err == nil || !strings.Contains(err.Error(), "E2B_API_KEY") {
		t.Fatalf("e2b without a key: %v", err)
	}
	if _, err := loadWith(t, map[string]string{"SANDBOX_PROVIDER": "modal"}); err == nil {
		t.Fatal("unknown provider accepted")
	}
	fake := e2bfake.StartForTest(t, nil, nil)
	cfg, err := loadWith(t, map[string]string{"SANDBOX_PROVIDER": "e2b", "E2B_API_KEY": e2bfake.TestAPIKey, "E2B_API_URL": fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	a := &App{Cfg: cfg, Log: slog.New(slog.DiscardHandler)}
	p, err := a.newSandboxProvider(func() (*local.Provider, error) { t.Fatal("local provider built"); return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Name() != e2b.ProviderName {
		t.Fatalf("provider %q", p.Name())
	}
	if alive, err := p.Alive(t.Context(), "inosuch_boot"); err != nil || alive {
		t.Fatalf("alive of an unknown sandbox: %v %v", alive, err)
	}
	if n := fake.Calls("GET", "/sandboxes/inosuch"); n != 1 {
		t.Fatalf("%d calls to the fake, want 1", n)
	}
	// A refused key is a configuration error, not "not found".
	cfg.E2BAPIKey = "e2b_wrong"
	p2, err := a.newSandboxProvider(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Alive(t.Context(), "inosuch_boot"); !errors.Is(err, e2b.ErrAuth) {
		t.Fatalf("alive with a refused key: %v, want ErrAuth", err)
	}
	var _ sandbox.Provider = p2
}
