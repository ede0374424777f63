// Package mcp is the action source of one org MCP connector: tools discovered with tools/list and run with tools/call over
// streamable HTTP, through the official Go MCP SDK.
//
// Design:
//   - One Source per connector row. It keeps one MCP client session and
//     reuses it across calls (the initialize handshake is two round trips);
//     a call that meets a 404 "session not found" (the server restarted or
//     expired the session) re-initialises once and retries once. A
//     connection the SDK reports broken any other way (a 401, say) is
//     dropped so the next call starts a fresh session; JSON-RPC errors and
//     the caller's own deadline keep it.
//   - Auth is a header whose value is resolved at every HTTP request (the
//     org secret is looked up at call time: a rotated secret takes effect
//     on the next request, and the value never leaves this process).
//   - tools/list (all pages) is cached CacheTTL (5 min) per org, with one
//     fetch in flight per org however many callers wait for it. Current
//     fetches afresh (for drift checks, which must not trust the cache)
//     and refreshes the cache with what it got.
//   - Risk from annotations: destructiveHint → danger (checked first, fail
//     safe), readOnlyHint → read, else the connector default, else write;
//     a per-tool override in the connector's risk policy wins over all.
//   - tools/list has a 15 s timeout, tools/call 30 s. A result with isError
//     is an *actions.ExecError carrying the tool's text.
//
// The default protocol version is 2025-11-25, the session-based revision
// remote MCP servers deploy; Config.ProtocolVersion overrides it.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/actions"
)

// Defaults of Config.
const (
	DefaultListTimeout     = 15 * time.Second
	DefaultCallTimeout     = 30 * time.Second
	DefaultCacheTTL        = 5 * time.Minute
	DefaultProtocolVersion = "2025-11-25"
	// TransportStreamableHTTP is the only transport (the spec's
	// "remote_http" is accepted as its older name).
	TransportStreamableHTTP = "streamable_http"
	maxListPages            = 100
)

// Auth says how requests authenticate.
type Auth struct {
	// Header carries the secret ("Authorization", "X-Api-Key"); empty
	// means no auth.
	Header string
	// Prefix is written before the secret with one space ("Bearer").
	Prefix string
	// Secret resolves the org secret at call time. When nil, the
	// ExecContext's Token is used.
	Secret func(ctx context.Context) (string, error)
}

