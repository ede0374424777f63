package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The pending cap (10 per session) and the rate limit (60 per minute per
// session) hold across two gateway processes: this test's in-process
// gateway and a second `proliferate gateway` OS process sharing Postgres
// and Redis. Invocations alternate between them.
func TestActionLimitsAcrossGatewayProcesses(t *testing.T) {
	binDir, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	lin := linearfake.New(t)
	lin.AddToken("lin_tok_limits", "user-ada")
	lin.AddUser(linearfake.User{ID: "user-ada", Name: "Ada", Email: "ada@example.com"})
	lin.AddTeam(linearfake.Team{ID: "team-eng", Key: "ENG", Name: "Engineering"})
	nango := fakes.NewNango(t, "nango-secret", map[string]string{"linear": "linear"}, nil)

	dir := t.TempDir()
	cfg := devConfig(t, filepath.Join(dir, "kafka"), "RUN_SESSIONS", "gateway",
		"LINEAR_API_URL", lin.URL(), "NANGO_URL", nango.URL, "NANGO_SECRET_KEY", "nango-secret")
	dev := startDev(t, cfg)
	testenv.Eventually(t, 30*time.Second, "gateway 1 to listen", func() bool { return dev.app.GatewayAddr() != "" })
	base := "http://" + dev.app.APIAddr()
	gw1 := "http://" + dev.app.GatewayAddr()

	// Gateway 2: another OS process, same database, Redis and secrets.
	gw2Addr := freeAddr(t)
	gw2 := "http://" + gw2Addr
	child := exec.Command(filepath.Join(binDir, "proliferate"), "gateway")
	child.Env = append(os.Environ(),
		"DATABASE_URL="+testenv.DatabaseURL(t), "REDIS_URL="+testenv.RedisURL(t),
		"KAFKA_BROKERS="+strings.Join(dev.app.Seeds(), ","),
		"GATEWAY_ADDR="+gw2Addr, "GATEWAY_PUBLIC_URL="+gw2, "OPS_ADDR=127.0.0.1:0",
		"SANDBOX_DATA_DIR="+filepath.Join(dir, "gw2"), "LINEAR_API_URL="+lin.URL(),
		"NANGO_URL="+nango.URL, "NANGO_SECRET_KEY=nango-secret", "LOG_LEVEL=warn")
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Signal(os.Interrupt); _ = child.Wait() })
	testenv.Eventually(t, 60*time.Second, "gateway 2 to listen", func() bool {
		resp, err := http.Get(gw2 + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	var signup struct {
		AccessToken string `json:"access_token"`
		User        struct {
			ID          string `json:"id"`
			ActiveOrgID string `json:"active_org_id"`
		} `json:"user"`
	}
	if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": fmt.Sprintf("limits-%d@example.com", time.Now().UnixNano()),
		"password": "correct horse battery", "name": "Ada"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	orgID, userID := signup.User.ActiveOrgID, signup.User.ID
	nango.AddConnection(fakes.NangoConnection{ConnectionID: "linear-limits-" + orgID, ConfigKey: "linear", Provider: "linear",
		AccessToken: "lin_tok_limits", EndUserID: userID, EndUserOrgID: orgID})
	if _, err := dev.app.Pool.Exec(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		provider_config_key, created_by) VALUES ($1, 'nango', 'linear', $2, 'linear', $3)`, orgID, "linear-limits-"+orgID, userID); err != nil {
		t.Fatal(err)
	}
	var sess struct {
		ID string `json:"id"`
	}
	if code := apiCall(t, base, "POST", "/sessions", signup.AccessToken, map[string]any{"title": "limits"}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	sbx := sessionstest.SandboxToken(t, dev.app.Pool, sess.ID)
	invoke := func(gw, integration string) (int, string) {
		return gatewayCall(t, gw, "POST", "/proliferate/"+sess.ID+"/actions/invoke", sbx, map[string]any{
			"integration": integration, "action": "create_issue", "params": map[string]any{"teamId": "team-eng", "title": "t"}})
	}
	gateways := []string{gw1, gw2}

	// Pending cap: create_issue is a write (require_approval).
	counted := 0
	for i := range 10 {
		code, body := invoke(gateways[i%2], "linear")
		counted++
		if code != http.StatusAccepted {
			t.Fatalf("pending invocation %d on gateway %d: %d %s", i+1, i%2+1, code, body)
		}
	}
	for i, gw := range gateways {
		code, body := invoke(gw, "linear")
		counted++
		if code != http.StatusTooManyRequests || !strings.Contains(body, "pending_limit") {
			t.Fatalf("11th pending on gateway %d: %d %s", i+1, code, body)
		}
	}
	if n := lin.MutationCount(); n != 0 {
		t.Fatalf("pending invocations reached Linear: %d mutations", n)
	}

	// Rate limit: fill the minute up to 60 with calls that fail after the
	// limiter (an unknown integration), alternating gateways; the next call
	// on either gateway is refused. The limiter counts per wall-clock
	// minute, so a burst that a minute boundary splits is run again at the
	// start of the next minute (60 calls take about a second) — the
	// outcome is asserted only for a burst inside one minute.
	for attempt := 1; ; attempt++ {
		minute := time.Now().Unix() / 60
		var codes []int
		for ; counted < 60; counted++ {
			code, _ := invoke(gateways[counted%2], "nosuch")
			codes = append(codes, code)
		}
		var over []string
		for _, gw := range gateways {
			code, body := invoke(gw, "nosuch")
			codes = append(codes, code)
			over = append(over, body)
		}
		if time.Now().Unix()/60 == minute {
			for i, code := range codes[:len(codes)-2] {
				if code != http.StatusNotFound {
					t.Fatalf("call %d within the limit: %d", i+1, code)
				}
			}
			for i, body := range over {
				if codes[len(codes)-2+i] != http.StatusTooManyRequests || !strings.Contains(body, "rate_limited") {
					t.Fatalf("call 61+ on gateway %d: %d %s", i+1, codes[len(codes)-2+i], body)
				}
			}
			return
		}
		if attempt == 3 {
			t.Fatal("three bursts were split by minute boundaries")
		}
		// Start again at the beginning of a minute nothing counted in.
		next := time.Now().Unix() / 60
		testenv.Eventually(t, 70*time.Second, "a fresh minute", func() bool { return time.Now().Unix()/60 > next })
		counted = 0
	}
}
