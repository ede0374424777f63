package opencode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
)

func readAll(t *testing.T, r *opencode.SSEReader) []opencode.Frame {
	t.Helper()
	var out []opencode.Frame
	for {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		out = append(out, f)
	}
}

func TestSSEReaderSpecCases(t *testing.T) {
	stream := ": comment\n" +
		"data: {\"a\":1}\n\n" +
		"event: custom\r\nid: 7\r\nretry: 1500\r\ndata: line1\r\ndata:line2\r\n\r\n" +
		"data: cr only\r\r" +
		"id: 8\n\n" + // no data: not dispatched
		"data\n\n" + // field without colon: empty data
		"data: unterminated" // dropped at EOF
	// One byte per read, to prove partial reads do not matter.
	frames := readAll(t, opencode.NewSSEReader(iotest.OneByteReader(strings.NewReader(stream)), 0))
	want := []opencode.Frame{
		{Data: `{"a":1}`},
		{ID: "7", Event: "custom", Data: "line1\nline2", Retry: 1500},
		{ID: "7", Data: "cr only"},
		{ID: "8", Data: ""},
	}
	if len(frames) != len(want) {
		t.Fatalf("frames %+v", frames)
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, frames[i], want[i])
		}
	}
}

func TestSSEReaderLongLinesAndLimit(t *testing.T) {
	big := strings.Repeat("x", 3<<20) // larger than any bufio buffer
	r := opencode.NewSSEReader(iotest.HalfReader(strings.NewReader("data: "+big+"\n\ndata: next\n\n")), 4<<20)
	frames := readAll(t, r)
	if len(frames) != 2 || frames[0].Data != big || frames[1].Data != "next" {
		t.Fatalf("got %d frames", len(frames))
	}
	_, err := opencode.NewSSEReader(strings.NewReader("data: "+big+"\n\n"), 1<<20).Next()
	if !errors.Is(err, opencode.ErrLineTooLong) {
		t.Fatalf("over-limit line: %v", err)
	}
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"type\":\"server.connected\"}\n\n"), 0)
	f.Add([]byte("event: x\r\ndata: a\r\ndata: b\r\n\r\n:c\n\n"), 3)
	f.Add([]byte("data: a\rdata: b\r\r"), 1)
	f.Fuzz(func(t *testing.T, stream []byte, split int) {
		// The parser never panics and never returns data over its limit.
		r := opencode.NewSSEReader(strings.NewReader(string(stream)), 64)
		for range len(stream) + 1 {
			fr, err := r.Next()
			if err != nil {
				break
			}
			if len(fr.Data) > 64 {
				t.Fatalf("data of %d bytes passed a 64-byte limit", len(fr.Data))
			}
		}
		// Round trip: any data lines written as events come back, whatever
		// the read sizes.
		lines := strings.FieldsFunc(string(stream), func(r rune) bool { return r == '\n' || r == '\r' })
		var enc strings.Builder
		for _, l := range lines {
			fmt.Fprintf(&enc, "data: %s\n\n", l)
		}
		var src io.Reader = strings.NewReader(enc.String())
		if split%2 == 1 {
			src = iotest.OneByteReader(src)
		}
		frames := readAll(t, opencode.NewSSEReader(src, 0))
		if len(frames) != len(lines) {
			t.Fatalf("%d frames for %d lines", len(frames), len(lines))
		}
		for i := range lines {
			if frames[i].Data != lines[i] {
				t.Fatalf("frame %d = %q, want %q", i, frames[i].Data, lines[i])
			}
		}
	})
}

