package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/actions/mcp/mcptest"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/mcp"
	"github.com/proliferate/proliferate/internal/testenv"
)

// server is a real MCP server (mcptest: the official SDK's, behind an API
// key header and a restart switch) with the tools these tests use; release
// lets the "slow" tool finish.
type server struct {
	*mcptest.Server
	release chan struct{}
}

func boolPtr(b bool) *bool { return &b }

func newServer(t *testing.T, tools int) *server {
	t.Helper()
	s := &server{Server: mcptest.New(t, "key-1", &sdk.ServerOptions{PageSize: 2}), release: make(chan struct{})}
	obj := func(props string, req ...string) map[string]any {
		var m map[string]any
		r, _ := json.Marshal(req)
		if err := json.Unmarshal([]byte(`{"type":"object","properties":{`+props+`},"required":`+string(r)+`}`), &m); err != nil {
			t.Fatal(err)
		}
		if len(req) == 0 {
			delete(m, "required")
		}
		return m
	}
	s.MCP.AddTool(&sdk.Tool{Name: "search_docs", Description: "Search the docs.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: obj(`"query":{"type":"string","description":"words to find"},"limit":{"type":"integer"}`, "query")},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Query string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "results for " + args.Query}},
				StructuredContent: map[string]any{"hits": 2, "query": args.Query}}, nil
		})
	s.MCP.AddTool(&sdk.Tool{Name: "delete_page", Description: "Delete a page.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: boolPtr(true), ReadOnlyHint: true}, InputSchema: obj(`"id":{"type":"string"}`, "id")},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "deleted"}}}, nil
		})
	s.MCP.AddTool(&sdk.Tool{Name: "create_page", Annotations: &sdk.ToolAnnotations{DestructiveHint: boolPtr(false)}, InputSchema: obj(`"title":{"type":"string"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "created"}}}, nil
		})
	s.MCP.AddTool(&sdk.Tool{Name: "fail", Description: "Always fails.", InputSchema: obj(``)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "boom: page not found"}}}, nil
		})
	s.MCP.AddTool(&sdk.Tool{Name: "slow", Description: "Waits.", InputSchema: obj(``)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-s.release:
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "late"}}}, nil
			}
		})
	for i := range tools {
		s.MCP.AddTool(&sdk.Tool{Name: fmt.Sprintf("extra_%02d", i), Description: "x", InputSchema: obj(``)},
			func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{}, nil
			})
	}
	return s
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newSource(t *testing.T, s *server, mod func(*mcp.Config)) (*mcp.Source, *atomic.Int32) {
	t.Helper()
	var resolves atomic.Int32
	cfg := mcp.Config{ID: "7d3c2a4e-0000-4000-8000-000000000001", Name: "Docs", URL: s.URL + "/mcp", Transport: "streamable_http",
		Auth: mcp.Auth{Header: "X-Api-Key", Secret: func(ctx context.Context) (string, error) {
			resolves.Add(1)
			return s.Key(), nil
		}}}
	if mod != nil {
		mod(&cfg)
	}
	src, err := mcp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src, &resolves
}

var ec = actions.ExecContext{OrgID: "org_1", SessionID: "sess_1"}

func TestListAndRisk(t *testing.T) {
	s := newServer(t, 5) // 10 tools, pages of 2
	src, _ := newSource(t, s, func(c *mcp.Config) {
		c.DefaultRisk = actions.RiskRead
		c.ToolRisk = map[string]actions.RiskLevel{"extra_00": actions.RiskDanger}
	})
	if src.ID() != "connector:7d3c2a4e-0000-4000-8000-000000000001" || src.DisplayName() != "Docs" {
		t.Fatalf("%s %s", src.ID(), src.DisplayName())
	}
	defs, err := src.ListActions(context.Background(), ec)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 10 {
		t.Fatalf("%d tools over all pages, want 10", len(defs))
	}
	if s.Lists.Load() < 5 {
		t.Fatalf("%d tools/list requests: pages not followed", s.Lists.Load())
	}
	got := map[string]actions.Definition{}
	for _, d := range defs {
		got[d.ID] = d
	}
	wantRisk := map[string]actions.RiskLevel{
		"search_docs": actions.RiskRead,   // readOnlyHint
		"delete_page": actions.RiskDanger, // destructive wins over readOnly
		"create_page": actions.RiskRead,   // no decisive hint: connector default
		"fail":        actions.RiskRead,
		"extra_00":    actions.RiskDanger, // per-tool policy
		"extra_01":    actions.RiskRead,
	}
	for id, r := range wantRisk {
		if got[id].Risk != r {
			t.Errorf("%s: risk %s, want %s", id, got[id].Risk, r)
		}
	}
	// Params are the input schema, validated by the actions package.
	if err := actions.Validate(got["search_docs"], json.RawMessage(`{"limit":"x"}`)); err == nil {
		t.Fatal("params validated against the tool's input schema should fail")
	}
	if got["search_docs"].Description != "Search the docs." {
		t.Errorf("description %q", got["search_docs"].Description)
	}

	// Without a connector default, undecided tools are write.
	src2, _ := newSource(t, s, nil)
	defs, err = src2.ListActions(context.Background(), ec)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.ID == "create_page" && d.Risk != actions.RiskWrite {
			t.Errorf("create_page: %s, want write", d.Risk)
		}
	}

	guide, err := src.Guide(context.Background(), ec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Docs", "## search_docs", "Risk: `read`", "`query` (string, required): words to find", "## delete_page", "Risk: `danger`"} {
		if !strings.Contains(guide, want) {
			t.Errorf("guide lacks %q:\n%s", want, guide)
		}
	}
}

func TestRiskFromAnnotations(t *testing.T) {
	cases := []struct {
		a    *sdk.ToolAnnotations
		def  actions.RiskLevel
		want actions.RiskLevel
	}{
		{nil, "", actions.RiskWrite},
		{nil, actions.RiskRead, actions.RiskRead},
		{nil, "bogus", actions.RiskWrite},
		{&sdk.ToolAnnotations{ReadOnlyHint: true}, actions.RiskDanger, actions.RiskRead},
		{&sdk.ToolAnnotations{DestructiveHint: boolPtr(true)}, actions.RiskRead, actions.RiskDanger},
		{&sdk.ToolAnnotations{DestructiveHint: boolPtr(true), ReadOnlyHint: true}, "", actions.RiskDanger},
		{&sdk.ToolAnnotations{DestructiveHint: boolPtr(false)}, "", actions.RiskWrite},
	}
	for i, c := range cases {
		if got := mcp.RiskFromAnnotations(c.a, c.def); got != c.want {
			t.Errorf("case %d: %s, want %s", i, got, c.want)
		}
	}
}

func TestExecute(t *testing.T) {
	s := newServer(t, 0)
	src, _ := newSource(t, s, nil)
	ctx := context.Background()
	out, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"kafka"}`), ec)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Content []struct {
			Type, Text string
		}
		StructuredContent map[string]any
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != "results for kafka" || res.StructuredContent["query"] != "kafka" {
		t.Fatalf("result %s", out)
	}

	_, err = src.Execute(ctx, "fail", nil, ec)
	var ee *actions.ExecError
	if !errors.As(err, &ee) || ee.Message != "boom: page not found" {
		t.Fatalf("isError result: %v", err)
	}

	_, err = src.Execute(ctx, "no_such_tool", nil, ec)
	if !errors.Is(err, actions.ErrUnknownAction) {
		t.Fatalf("unknown tool: %v", err)
	}
	// One session served everything.
	if s.Inits.Load() != 1 {
		t.Fatalf("%d initializations for one source", s.Inits.Load())
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the session DELETE", func() bool { return s.Deletes.Load() == 1 })
	if _, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"x"}`), ec); err == nil {
		t.Fatal("a closed source executed")
	}
}

func TestAuthResolvedPerCall(t *testing.T) {
	s := newServer(t, 0)
	src, resolves := newSource(t, s, nil)
	ctx := context.Background()
	if _, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec); err != nil {
		t.Fatal(err)
	}
	before := resolves.Load()
	if _, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"b"}`), ec); err != nil {
		t.Fatal(err)
	}
	if resolves.Load() <= before {
		t.Fatal("the secret was not resolved for the second call")
	}

	// The server rotates its key; the org secret has not been updated yet.
	var stale atomic.Bool
	stale.Store(true)
	src2, _ := newSource(t, s, func(c *mcp.Config) {
		c.Auth.Secret = func(ctx context.Context) (string, error) {
			if stale.Load() {
				return "key-1", nil
			}
			return "key-2", nil
		}
	})
	if _, err := src2.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec); err != nil {
		t.Fatal(err)
	}
	s.SetKey("key-2")
	_, err := src2.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec)
	var ee *actions.ExecError
	if !errors.As(err, &ee) || ee.Status != http.StatusUnauthorized || strings.Contains(ee.Error(), "key-1") {
		t.Fatalf("stale secret: %v", err)
	}
	// The org secret is updated: the very next call uses it.
	stale.Store(false)
	if _, err := src2.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec); err != nil {
		t.Fatalf("after rotation: %v", err)
	}

	// No secret at all: refused by the server.
	s.SetKey("key-3")
	src3, _ := newSource(t, s, func(c *mcp.Config) { c.Auth = mcp.Auth{} })
	if _, err := src3.ListActions(ctx, ec); !errors.As(err, &ee) || ee.Status != http.StatusUnauthorized {
		t.Fatalf("no auth header: %v", err)
	}
	// Auth.Secret nil: the ExecContext's token is the secret, with a prefix.
	src4, _ := newSource(t, s, func(c *mcp.Config) { c.Auth = mcp.Auth{Header: "X-Api-Key"} })
	if _, err := src4.ListActions(ctx, actions.ExecContext{OrgID: "org_1", Token: "key-3"}); err != nil {
		t.Fatalf("token from ExecContext: %v", err)
	}
	// A resolver failure is reported without reaching the server.
	src5, _ := newSource(t, s, func(c *mcp.Config) {
		c.Auth.Secret = func(context.Context) (string, error) { return "", errors.New("secret DOCS_KEY not found") }
	})
	inits := s.Inits.Load()
	if _, err := src5.ListActions(ctx, ec); err == nil || !strings.Contains(err.Error(), "could not be resolved") {
		t.Fatalf("resolver failure: %v", err)
	}
	if s.Inits.Load() != inits {
		t.Fatal("a request reached the server without its secret")
	}
}