// Config is one org_connectors row, resolved.
type Config struct {
	ID        string // the connector's uuid; the source id is "connector:<ID>"
	Name      string
	URL       string
	Transport string
	Auth      Auth
	// DefaultRisk is risk_policy's default (optional).
	DefaultRisk actions.RiskLevel
	// ToolRisk is risk_policy's per-tool overrides (optional).
	ToolRisk map[string]actions.RiskLevel

	ListTimeout     time.Duration
	CallTimeout     time.Duration
	CacheTTL        time.Duration
	ProtocolVersion string
	// HTTPClient's transport carries the requests (nil: a default one).
	HTTPClient *http.Client
	// Now is the clock of the cache (nil: time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Source is the actions.Source of one connector. Safe for concurrent use.
type Source struct {
	cfg    Config
	client *sdk.Client
	http   *http.Client

	connMu sync.Mutex // serialises connecting
	mu     sync.Mutex
	sess   *sdk.ClientSession
	closed bool

	cacheMu  sync.Mutex
	cache    map[string]*listing // by org id
	inflight map[string]*fetch
}

// listing is one cached tools/list.
type listing struct {
	at    time.Time
	defs  []actions.Definition
	tools map[string]*sdk.Tool
}

type fetch struct {
	done chan struct{}
	l    *listing
	err  error
}

var _ actions.Source = (*Source)(nil)

// New validates cfg and returns its source. It does not reach the network.
func New(cfg Config) (*Source, error) {
	switch cfg.Transport {
	case "", TransportStreamableHTTP, "remote_http":
	default:
		return nil, fmt.Errorf("mcp: connector %s: unsupported transport %q", cfg.ID, cfg.Transport)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("mcp: connector %s: url must be http(s)://host/…", cfg.ID)
	}
	if cfg.ID == "" {
		return nil, errors.New("mcp: connector id is required")
	}
	if cfg.ListTimeout <= 0 {
		cfg.ListTimeout = DefaultListTimeout
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.ProtocolVersion == "" {
		cfg.ProtocolVersion = DefaultProtocolVersion
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("source", actions.ConnectorPrefix+cfg.ID)
	base := http.DefaultTransport
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		base = cfg.HTTPClient.Transport
	}
	s := &Source{
		cfg:      cfg,
		client:   sdk.NewClient(&sdk.Implementation{Name: "proliferate", Version: "1"}, nil),
		http:     &http.Client{Transport: &authTransport{base: base, auth: cfg.Auth}},
		cache:    map[string]*listing{},
		inflight: map[string]*fetch{},
	}
	return s, nil
}

// ID is "connector:<uuid>".
func (s *Source) ID() string { return actions.ConnectorPrefix + s.cfg.ID }

// DisplayName is the connector's name.
func (s *Source) DisplayName() string {
	if s.cfg.Name != "" {
		return s.cfg.Name
	}
	return s.ID()
}

// ListActions returns the connector's tools (cached CacheTTL per org).
func (s *Source) ListActions(ctx context.Context, ec actions.ExecContext) ([]actions.Definition, error) {
	l, err := s.listing(ctx, ec)
	if err != nil {
		return nil, err
	}
	return append([]actions.Definition(nil), l.defs...), nil
}

// Invalidate drops the cached tool list of org (after an admin edit).
func (s *Source) Invalidate(orgID string) {
	s.cacheMu.Lock()
	delete(s.cache, orgID)
	s.cacheMu.Unlock()
}

// Current fetches tools/list now (never from the cache and never joining a
// fetch that started before this call) and returns the tool's current
// definition; ok is false when the server no longer lists it. The fresh
// list replaces the cached one. It is what a drift check must compare: the
// cache may be up to CacheTTL old.
func (s *Source) Current(ctx context.Context, ec actions.ExecContext, toolID string) (def actions.Definition, ok bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.ListTimeout)
	defer cancel()
	tools, err := s.listTools(lctx, ec)
	if err != nil {
		return actions.Definition{}, false, err
	}
	l := s.toListing(tools)
	s.cacheMu.Lock()
	if old, ok := s.cache[ec.OrgID]; !ok || !old.at.After(l.at) {
		s.cache[ec.OrgID] = l
	}
	s.cacheMu.Unlock()
	for _, d := range l.defs {
		if d.ID == toolID {
			return d, true, nil
		}
	}
	return actions.Definition{}, false, nil
}

func (s *Source) listing(ctx context.Context, ec actions.ExecContext) (*listing, error) {
	key := ec.OrgID
	s.cacheMu.Lock()
	if l, ok := s.cache[key]; ok && s.cfg.Now().Sub(l.at) < s.cfg.CacheTTL {
		s.cacheMu.Unlock()
		return l, nil
	}
	f, ok := s.inflight[key]
	if !ok {
		f = &fetch{done: make(chan struct{})}
		s.inflight[key] = f
		// The fetch is shared: it must not die with the first caller.
		go s.runFetch(context.WithoutCancel(ctx), key, ec, f)
	}
	s.cacheMu.Unlock()
	select {
	case <-f.done:
		return f.l, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Source) runFetch(ctx context.Context, key string, ec actions.ExecContext, f *fetch) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ListTimeout)
	defer cancel()
	tools, err := s.listTools(ctx, ec)
	if err == nil {
		f.l = s.toListing(tools)
	} else {
		f.err = err
	}
	s.cacheMu.Lock()
	delete(s.inflight, key)
	if err == nil {
		s.cache[key] = f.l
	}
	s.cacheMu.Unlock()
	close(f.done)
}

func (s *Source) toListing(tools []*sdk.Tool) *listing {
	l := &listing{at: s.cfg.Now(), tools: make(map[string]*sdk.Tool, len(tools))}
	for _, t := range tools {
		if _, dup := l.tools[t.Name]; dup {
			continue
		}
		l.tools[t.Name] = t
		l.defs = append(l.defs, s.definition(t))
	}
	return l
}

func (s *Source) definition(t *sdk.Tool) actions.Definition {
	d := actions.Definition{ID: t.Name, Description: t.Description, Risk: s.risk(t)}
	if d.Description == "" {
		d.Description = t.Title
	}
	if t.InputSchema != nil {
		if b, err := json.Marshal(t.InputSchema); err == nil && string(b) != "null" {
			d.Params = b
		}
	}
	return d
}