func TestDecodeEvent(t *testing.T) {
	cases := map[string]func(opencode.Event) bool{
		`{"id":"e1","type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}`: func(e opencode.Event) bool {
			return e.SessionID == "ses_1" && e.Status.Type == "busy"
		},
		`{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"m","partID":"p","field":"text","delta":"Hel"}}`: func(e opencode.Event) bool {
			return e.Delta.Delta == "Hel" && e.Delta.PartID == "p" && e.SessionID == "ses_1"
		},
		`{"type":"message.part.updated","properties":{"part":{"id":"p","sessionID":"ses_2","messageID":"m","type":"tool","tool":"bash","callID":"toolu_1","state":{"status":"completed","input":{"command":"ls"},"output":"a\n","title":"ls","time":{"start":1,"end":2}}},"time":3}}`: func(e opencode.Event) bool {
			return e.SessionID == "ses_2" && e.Part.CallID == "toolu_1" && e.Part.State.Status == opencode.ToolCompleted && e.Part.State.Output == "a\n"
		},
		`{"type":"message.part.updated","properties":{"sessionID":"s","part":{"type":"step-finish","reason":"stop","tokens":{"total":9,"input":1,"output":5,"reasoning":0,"cache":{"read":3,"write":0}},"cost":0.5}}}`: func(e opencode.Event) bool {
			return e.Part.Tokens.Output == 5 && e.Part.Tokens.Cache.Read == 3 && e.Part.Cost == 0.5
		},
		`{"type":"session.error","properties":{"sessionID":"s","error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}}`: func(e opencode.Event) bool {
			return e.Error.Name == "MessageAbortedError" && e.Error.Message() == "Aborted"
		},
		`{"type":"message.updated","properties":{"sessionID":"s","info":{"id":"m","role":"assistant","modelID":"x","time":{"created":1},"future":"ignored"}}}`: func(e opencode.Event) bool {
			return e.Message.Role == "assistant" && e.Message.ModelID == "x"
		},
		`{"type":"brand.new","properties":{"whatever":[1,2]}}`: func(e opencode.Event) bool {
			return e.Type == "brand.new" && string(e.Properties) == `{"whatever":[1,2]}`
		},
	}
	for in, check := range cases {
		ev, err := opencode.DecodeEvent([]byte(in))
		if err != nil || !check(ev) {
			t.Errorf("DecodeEvent(%s) = %+v, %v", in, ev, err)
		}
	}
	for _, bad := range []string{`nope`, `{"properties":{}}`, `{"type":"session.status","properties":{"status":"x"}}`} {
		if _, err := opencode.DecodeEvent([]byte(bad)); err == nil {
			t.Errorf("DecodeEvent(%s) succeeded", bad)
		}
	}
}

func TestEventStreamHeartbeatTimeoutAndAuth(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "opencode" || pass != "pw" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/event" || r.URL.Query().Get("directory") != "/ws" {
			http.Error(w, "bad request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n")
		fmt.Fprint(w, "data: {\"type\":\"session.idle\",\"properties\":{\"sessionID\":\"ses_x\"}}\n\n")
		fmt.Fprint(w, "data: not json\n\n")
		w.(http.Flusher).Flush()
		select { // then go silent
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	bad, _ := opencode.NewClient(srv.URL, opencode.ClientOptions{Password: "wrong", Directory: "/ws"})
	var apiErr *opencode.APIError
	if _, err := bad.Events(t.Context(), opencode.EventsOptions{}); !errors.As(err, &apiErr) || apiErr.Status != 401 {
		t.Fatalf("wrong password: %v", err)
	}

	c, _ := opencode.NewClient(srv.URL, opencode.ClientOptions{Password: "pw", Directory: "/ws"})
	s, err := c.Events(t.Context(), opencode.EventsOptions{HeartbeatTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	start := time.Now()
	for {
		ev, err := s.Next(t.Context())
		if err != nil {
			if !errors.Is(err, opencode.ErrHeartbeatTimeout) {
				t.Fatalf("stream ended with %v, want a heartbeat timeout", err)
			}
			break
		}
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "server.connected,session.idle,invalid" {
		t.Fatalf("events %v", types)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Fatalf("timeout after %s", d)
	}
	if _, err := s.Next(t.Context()); !errors.Is(err, opencode.ErrHeartbeatTimeout) {
		t.Fatalf("after failure Next = %v", err)
	}

	// Cancelling the context ends a blocked Next.
	ctx, cancel := context.WithCancel(t.Context())
	s2, err := c.Events(ctx, opencode.EventsOptions{HeartbeatTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s2.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	go cancel()
	if _, err := s2.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel Next = %v", err)
	}
}

func TestClientErrorsAndTimeouts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/session":
			http.Error(w, `{"name":"BadRequest"}`, http.StatusBadRequest)
		case "/global/health":
			<-r.Context().Done() // hangs, like an early request to a starting server
		}
	}))
	defer srv.Close()
	c, err := opencode.NewClient(srv.URL, opencode.ClientOptions{RequestTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSession(t.Context(), "x")
	var apiErr *opencode.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Body, "BadRequest") {
		t.Fatalf("create session: %v", err)
	}
	start := time.Now()
	if _, err := c.Health(t.Context()); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("hanging health: %v after %s", err, time.Since(start))
	}
	if err := c.PromptAsync(t.Context(), "ses", nil, opencode.PromptOptions{}); err == nil {
		t.Fatal("empty prompt accepted")
	}
	if _, err := opencode.NewClient("not a url", opencode.ClientOptions{}); err == nil {
		t.Fatal("bad base URL accepted")
	}
}

