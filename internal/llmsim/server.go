// Package llmsim is a scripted large language model speaking the Anthropic
// Messages API, so the real OpenCode agent can run end to end offline and in
// tests.
//
// It serves POST /v1/messages and POST /messages (OpenCode's
// @ai-sdk/anthropic provider calls {baseURL}/messages), streaming (SSE:
// message_start, content_block_start/delta/stop with text_delta and
// input_json_delta, message_delta with stop_reason and usage, message_stop)
// or as one JSON message, with Anthropic-shaped errors and realistic usage
// (input, output and prompt-cache token counts) so metering can be tested.
//
// A reply comes from a Script: a list of turns. The script is chosen, in
// order, by the X-Session-Id header (OpenCode sends its session id; tests
// bind a session, or "the next new session", to a script), by a
// [[script:NAME]] marker in the latest user prompt, or falls back to an echo
// reply. The turn to play is derived from the conversation in the request
// (assistant messages since the latest prompt), never from server-side
// counters, so retries replay the same turn. OpenCode's separate
// title-generation requests get a short title.
package llmsim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Options configures a Server.
type Options struct {
	// APIKey, when set, must be presented as x-api-key (or a Bearer token);
	// otherwise any key is accepted.
	APIKey string
	// ScriptsDir, used by Main, holds extra *.json scripts.
	ScriptsDir string
	// Logger receives one line per request; nil discards.
	Logger *slog.Logger
}

// Usage is the Anthropic usage object.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// Record describes one answered request, for tests and metering checks.
type Record struct {
	SessionID string
	Model     string
	Script    string // "" for the echo reply
	Turn      int
	Title     bool // a title-generation request
	Stream    bool
	Status    int
	Usage     Usage
}

const maxRecords = 1000

// Server is the scripted model. It is safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	scripts  map[string]Script
	sessions map[string]string // session id → script name ("" = seen, unbound)
	next     []string          // scripts for the next new sessions, FIFO
	cache    map[[32]byte]struct{}
	records  []Record
}

// New returns a Server knowing the built-in scripts.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:     opts,
		log:      log,
		scripts:  map[string]Script{},
		sessions: map[string]string{},
		cache:    map[[32]byte]struct{}{},
	}
	for _, sc := range BuiltinScripts() {
		s.scripts[sc.Name] = sc
	}
	return s
}

// Register adds or replaces a named script.
func (s *Server) Register(name string, sc Script) error {
	sc.Name = name
	if err := sc.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[name] = sc
	return nil
}

// LoadScripts registers every script of a directory of JSON files.
func (s *Server) LoadScripts(dir string) error {
	scripts, err := LoadDir(dir)
	if err != nil {
		return err
	}
	for _, sc := range scripts {
		if err := s.Register(sc.Name, sc); err != nil {
			return err
		}
	}
	return nil
}

// AssignSession binds a session id (OpenCode's ses_…) to a named script.
func (s *Server) AssignSession(sessionID, script string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.scripts[script]; !ok {
		return fmt.Errorf("llmsim: unknown script %q", script)
	}
	s.sessions[sessionID] = script
	return nil
}

// AssignNextSession binds the next session id the server has never seen to
// a named script. Calls queue up in order.
func (s *Server) AssignNextSession(script string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.scripts[script]; !ok {
		return fmt.Errorf("llmsim: unknown script %q", script)
	}
	s.next = append(s.next, script)
	return nil
}

// Records returns the answered requests, oldest first (the latest 1000).
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

func (s *Server) record(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.records) >= maxRecords {
		s.records = append(s.records[:0], s.records[1:]...)
	}
	s.records = append(s.records, r)
}

