package litellm_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmproxy/litellm"
	"github.com/proliferate/proliferate/internal/llmproxy/litellm/litellmfake"
)

func TestNormalizeAdminURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://litellm:4000":      "http://litellm:4000",
		"http://litellm:4000/":     "http://litellm:4000",
		"http://litellm:4000/v1":   "http://litellm:4000",
		"http://litellm:4000/v1/":  "http://litellm:4000",
		"https://x.example/llm/v1": "https://x.example/llm",
	} {
		if got := litellm.NormalizeAdminURL(in); got != want {
			t.Errorf("NormalizeAdminURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{24 * time.Hour: "24h", 15 * time.Minute: "15m", 90 * time.Second: "90s", 48 * time.Hour: "48h"} {
		if got := litellm.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestClientRetriesTransientFailuresOnly(t *testing.T) {
	fake := litellmfake.New(t, masterKey)
	c := newClient(t, fake)
	ctx := context.Background()

	fake.FailNext("/team/new", http.StatusServiceUnavailable)
	fake.FailNext("/team/new", http.StatusTooManyRequests)
	created, err := c.EnsureTeam(ctx, "team-retry", "team-retry")
	if err != nil || !created {
		t.Fatalf("ensure team after 503 and 429: created=%v err=%v", created, err)
	}
	if n := len(fake.Calls("/team/new")); n != 3 {
		t.Fatalf("/team/new called %d times, want 3 (two retries)", n)
	}

	// A concurrent creator won: "already exists" is success.
	fake.FailNext("/team/info", http.StatusNotFound)
	if created, err := c.EnsureTeam(ctx, "team-retry", "team-retry"); err != nil || created {
		t.Fatalf("ensure existing team: created=%v err=%v", created, err)
	}

	// A 400 is not retried and names the endpoint and status.
	before := len(fake.Calls("/key/generate"))
	_, err = c.GenerateKey(ctx, litellm.KeyRequest{TeamID: "no-such-team", UserID: "u", KeyAlias: "u"})
	var ae *litellm.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "/key/generate") {
		t.Fatalf("generate for an unknown team: %v", err)
	}
	if n := len(fake.Calls("/key/generate")) - before; n != 1 {
		t.Fatalf("a 400 was tried %d times", n)
	}
}

func TestClientWrongMasterKeyIsRefusedWithoutLeakingIt(t *testing.T) {
	fake := litellmfake.New(t, masterKey)
	c, err := litellm.NewClient(litellm.ClientConfig{AdminURL: fake.URL, MasterKey: "sk-wrong-secret", Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TeamInfo(context.Background(), "t")
	if !litellm.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("team info with a wrong key: %v", err)
	}
	if strings.Contains(err.Error(), "sk-wrong-secret") {
		t.Fatalf("error leaks the master key: %v", err)
	}
	if _, err := litellm.NewClient(litellm.ClientConfig{AdminURL: fake.URL}); err == nil {
		t.Fatal("client without a master key accepted")
	}
}

func TestSpendLogsPaginates(t *testing.T) {
	fake := litellmfake.New(t, masterKey)
	c := newClient(t, fake)
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	for i := range 130 {
		fake.AddSpendLog(litellmfake.SpendLog{RequestID: "r" + string(rune('a'+i%26)) + time.Duration(i).String(), TeamID: "team-p", Spend: 0.01, Model: "m", StartTime: base.Add(time.Duration(i) * time.Second)})
	}
	fake.AddSpendLog(litellmfake.SpendLog{RequestID: "other", TeamID: "team-q", Spend: 0.01, StartTime: base})
	p1, err := c.SpendLogs(context.Background(), litellm.SpendLogsQuery{TeamID: "team-p", Start: base, End: base.Add(time.Hour), PageSize: 100})
	if err != nil {
		t.Fatalf("spend logs: %v", err)
	}
	if p1.Total != 130 || p1.TotalPages != 2 || len(p1.Data) != 100 {
		t.Fatalf("page 1: total=%d pages=%d len=%d", p1.Total, p1.TotalPages, len(p1.Data))
	}
	q := fake.Calls("/spend/logs/v2")[0].Query
	if q.Get("start_date") != base.Format("2006-01-02 15:04:05") || q.Get("team_id") != "team-p" {
		t.Fatalf("query %v", q)
	}
}
