package remote_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
	"github.com/proliferate/proliferate/internal/testenv"
)

const token = "tok_0123456789_secret"

func TestDoReturnsAnyStatusAndLogsNoToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token || r.Header.Get("Content-Type") != "application/json; charset=utf-8" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"echo":"` + r.Header.Get("Authorization") + `"}`))
	}))
	t.Cleanup(srv.Close)
	var logs testenv.LogBuffer
	c := remote.New(remote.Options{Provider: "x", Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	resp, err := c.Do(context.Background(), remote.Request{Action: "a", Method: "POST", URL: srv.URL, Body: map[string]any{"k": 1},
		Authorization: "Bearer " + token, Token: token})
	if err != nil || resp.Status != http.StatusTeapot {
		t.Fatalf("%v %+v", err, resp)
	}
	if got := remote.Scrub(string(resp.Body), token); strings.Contains(got, token) || !strings.Contains(got, "[REDACTED]") {
		t.Fatalf("scrub: %s", got)
	}
	if !strings.Contains(logs.String(), `"status":418`) || strings.Contains(logs.String(), token) {
		t.Fatalf("logs: %s", logs.String())
	}
	if c.Timeout() != remote.DefaultTimeout {
		t.Fatalf("default timeout %s", c.Timeout())
	}
}

func TestTransportFailuresAreStatusZero(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	url := srv.URL
	srv.Close()
	c := remote.New(remote.Options{Provider: "x", Timeout: time.Second})
	_, err := c.Do(context.Background(), remote.Request{Method: "GET", URL: url + "/p?token=" + token, Token: token})
	var ee *actions.ExecError
	if !errors.As(err, &ee) || ee.Status != 0 || ee.Message != "x: request failed" || strings.Contains(err.Error(), token) ||
		strings.Contains(ee.Err.Error(), token) {
		t.Fatalf("%v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Do(ctx, remote.Request{Method: "GET", URL: url})
	if !errors.As(err, &ee) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestDecodeParamsAndSegment(t *testing.T) {
	var p struct {
		N int      `json:"n"`
		L []string `json:"l"`
	}
	for in, pointer := range map[string]string{`{"n":"x"}`: "/n", `{"l":[1]}`: "/l", `{"z":1}`: "", `[1]`: "", `{"n":1} {}`: ""} {
		err := remote.DecodeParams([]byte(in), &p)
		var pe *actions.ParamsError
		if !errors.Is(err, remote.ErrInvalidParams) || !errors.As(err, &pe) || pe.Details[0].Pointer != pointer {
			t.Errorf("%s: %v", in, err)
		}
	}
	if err := remote.DecodeParams(nil, &p); err != nil {
		t.Fatalf("empty params: %v", err)
	}
	for in, want := range map[string]string{"a/b": "a%2Fb", "1?x#y": "1%3Fx%23y", "..x": "..x", "a b": "a%20b"} {
		if got, err := remote.Segment("id", in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", ".", ".."} {
		if _, err := remote.Segment("id", bad); !errors.Is(err, remote.ErrInvalidParams) {
			t.Errorf("%q accepted", bad)
		}
	}
	if got := remote.Truncate("héllo", 2); got != "h…" {
		t.Fatalf("truncate %q", got)
	}
}