// Handler serves the Messages API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /messages", s.handleMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("POST /messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Main serves the simulator on addr until ctx ends.
func Main(ctx context.Context, addr string, opts Options) error {
	s := New(opts)
	if opts.ScriptsDir != "" {
		if err := s.LoadScripts(opts.ScriptsDir); err != nil {
			return fmt.Errorf("llm-sim: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("llm-sim: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.log.Info("llm-sim listening (scripted Anthropic Messages API)", "addr", ln.Addr().String(),
		"base_url", "http://"+ln.Addr().String()+"/v1")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("llm-sim: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("llm-sim: shutdown: %w", err)
	}
	return nil
}

// errorTypeForStatus maps an HTTP status to Anthropic's error type.
func errorTypeForStatus(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	if typ == "" {
		typ = errorTypeForStatus(status)
	}
	body, _ := marshal(map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": msg},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", newID("req_sim_"))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.APIKey == "" {
		return true
	}
	key := r.Header.Get("x-api-key")
	if key == "" {
		key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return subtle.ConstantTimeCompare([]byte(key), []byte(s.opts.APIKey)) == 1
}

func (s *Server) readRequest(w http.ResponseWriter, r *http.Request) (*Request, bool) {
	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "request body too large")
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "read body: "+err.Error())
		return nil, false
	}
	req, err := ParseRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return nil, false
	}
	return req, true
}

func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readRequest(w, r)
	if !ok {
		return
	}
	total, _, _ := inputTokens(req)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"input_tokens": total})
}

var markerRE = regexp.MustCompile(`\[\[script:([A-Za-z0-9_.-]+)\]\]`)

// titleRequest reports whether this is OpenCode's title-generation request.
func titleRequest(req *Request) bool {
	sys := strings.ToLower(req.SystemText())
	return strings.Contains(sys, "title generator") || strings.Contains(sys, "generate a title") ||
		(len(req.Tools) == 0 && strings.Contains(sys, "thread title"))
}

// choose picks the script for a request; ok is false (with an error reply
// written) when the request names an unknown script.
func (s *Server) choose(sessionID, prompt string) (sc Script, name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sessionID != "" {
		bound, seen := s.sessions[sessionID]
		if !seen {
			if len(s.next) > 0 {
				bound = s.next[0]
				s.next = s.next[1:]
			}
			s.sessions[sessionID] = bound
		}
		if bound != "" {
			return s.scripts[bound], bound, nil
		}
	}
	if m := markerRE.FindStringSubmatch(prompt); m != nil {
		sc, ok := s.scripts[m[1]]
		if !ok {
			return Script{}, "", fmt.Errorf("unknown script %q requested by marker", m[1])
		}
		return sc, m[1], nil
	}
	return Script{}, "", nil
}

// reply is what one response carries, placeholders expanded.
type reply struct {
	deltas []string
	tools  []toolUse
	delay  time.Duration
	err    *ErrorReply
}

type toolUse struct {
	id    string
	name  string
	input json.RawMessage
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readRequest(w, r)
	if !ok {
		return
	}
	sessionID := r.Header.Get("X-Session-Id")
	prompt := req.LatestPrompt()
	rec := Record{SessionID: sessionID, Model: req.Model, Stream: req.Stream, Turn: req.TurnIndex()}
	var rp reply
	if titleRequest(req) {
		rec.Title = true
		rp.deltas = []string{makeTitle(req)}
	} else {
		sc, name, err := s.choose(sessionID, prompt)
		if err != nil {
			rec.Status = http.StatusBadRequest
			s.record(rec)
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		rec.Script = name
		rp, err = buildReply(req, sc, name)
		if err != nil {
			rec.Status = http.StatusInternalServerError
			s.record(rec)
			writeError(w, http.StatusInternalServerError, "api_error", err.Error())
			return
		}
	}
	if rp.err != nil {
		rec.Status = rp.err.Status
		s.record(rec)
		writeError(w, rp.err.Status, rp.err.Type, rp.err.Message)
		return
	}
	rec.Status = http.StatusOK
	rec.Usage = s.usage(req, rp)
	s.log.Info("llm-sim request", "session_id", sessionID, "script", rec.Script, "turn", rec.Turn,
		"title", rec.Title, "stream", req.Stream, "input_tokens", rec.Usage.InputTokens,
		"output_tokens", rec.Usage.OutputTokens)
	if req.Stream {
		completed := s.stream(r.Context(), w, req, rp, rec.Usage)
		if !completed {
			rec.Status = 499 // client went away mid-stream
		}
	} else {
		s.writeJSON(w, req, rp, rec.Usage)
	}
	s.record(rec)
}

func makeTitle(req *Request) string {
	// OpenCode sends "Generate a title for this conversation:" followed by
	// the user's prompt; name the session after the prompt.
	text := ""
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "text" && !strings.HasPrefix(strings.TrimSpace(b.Text), "Generate a title") {
				text = b.Text
			}
		}
	}
	text = markerRE.ReplaceAllString(text, "")
	var kept []string
	for _, w := range strings.Fields(text) {
		if strings.HasPrefix(w, "<") {
			continue
		}
		kept = append(kept, w)
		if len(kept) == 6 {
			break
		}
	}
	if len(kept) == 0 {
		return "Scripted session"
	}
	return strings.Join(kept, " ")
}