func TestCacheTTL(t *testing.T) {
	s := newServer(t, 0)
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	src, _ := newSource(t, s, func(c *mcp.Config) { c.Now = clk.Now })
	ctx := context.Background()
	list := func(org string) {
		t.Helper()
		if _, err := src.ListActions(ctx, actions.ExecContext{OrgID: org}); err != nil {
			t.Fatal(err)
		}
	}
	// Concurrent first listings share one fetch.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { list("org_1") })
	}
	wg.Wait()
	if n := s.Lists.Load(); n != 3 { // 5 tools in pages of 2
		t.Fatalf("%d tools/list requests for 8 concurrent listings, want one fetch of 3 pages", n)
	}
	clk.Add(4*time.Minute + 59*time.Second)
	list("org_1")
	// Execute uses the cache too.
	if _, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"q"}`), ec); err != nil {
		t.Fatal(err)
	}
	if n := s.Lists.Load(); n != 3 {
		t.Fatalf("cached listing refetched: %d", n)
	}
	clk.Add(time.Second)
	list("org_1")
	if n := s.Lists.Load(); n != 6 {
		t.Fatalf("after 5 minutes: %d requests, want a refetch", n)
	}
	list("org_2") // another org has its own entry
	if n := s.Lists.Load(); n != 9 {
		t.Fatalf("org_2 served from org_1's cache: %d", n)
	}
	src.Invalidate("org_2")
	list("org_2")
	if n := s.Lists.Load(); n != 12 {
		t.Fatalf("invalidate: %d", n)
	}
}

func TestSessionExpiredReinitialisesOnce(t *testing.T) {
	s := newServer(t, 0)
	src, _ := newSource(t, s, nil)
	ctx := context.Background()
	if _, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec); err != nil {
		t.Fatal(err)
	}
	if s.Inits.Load() != 1 {
		t.Fatalf("inits %d", s.Inits.Load())
	}
	calls := s.Calls.Load()
	s.Forget()
	out, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"again"}`), ec)
	if err != nil {
		t.Fatalf("after the server forgot the session: %v", err)
	}
	if !strings.Contains(string(out), "results for again") {
		t.Fatalf("%s", out)
	}
	if s.Inits.Load() != 2 {
		t.Fatalf("%d initializations, want exactly one more", s.Inits.Load())
	}
	if s.Calls.Load()-calls != 1 { // the 404 is refused before the MCP handler counts it
		t.Fatalf("tools/call reached the handler %d times", s.Calls.Load()-calls)
	}

	// A server that forgets every session at once: re-initialise once, then give up.
	flaky := newServer(t, 0)
	src2, _ := newSource(t, flaky, nil)
	if _, err := src2.ListActions(ctx, ec); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				flaky.Forget()
				runtime.Gosched()
			}
		}
	}()
	// The second attempt may or may not win the race with forget; what
	// matters is that no call initialises more than twice.
	before := flaky.Inits.Load()
	_, _ = src2.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec)
	if n := flaky.Inits.Load() - before; n > 1 {
		t.Fatalf("%d re-initialisations for one call, want at most 1", n)
	}
}

