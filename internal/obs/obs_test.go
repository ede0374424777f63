package obs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/obs"
)

type readyBody struct {
	Status  string       `json:"status"`
	Checks  []obs.Result `json:"checks"`
	Failing []string     `json:"failing"`
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// /readyz names every check with its status and error, fails (503) when any
// check fails, bounds each check by its own timeout even when the check
// ignores its context, and never shows a password of a URL in an error;
// /healthz is 200 whatever the checks say.
func TestReadyzNamesEveryCheck(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	checks := &obs.Checks{Timeout: time.Minute}
	checks.Add("good", func(context.Context) error { return nil })
	checks.Add("broken", func(context.Context) error {
		return errors.New(`dial postgres://app:s3cret@db:5432/x failed; redis://:hunter2@cache:6379 too`)
	})
	// Ignores its context: only its own timeout ends it.
	checks.AddWithTimeout("stuck", 20*time.Millisecond, func(context.Context) error { <-block; return nil })
	srv := httptest.NewServer(obs.Handler(obs.NewRegistry(), checks))
	defer srv.Close()

	code, body := get(t, srv.URL+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	var r readyBody
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "not ready" || strings.Join(r.Failing, ",") != "broken,stuck" {
		t.Fatalf("status %q failing %v", r.Status, r.Failing)
	}
	byName := map[string]obs.Result{}
	for _, c := range r.Checks {
		byName[c.Name] = c
	}
	if c := byName["good"]; c.Status != obs.StatusOK || !c.OK || c.Error != "" || c.Timeout != "1m0s" {
		t.Fatalf("good: %+v", c)
	}
	if c := byName["broken"]; c.Status != obs.StatusFailing || c.OK || !strings.Contains(c.Error, "postgres://app:xxxxx@db:5432") ||
		!strings.Contains(c.Error, "redis://:xxxxx@cache") {
		t.Fatalf("broken: %+v", c)
	}
	if strings.Contains(body, "s3cret") || strings.Contains(body, "hunter2") {
		t.Fatalf("/readyz shows a password: %s", body)
	}
	if c := byName["stuck"]; c.Status != obs.StatusFailing || !strings.Contains(c.Error, "no answer within 20ms") || c.Timeout != "20ms" {
		t.Fatalf("stuck: %+v", c)
	}
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %s", code, body)
	}
}

// With every check passing, /readyz is 200 "ready"; a process with no
// checks is ready.
func TestReadyzReady(t *testing.T) {
	checks := &obs.Checks{}
	srv := httptest.NewServer(obs.Handler(obs.NewRegistry(), checks))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"ready"`) {
		t.Fatalf("no checks: %d %s", code, body)
	}
	checks.Add("a", func(context.Context) error { return nil })
	code, body := get(t, srv.URL+"/readyz")
	var r readyBody
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK || r.Status != "ready" || len(r.Checks) != 1 ||
		r.Checks[0].Timeout != obs.DefaultCheckTimeout.String() {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if got := checks.Names(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("names %v", got)
	}
}
