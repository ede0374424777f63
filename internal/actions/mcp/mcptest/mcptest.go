// Package mcptest runs a real MCP server (the official SDK's, streamable
// HTTP) behind the middleware of a hosted connector, for tests: an API-key
// header that can be rotated, counters per method, every key presented,
// and a switch that makes the server forget every session (a restart).
// Tools are added to MCP before or after start.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// KeyHeader is the header the server demands the key in.
const KeyHeader = "X-Api-Key"

// Server is a running MCP server.
type Server struct {
	*httptest.Server
	// MCP is the SDK server: add tools to it.
	MCP *sdk.Server
	// Counters of JSON-RPC methods received with a valid key, and of
	// session deletions (DELETE).
	Inits, Lists, Calls, Deletes atomic.Int32

	key       atomic.Value // string
	mu        sync.Mutex
	seen      []string
	sessions  map[string]bool
	forgotten map[string]bool
}

// New starts a server that demands key in KeyHeader; opts may be nil.
func New(t fakekit.TB, key string, opts *sdk.ServerOptions) *Server {
	t.Helper()
	s := &Server{MCP: sdk.NewServer(&sdk.Implementation{Name: "docs", Version: "1"}, opts),
		sessions: map[string]bool{}, forgotten: map[string]bool{}}
	s.key.Store(key)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.MCP }, nil)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get(KeyHeader)
		s.mu.Lock()
		s.seen = append(s.seen, got)
		dead := s.forgotten[r.Header.Get("Mcp-Session-Id")]
		s.mu.Unlock()
		if got != s.Key() {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		if dead {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if r.Method == http.MethodDelete {
			s.Deletes.Add(1)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct{ Method string }
		_ = json.Unmarshal(body, &msg)
		switch msg.Method {
		case "initialize":
			s.Inits.Add(1)
		case "tools/list":
			s.Lists.Add(1)
		case "tools/call":
			s.Calls.Add(1)
		}
		h.ServeHTTP(w, r)
		if sid := w.Header().Get("Mcp-Session-Id"); sid != "" {
			s.mu.Lock()
			s.sessions[sid] = true
			s.mu.Unlock()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// Key is the key the server accepts now; SetKey rotates it.
func (s *Server) Key() string     { return s.key.Load().(string) }
func (s *Server) SetKey(k string) { s.key.Store(k) }

// KeysSeen returns every key presented, in order.
func (s *Server) KeysSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// Forget makes the server lose every session it handed out, as a restart
// does: their requests get 404 "session not found".
func (s *Server) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.sessions {
		s.forgotten[id] = true
	}
}

// Schema parses a JSON Schema literal.
func Schema(t fakekit.TB, js string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Text is a tool handler answering text.
func Text(text string) sdk.ToolHandler {
	return func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil
	}
}