func TestTimeoutNoLeak(t *testing.T) {
	s := newServer(t, 0)
	baseline := runtime.NumGoroutine()
	src, _ := newSource(t, s, func(c *mcp.Config) { c.CallTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	start := time.Now()
	_, err := src.Execute(ctx, "slow", nil, ec)
	var ee *actions.ExecError
	if !errors.As(err, &ee) || !strings.Contains(ee.Message, "timed out") {
		t.Fatalf("slow tool: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}
	// The session survives a timed-out call.
	if _, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"a"}`), ec); err != nil {
		t.Fatal(err)
	}
	if s.Inits.Load() != 1 {
		t.Fatalf("a timeout dropped the session (%d inits)", s.Inits.Load())
	}
	_ = src.Close()
	s.CloseClientConnections()
	testenv.Eventually(t, 10*time.Second, "goroutines back to the baseline", func() bool {
		return runtime.NumGoroutine() <= baseline
	})
}

func TestValidate(t *testing.T) {
	s := newServer(t, 0)
	ctx := context.Background()
	cfg := mcp.Config{ID: "c1", Name: "Docs", URL: s.URL, Auth: mcp.Auth{Header: "X-Api-Key",
		Secret: func(context.Context) (string, error) { return "key-1", nil }}}
	d := mcp.Validate(ctx, cfg)
	if !d.OK || !d.Reachable || !d.AuthOK || d.ToolCount != 5 || len(d.Tools) != 5 {
		t.Fatalf("%+v", d)
	}
	warn := map[string][]string{}
	for _, td := range d.Tools {
		warn[td.Name] = td.Warnings
		if len(td.Hash) != 64 {
			t.Errorf("%s: hash %q", td.Name, td.Hash)
		}
	}
	if len(warn["search_docs"]) != 0 {
		t.Errorf("search_docs warnings %v", warn["search_docs"])
	}
	if !strings.Contains(strings.Join(warn["create_page"], ";"), "no description") ||
		!strings.Contains(strings.Join(warn["create_page"], ";"), "risk defaults to write") {
		t.Errorf("create_page warnings %v", warn["create_page"])
	}

	bad := cfg
	bad.Auth.Secret = func(context.Context) (string, error) { return "wrong", nil }
	d = mcp.Validate(ctx, bad)
	if d.OK || !d.Reachable || d.AuthOK || d.Status != http.StatusUnauthorized || strings.Contains(d.Error, "wrong") {
		t.Fatalf("bad key: %+v", d)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	down := cfg
	down.URL = deadURL
	d = mcp.Validate(ctx, down)
	if d.OK || d.Reachable || d.Error == "" {
		t.Fatalf("unreachable: %+v", d)
	}

	d = mcp.Validate(ctx, mcp.Config{ID: "c1", URL: "ftp://x"})
	if d.OK || d.Error == "" {
		t.Fatalf("bad url: %+v", d)
	}
}

// Current bypasses the cache (a tool changed on the server is seen at once)
// and replaces the cached listing with what it fetched.
func TestCurrentBypassesAndRefreshesCache(t *testing.T) {
	s := newServer(t, 0)
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	src, _ := newSource(t, s, func(c *mcp.Config) { c.Now = clk.Now })
	ctx := context.Background()
	if _, err := src.ListActions(ctx, ec); err != nil {
		t.Fatal(err)
	}
	changed := map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}, "all": map[string]any{"type": "boolean"}}}
	s.MCP.AddTool(&sdk.Tool{Name: "search_docs", InputSchema: changed}, mcptest.Text("new"))
	lists := s.Lists.Load()
	d, ok, err := src.Current(ctx, ec, "search_docs")
	if err != nil || !ok || !strings.Contains(string(d.Params), `"all"`) {
		t.Fatalf("current %+v %v %v", d, ok, err)
	}
	if n := s.Lists.Load() - lists; n != 3 { // one fresh fetch of 3 pages
		t.Fatalf("%d tools/list requests", n)
	}
	// The cache now holds the fresh listing: no refetch.
	defs, err := src.ListActions(ctx, ec)
	if err != nil || s.Lists.Load()-lists != 3 {
		t.Fatalf("list after current: %v, %d requests", err, s.Lists.Load()-lists)
	}
	i := slices.IndexFunc(defs, func(d actions.Definition) bool { return d.ID == "search_docs" })
	if i < 0 || !strings.Contains(string(defs[i].Params), `"all"`) {
		t.Fatalf("cache not refreshed: %+v", defs)
	}
	if _, ok, err := src.Current(ctx, ec, "no_such_tool"); err != nil || ok {
		t.Fatalf("missing tool: ok=%v %v", ok, err)
	}
}
