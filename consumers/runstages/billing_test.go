package runstages_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/client/runsessions"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
)

// gateway402 answers session creation like a gateway whose billing gate
// refuses (the API's error shape), counting requests.
func gateway402(t *testing.T, code, action string, n *atomic.Int32) *runsessions.Sessions {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"refused by billing","details":{"action":"` + action +
			`"},"request_id":"req-1"}}`))
	}))
	t.Cleanup(hs.Close)
	return runsessions.New(client.New(hs.URL, "svc"))
}

// A session the billing gate refuses fails the run once, with a clear
// reason, instead of retrying forever.
func TestBillingDenialFailsTheRun(t *testing.T) {
	h := newHarness(t)
	var calls atomic.Int32
	h.deps.Sessions = gateway402(t, "credits_exhausted", "buy_credits", &calls)
	h.stages()
	id := h.enqueue(h.automation(""), "Bug")
	run := h.waitStatus(id, runs.StatusFailed)
	if *run.StatusReason != runstages.BillingDeniedCode || *run.FailureStage != runs.StageExecution {
		t.Fatalf("reason %v stage %v", *run.StatusReason, *run.FailureStage)
	}
	var code, msg string
	if err := h.pool.QueryRow(context.Background(), `SELECT error_code, error_message FROM automation_runs WHERE id = $1`, id).
		Scan(&code, &msg); err != nil {
		t.Fatal(err)
	}
	if code != runstages.BillingDeniedCode || !strings.HasPrefix(msg, "credits_exhausted:") || !strings.Contains(msg, "buy_credits") {
		t.Fatalf("error %q %q", code, msg)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d session requests, want 1 (no retries of a denial)", n)
	}
}

// billing_unavailable (the gate failed closed) is transient: retried, the
// run is not failed.
func TestBillingUnavailableIsRetried(t *testing.T) {
	h := newHarness(t)
	var calls atomic.Int32
	h.deps.Sessions = gateway402(t, "billing_unavailable", "retry", &calls)
	h.stages()
	id := h.enqueue(h.automation(""), "Bug")
	testenv.Eventually(t, 30*time.Second, "retries", func() bool { return calls.Load() >= 2 })
	if st := h.run1(id).Status; st != runs.StatusReady {
		t.Fatalf("status %s, want ready (retrying)", st)
	}
}