func buildReply(req *Request, sc Script, name string) (reply, error) {
	ex := expander{req: req}
	turnIdx := req.TurnIndex()
	if name == "" {
		p := strings.TrimSpace(req.LatestPrompt())
		if p == "" {
			p = "(nothing)"
		}
		if turnIdx > 0 {
			return reply{deltas: []string{"Done."}}, nil
		}
		return reply{deltas: splitText("You said: "+p, 3)}, nil
	}
	if turnIdx >= len(sc.Turns) {
		return reply{deltas: []string{"Done."}}, nil
	}
	t := sc.Turns[turnIdx]
	if t.Error != nil {
		e := *t.Error
		e.Message = ex.expand(e.Message)
		if e.Type == "" {
			e.Type = errorTypeForStatus(e.Status)
		}
		return reply{err: &e}, nil
	}
	rp := reply{delay: t.delay()}
	if len(t.Deltas) > 0 {
		for _, d := range t.Deltas {
			rp.deltas = append(rp.deltas, ex.expand(d))
		}
	} else {
		rp.deltas = splitText(ex.expand(t.Text), 3)
	}
	for i, c := range t.ToolCalls {
		input, err := ex.expandJSON(c.Input)
		if err != nil {
			return reply{}, fmt.Errorf("script %q turn %d: %w", name, turnIdx, err)
		}
		rp.tools = append(rp.tools, toolUse{id: toolUseID(req, turnIdx, i), name: c.Name, input: input})
	}
	return rp, nil
}

// toolUseID is deterministic for a conversation position, so a retried
// request yields the same id.
func toolUseID(req *Request, turn, i int) string {
	h := sha256.New()
	for _, m := range req.Messages[:req.lastPromptIndex()+1] {
		fmt.Fprintf(h, "%s\x00%s\x00", m.Role, m.Text())
	}
	fmt.Fprintf(h, "%d\x00%d", turn, i)
	return "toolu_sim_" + hex.EncodeToString(h.Sum(nil))[:24]
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// estimateTokens approximates a tokenizer: about four bytes per token.
func estimateTokens(n int) int {
	if n <= 0 {
		return 0
	}
	return (n + 3) / 4
}

// inputTokens counts the prompt (tools, system, messages, in Anthropic's
// caching order) and the part up to the last cache_control breakpoint.
func inputTokens(req *Request) (total, prefix int, prefixHash [32]byte) {
	h := sha256.New()
	cachedUpTo := 0
	add := func(raw []byte, cacheControl bool) {
		total += estimateTokens(len(raw))
		h.Write(raw)
		if cacheControl {
			cachedUpTo = total
			copy(prefixHash[:], h.Sum(nil))
		}
	}
	for _, t := range req.Tools {
		raw, _ := json.Marshal(struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}{t.Name, t.Description, t.InputSchema})
		add(raw, len(t.CacheControl) > 0)
	}
	for _, b := range req.System {
		add([]byte(b.Text), len(b.CacheControl) > 0)
	}
	for _, m := range req.Messages {
		total += 3 // role and message framing
		for _, b := range m.Content {
			raw := b.Raw
			if len(raw) == 0 {
				raw = []byte(b.Text)
			}
			add(raw, len(b.CacheControl) > 0)
		}
	}
	return total, cachedUpTo, prefixHash
}

