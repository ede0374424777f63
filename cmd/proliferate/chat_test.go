package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// syncBuffer is stdout shared by chat's printing goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// devStack runs `proliferate dev` in process with the real gateway, the
// local sandbox provider and the real OpenCode agent against the scripted
// LLM, every listener on a free port.
func devStack(t *testing.T) (*app.App, *config.Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	env := map[string]string{
		"DATABASE_URL": testenv.DatabaseURL(t), "REDIS_URL": testenv.RedisURL(t),
		"BROKER_ADDR": "127.0.0.1:0", "BROKER_DATA_DIR": filepath.Join(dir, "kafka"),
		"OPS_ADDR": "127.0.0.1:0", "API_ADDR": "127.0.0.1:0", "INGEST_ADDR": "127.0.0.1:0", "LLM_PROXY_ADDR": "127.0.0.1:0",
		"GATEWAY_ADDR": gw, "GATEWAY_PUBLIC_URL": "http://" + gw,
		"SANDBOX_DATA_DIR": filepath.Join(dir, "sandboxes"), "BLOB_DIR": filepath.Join(dir, "blobs"),
		"OUTBOX_POLL_INTERVAL": "50ms", "BILLING_ENABLED": "false",
	}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	a := app.New(cfg, obs.NewLogger(io.Discard, "error", "text"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Dev(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev stopped with %v", err)
		}
	})
	testenv.Eventually(t, 60*time.Second, "dev to serve the API and the gateway", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev exited early: %v", err)
		default:
		}
		return a.OpsAddr() != "" && a.APIAddr() != "" && a.GatewayAddr() != ""
	})
	return a, cfg
}

func callAPI(t *testing.T, a *app.App, method, path, token string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+a.APIAddr()+api.Prefix+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && json.Unmarshal(raw, out) != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// A paused session closes its streams (4000); `proliferate chat` used to
// stay disconnected, every later line an error, although a new chat
// resumed the session. Now the next line reconnects, which resumes the
// session from its snapshot, and the real agent answers it.
func TestChatResumesAPausedSessionOnTheNextLine(t *testing.T) {
	a, cfg := devStack(t)
	var signup struct {
		AccessToken string `json:"access_token"`
	}
	if code := callAPI(t, a, "POST", "/auth/signup", "", map[string]any{"email": "chat-" + time.Now().Format("150405.000000") + "@example.com",
		"password": "correct horse battery", "name": "C"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	tok := signup.AccessToken
	var sess struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if code := callAPI(t, a, "POST", "/sessions", tok, map[string]any{"title": "Chat"}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	status := func() string {
		var s struct {
			Status string `json:"status"`
		}
		callAPI(t, a, "GET", "/sessions/"+sess.ID, tok, nil, &s)
		return s.Status
	}

	stdin, lines := io.Pipe()
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- chat(ctx, cfg, []string{"--gateway", "http://" + a.GatewayAddr(), "--token", tok, sess.ID}, stdin, &out, io.Discard)
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(lines, line+"\n"); err != nil {
			t.Fatalf("chat stopped reading: %v (output:\n%s)", err, out.String())
		}
	}
	completes := func() int { return strings.Count(out.String(), "[message_complete]") }

	testenv.Eventually(t, 60*time.Second, "init", func() bool { return strings.Contains(out.String(), `"type":"init"`) })
	send("Say hello. [[script:hello]]")
	testenv.Eventually(t, 120*time.Second, "the first answer", func() bool { return completes() == 1 })

	if code := callAPI(t, a, "POST", "/sessions/"+sess.ID+"/pause", tok, nil, nil); code != 200 {
		t.Fatalf("pause %d", code)
	}
	testenv.Eventually(t, 60*time.Second, "chat to say the session is paused", func() bool {
		return strings.Contains(out.String(), "[session paused; the next line resumes it]")
	})
	if s := status(); s != "paused" {
		t.Fatalf("session %s after pause", s)
	}

	send("Say hello again. [[script:hello]]")
	testenv.Eventually(t, 120*time.Second, "the answer after resuming", func() bool { return completes() == 2 })
	if s := status(); s != "running" {
		t.Fatalf("session %s after the prompt that resumed it", s)
	}
	if strings.Contains(out.String(), "[error:") {
		t.Fatalf("chat printed an error:\n%s", out.String())
	}

	lines.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("chat did not end with its input")
	}
}