// risk derives a tool's risk level (see the package comment).
func (s *Source) risk(t *sdk.Tool) actions.RiskLevel {
	if r, ok := s.cfg.ToolRisk[t.Name]; ok && validRisk(r) {
		return r
	}
	return RiskFromAnnotations(t.Annotations, s.cfg.DefaultRisk)
}

// RiskFromAnnotations maps MCP tool annotations to a risk level:
// destructiveHint → danger, readOnlyHint → read, else def when valid, else
// write.
func RiskFromAnnotations(a *sdk.ToolAnnotations, def actions.RiskLevel) actions.RiskLevel {
	switch {
	case a != nil && a.DestructiveHint != nil && *a.DestructiveHint:
		return actions.RiskDanger
	case a != nil && a.ReadOnlyHint:
		return actions.RiskRead
	case validRisk(def):
		return def
	default:
		return actions.RiskWrite
	}
}

func validRisk(r actions.RiskLevel) bool {
	return r == actions.RiskRead || r == actions.RiskWrite || r == actions.RiskDanger
}

// listTools runs tools/list over every page.
func (s *Source) listTools(ctx context.Context, ec actions.ExecContext) ([]*sdk.Tool, error) {
	ctx, _ = withStatus(ctx)
	var tools []*sdk.Tool
	err := s.withSession(ctx, ec, func(ctx context.Context, cs *sdk.ClientSession) error {
		tools = tools[:0]
		cursor := ""
		seen := map[string]bool{}
		for page := 0; ; page++ {
			if page == maxListPages {
				return fmt.Errorf("more than %d pages of tools", maxListPages)
			}
			res, err := cs.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
			if err != nil {
				return err
			}
			tools = append(tools, res.Tools...)
			if res.NextCursor == "" {
				return nil
			}
			if seen[res.NextCursor] {
				return fmt.Errorf("tools/list repeated cursor %q", res.NextCursor)
			}
			seen[res.NextCursor] = true
			cursor = res.NextCursor
		}
	})
	if err != nil {
		return nil, s.execError(ctx, "tools/list", err)
	}
	return tools, nil
}

// Execute calls the tool. Params were validated by the caller.
func (s *Source) Execute(ctx context.Context, actionID string, params json.RawMessage, ec actions.ExecContext) (json.RawMessage, error) {
	l, err := s.listing(ctx, ec)
	if err != nil {
		return nil, err
	}
	if _, ok := l.tools[actionID]; !ok {
		return nil, fmt.Errorf("%w: %s has no tool %q", actions.ErrUnknownAction, s.ID(), actionID)
	}
	args := json.RawMessage("{}")
	if len(params) > 0 && string(params) != "null" {
		args = params
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	ctx, _ = withStatus(ctx)
	var res *sdk.CallToolResult
	err = s.withSession(ctx, ec, func(ctx context.Context, cs *sdk.ClientSession) error {
		var err error
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: actionID, Arguments: args})
		return err
	})
	if err != nil {
		return nil, s.execError(ctx, "tools/call "+actionID, err)
	}
	if res.IsError {
		return nil, &actions.ExecError{Message: toolText(res)}
	}
	out, err := json.Marshal(struct {
		Content           []sdk.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
	}{nonNil(res.Content), res.StructuredContent})
	if err != nil {
		return nil, &actions.ExecError{Message: "tool result is not JSON-encodable", Err: err}
	}
	return out, nil
}

func nonNil(c []sdk.Content) []sdk.Content {
	if c == nil {
		return []sdk.Content{}
	}
	return c
}

// toolText joins the text content of an error result.
func toolText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok && t.Text != "" {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 {
		return "the tool reported an error"
	}
	return strings.Join(parts, "\n")
}

// withSession runs op on the current session, re-initialising once when
// the server no longer knows the session.
func (s *Source) withSession(ctx context.Context, ec actions.ExecContext, op func(context.Context, *sdk.ClientSession) error) error {
	ctx = withToken(ctx, ec.Token)
	for attempt := 0; ; attempt++ {
		cs, err := s.session(ctx)
		if err != nil {
			return err
		}
		err = op(ctx, cs)
		if err == nil {
			return nil
		}
		if brokenSession(ctx, err) {
			s.drop(cs)
			if attempt == 0 && errors.Is(err, sdk.ErrSessionMissing) {
				s.cfg.Logger.InfoContext(ctx, "mcp session expired; re-initialising", "connector", s.cfg.Name)
				continue
			}
		}
		return err
	}
}