// usage computes the usage of a reply, simulating prompt caching: the prompt
// prefix up to the last cache_control breakpoint is a cache write the first
// time this server sees it and a cache read afterwards; input_tokens counts
// only the uncached rest, as the real API does.
func (s *Server) usage(req *Request, rp reply) Usage {
	total, prefix, hash := inputTokens(req)
	u := Usage{InputTokens: total - prefix}
	if prefix > 0 {
		s.mu.Lock()
		if _, hit := s.cache[hash]; hit {
			u.CacheReadInputTokens = prefix
		} else {
			u.CacheCreationInputTokens = prefix
			if len(s.cache) >= 100000 {
				clear(s.cache)
			}
			s.cache[hash] = struct{}{}
		}
		s.mu.Unlock()
	}
	if u.InputTokens < 1 {
		u.InputTokens = 1
	}
	out := 0
	for _, d := range rp.deltas {
		out += estimateTokens(len(d))
	}
	for _, t := range rp.tools {
		out += estimateTokens(len(t.name)+len(t.input)) + 10
	}
	u.OutputTokens = max(out, 1)
	return u
}

func stopReason(rp reply) string {
	if len(rp.tools) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func (s *Server) writeJSON(w http.ResponseWriter, req *Request, rp reply, u Usage) {
	content := []map[string]any{}
	if text := strings.Join(rp.deltas, ""); text != "" {
		content = append(content, map[string]any{"type": "text", "text": text})
	}
	for _, t := range rp.tools {
		content = append(content, map[string]any{"type": "tool_use", "id": t.id, "name": t.name, "input": t.input})
	}
	body, _ := marshal(map[string]any{
		"id": newID("msg_sim_"), "type": "message", "role": "assistant", "model": req.Model,
		"content": content, "stop_reason": stopReason(rp), "stop_sequence": nil, "usage": u,
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", newID("req_sim_"))
	_, _ = w.Write(body)
}

// sseWriter writes Anthropic server-sent events.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (sw sseWriter) event(name string, data any) error {
	body, err := marshal(data)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(sw.w, "event: %s\ndata: %s\n\n", name, body); err != nil {
		return err
	}
	return sw.rc.Flush()
}

// stream writes the reply as SSE; it reports false when the client went away.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, req *Request, rp reply, u Usage) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("request-id", newID("req_sim_"))
	w.WriteHeader(http.StatusOK)
	sw := sseWriter{w: w, rc: http.NewResponseController(w)}
	wait := func() bool {
		if rp.delay <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(rp.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	startUsage := u
	startUsage.OutputTokens = 1
	steps := []func() error{
		func() error {
			return sw.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
				"id": newID("msg_sim_"), "type": "message", "role": "assistant", "model": req.Model,
				"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
			}})
		},
		func() error { return sw.event("ping", map[string]string{"type": "ping"}) },
	}
	for _, step := range steps {
		if step() != nil {
			return false
		}
	}
	index := 0
	if len(rp.deltas) > 0 {
		if sw.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "text", "text": ""}}) != nil {
			return false
		}
		for _, d := range rp.deltas {
			if !wait() {
				return false
			}
			if sw.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": "text_delta", "text": d}}) != nil {
				return false
			}
		}
		if sw.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}) != nil {
			return false
		}
		index++
	}
	for _, t := range rp.tools {
		if sw.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "tool_use", "id": t.id, "name": t.name, "input": map[string]any{}}}) != nil {
			return false
		}
		for _, part := range splitJSON(string(t.input), 3) {
			if !wait() {
				return false
			}
			if sw.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": part}}) != nil {
				return false
			}
		}
		if sw.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}) != nil {
			return false
		}
		index++
	}
	if sw.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stopReason(rp), "stop_sequence": nil}, "usage": u}) != nil {
		return false
	}
	return sw.event("message_stop", map[string]string{"type": "message_stop"}) == nil
}

// splitJSON cuts a JSON text into n roughly equal pieces (at byte
// boundaries that keep UTF-8 intact), as the real API streams partial JSON.
func splitJSON(s string, n int) []string {
	if len(s) < n*4 {
		return []string{s}
	}
	var parts []string
	size := len(s) / n
	start := 0
	for i := 1; i < n; i++ {
		end := i * size
		for end < len(s) && end > start && (s[end]&0xC0) == 0x80 {
			end++
		}
		parts = append(parts, s[start:end])
		start = end
	}
	return append(parts, s[start:])
}