func TestBuildConfig(t *testing.T) {
	cfg, err := opencode.BuildConfig(opencode.LaunchOptions{
		Provider:    opencode.Provider{ID: "anthropic", BaseURL: "http://proxy/v1", APIKey: "k"},
		Model:       "claude-sonnet-4-5",
		SmallModel:  "claude-haiku-4-5",
		ExtraConfig: map[string]any{"instructions": []string{"AGENTS.md"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Model            string   `json:"model"`
		SmallModel       string   `json:"small_model"`
		EnabledProviders []string `json:"enabled_providers"`
		Provider         map[string]struct {
			NPM     string                     `json:"npm"`
			Options map[string]string          `json:"options"`
			Models  map[string]json.RawMessage `json:"models"`
		} `json:"provider"`
		Permission   map[string]string `json:"permission"`
		Instructions []string          `json:"instructions"`
	}
	if err := json.Unmarshal([]byte(cfg), &got); err != nil {
		t.Fatal(err)
	}
	p := got.Provider["anthropic"]
	if got.Model != "anthropic/claude-sonnet-4-5" || got.SmallModel != "anthropic/claude-haiku-4-5" ||
		len(got.EnabledProviders) != 1 || p.NPM != "@ai-sdk/anthropic" || p.Options["baseURL"] != "http://proxy/v1" ||
		p.Options["apiKey"] != "k" || len(p.Models) != 2 || got.Permission["bash"] != "allow" ||
		got.Permission["question"] != "deny" || got.Instructions[0] != "AGENTS.md" {
		t.Fatalf("config %s", cfg)
	}
	if _, err := opencode.BuildConfig(opencode.LaunchOptions{Model: "m"}); err == nil {
		t.Fatal("config without provider accepted")
	}
}

func TestLaunchFailsCleanly(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "plugin")
	for _, f := range []string{"package.json", "package-lock.json"} {
		if err := os.MkdirAll(filepath.Join(plugin, "node_modules"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(plugin, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A "binary" that dies at once: Launch reports it with the log tail.
	fake := filepath.Join(dir, "opencode")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho boom: no config >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := opencode.Launch(t.Context(), opencode.LaunchOptions{
		Binary: fake, PluginDir: plugin, Workspace: filepath.Join(dir, "ws"), StateDir: filepath.Join(dir, "state"),
		Provider: opencode.Provider{ID: "sim", BaseURL: "http://127.0.0.1:1/v1"}, Model: "m",
	})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "boom: no config") {
		t.Fatalf("launch of a dying binary: %v", err)
	}
	// A binary that never listens hits the ready timeout.
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = opencode.Launch(t.Context(), opencode.LaunchOptions{
		Binary: fake, PluginDir: plugin, Workspace: filepath.Join(dir, "ws"), StateDir: filepath.Join(dir, "state"),
		Provider: opencode.Provider{ID: "sim", BaseURL: "http://127.0.0.1:1/v1"}, Model: "m", ReadyTimeout: 300 * time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "no listening address") || time.Since(start) > 10*time.Second {
		t.Fatalf("launch of a silent binary: %v after %s", err, time.Since(start))
	}
	// Seeded plugin deps are in place for OpenCode's install check.
	for _, p := range []string{"ws/.opencode/package.json", "ws/.opencode/package-lock.json", "ws/.opencode/node_modules",
		"state/home/.config/opencode/package.json", "state/home/.config/opencode/node_modules"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("seed: %v", err)
		}
	}
}