// brokenSession reports an error after which the session is unusable: not
// a JSON-RPC error from the server and not the caller's own deadline.
func brokenSession(ctx context.Context, err error) bool {
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return false
	}
	if ctx.Err() != nil {
		return false
	}
	return true
}

// session returns the current session, connecting when there is none.
func (s *Source) session(ctx context.Context) (*sdk.ClientSession, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("mcp: source closed")
	}
	if cs := s.sess; cs != nil {
		s.mu.Unlock()
		return cs, nil
	}
	s.mu.Unlock()

	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.mu.Lock()
	if cs := s.sess; cs != nil {
		s.mu.Unlock()
		return cs, nil
	}
	s.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, s.cfg.ListTimeout)
	defer cancel()
	t := &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.http, MaxRetries: -1, DisableStandaloneSSE: true}
	cs, err := s.client.Connect(cctx, t, &sdk.ClientSessionOptions{ProtocolVersion: s.cfg.ProtocolVersion})
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = cs.Close()
		return nil, errors.New("mcp: source closed")
	}
	s.sess = cs
	return cs, nil
}

// drop forgets cs (when still current) and closes it.
func (s *Source) drop(cs *sdk.ClientSession) {
	s.mu.Lock()
	if s.sess == cs {
		s.sess = nil
	}
	s.mu.Unlock()
	_ = cs.Close()
}

// Close ends the session (a DELETE to the server when it still knows it).
func (s *Source) Close() error {
	s.mu.Lock()
	cs := s.sess
	s.sess, s.closed = nil, true
	s.mu.Unlock()
	if cs != nil {
		return cs.Close()
	}
	return nil
}

// execError turns a transport or protocol failure into an ExecError whose
// message is safe to show: the connector URL's query (where some servers
// take keys) is removed.
func (s *Source) execError(ctx context.Context, op string, err error) error {
	var ee *actions.ExecError
	if errors.As(err, &ee) {
		return err
	}
	status := statusFrom(ctx)
	msg := err.Error()
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		msg = "the server refused the connector's credentials"
	case errors.Is(err, errSecret):
		msg = "the connector's secret could not be resolved"
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = "timed out"
	}
	if u, perr := url.Parse(s.cfg.URL); perr == nil && u.RawQuery != "" {
		msg = strings.ReplaceAll(msg, s.cfg.URL, u.Scheme+"://"+u.Host+u.Path)
		msg = strings.ReplaceAll(msg, u.RawQuery, "…")
	}
	return &actions.ExecError{Status: status, Message: fmt.Sprintf("%s %s: %s", s.DisplayName(), op, msg), Err: err}
}

// Guide is markdown for the agent, generated from the cached tools.
func (s *Source) Guide(ctx context.Context, ec actions.ExecContext) (string, error) {
	defs, err := s.ListActions(ctx, ec)
	if err != nil {
		return "", err
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].ID < defs[j].ID })
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nMCP connector `%s` with %d tools. Run one with:\n\n", s.DisplayName(), s.ID(), len(defs))
	fmt.Fprintf(&b, "    proliferate actions run --integration %s --action <tool> --params '{…}'\n\n", s.ID())
	b.WriteString("Tools marked `write` may wait for a person's approval; `danger` tools are denied unless an admin allowed them.\n")
	for _, d := range defs {
		fmt.Fprintf(&b, "\n## %s\n\nRisk: `%s`\n\n", d.ID, d.Risk)
		if d.Description != "" {
			b.WriteString(strings.TrimSpace(d.Description) + "\n\n")
		}
		b.WriteString(paramsMarkdown(d.Params))
	}
	return b.String(), nil
}

// paramsMarkdown lists the top-level properties of a params schema.
func paramsMarkdown(schema json.RawMessage) string {
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return "Parameters: none.\n"
	}
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("Parameters:\n\n")
	for _, n := range names {
		p := s.Properties[n]
		typ := "any"
		switch t := p.Type.(type) {
		case string:
			typ = t
		case []any:
			var ts []string
			for _, x := range t {
				ts = append(ts, fmt.Sprint(x))
			}
			typ = strings.Join(ts, "|")
		}
		line := fmt.Sprintf("- `%s` (%s", n, typ)
		if req[n] {
			line += ", required"
		}
		line += ")"
		if p.Description != "" {
			line += ": " + strings.ReplaceAll(strings.TrimSpace(p.Description), "\n", " ")
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
