// Package agentsim is a protocol-level OpenCode simulator: an HTTP server
// speaking the subset of OpenCode's API the gateway uses (health, sessions,
// prompt_async, abort, status, message history) and its SSE event stream
// (GET /event) with the same event shapes as the real server
// (message.updated, message.part.updated, message.part.delta,
// session.status, session.idle, session.error, server.connected,
// server.heartbeat). Replies are scripted, so benchmarks and fast tests can
// drive the gateway without a real agent or LLM; Provider wraps it as a
// sandbox.Provider (one simulated server per session).
//
// Prompt directives select the reply (several may be combined, in order):
//
//	[[tokens:N]]      stream N text tokens ("tok0 tok1 …")
//	[[stamped:N]]     stream N tokens "|<unix-nanos>" stamped at emission
//	[[tool:NAME]]     run a tool call NAME (pending → running with a title → completed)
//	[[toolerror:NAME]] run a tool call that fails
//	[[error:TEXT]]    fail the turn with session.error (APIError)
//	[[hang]]          keep the turn busy until aborted
//	[[pr:URL]]        include URL in the reply text
//
// Without directives the reply is "Echo: <prompt>" streamed word by word.
package agentsim

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
)

// Options configure a Server.
type Options struct {
	// Password enables Basic auth (user "opencode"), as OpenCode does.
	Password string
	// TokenDelay is the pause between streamed tokens (0 = none).
	TokenDelay time.Duration
	// HeartbeatEvery is the server.heartbeat period [10s].
	HeartbeatEvery time.Duration
	// SubscriberBuffer is the per-SSE-connection event buffer; a
	// subscriber that falls this far behind is disconnected [65536].
	SubscriberBuffer int
}

// Server is one simulated OpenCode server.
type Server struct {
	opts Options

	mu       sync.Mutex
	sessions map[string]*simSession
	subs     map[chan []byte]struct{}
	prompts  []string
	seq      int64
	refuse   bool
}

type simSession struct {
	info    opencode.Session
	history []opencode.MessageWithParts
	busy    bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.HeartbeatEvery <= 0 {
		opts.HeartbeatEvery = 10 * time.Second
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = 65536
	}
	return &Server{opts: opts, sessions: map[string]*simSession{}, subs: map[chan []byte]struct{}{}}
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /global/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, opencode.Health{Healthy: true, Version: "agentsim"})
	})
	mux.HandleFunc("POST /session", s.createSession)
	mux.HandleFunc("GET /session/status", s.status)
	mux.HandleFunc("GET /session/{id}", s.getSession)
	mux.HandleFunc("GET /session/{id}/message", s.messages)
	mux.HandleFunc("POST /session/{id}/prompt_async", s.promptAsync)
	mux.HandleFunc("POST /session/{id}/abort", s.abort)
	mux.HandleFunc("GET /event", s.events)
	if s.opts.Password == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != opencode.BasicAuthUser || subtle.ConstantTimeCompare([]byte(p), []byte(s.opts.Password)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// exportSessions copies the sessions and their histories (a snapshot of
// the agent's state).
func (s *Server) exportSessions() map[string]simSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]simSession, len(s.sessions))
	for id, ss := range s.sessions {
		out[id] = simSession{info: ss.info, history: append([]opencode.MessageWithParts(nil), ss.history...)}
	}
	return out
}

// importSessions restores exported sessions (idle).
func (s *Server) importSessions(in map[string]simSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ss := range in {
		s.sessions[id] = &simSession{info: ss.info, history: append([]opencode.MessageWithParts(nil), ss.history...)}
	}
}

// Prompts returns every prompt text received, in order.
func (s *Server) Prompts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.prompts...)
}

// Subscribers returns the number of open event streams.
func (s *Server) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// DropStreams closes every open event stream (simulates a network blip).
func (s *Server) DropStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		delete(s.subs, ch)
		close(ch)
	}
}

// Close aborts running turns and closes the event streams.
func (s *Server) Close() {
	s.mu.Lock()
	for _, ss := range s.sessions {
		if ss.cancel != nil {
			ss.cancel()
		}
	}
	s.mu.Unlock()
	s.DropStreams()
}

func (s *Server) nextID(prefix string) string {
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s_%06d%s", prefix, n, hex.EncodeToString(b[:]))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Title string `json:"title"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	now := time.Now().UnixMilli()
	info := opencode.Session{ID: s.nextID("ses"), Title: body.Title, Version: "agentsim", Time: opencode.SessionTime{Created: now, Updated: now}}
	s.mu.Lock()
	s.sessions[info.ID] = &simSession{info: info}
	s.mu.Unlock()
	s.publish(opencode.EventSessionCreated, map[string]any{"info": info})
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) session(id string) (*simSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	return ss, ok
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	ss, ok := s.session(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"name": "NotFoundError"})
		return
	}
	writeJSON(w, http.StatusOK, ss.info)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	out := map[string]opencode.SessionStatus{}
	s.mu.Lock()
	for id, ss := range s.sessions {
		if ss.busy {
			out[id] = opencode.SessionStatus{Type: "busy"}
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ss, ok := s.sessions[r.PathValue("id")]
	var hist []opencode.MessageWithParts
	if ok {
		hist = append(hist, ss.history...)
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"name": "NotFoundError"})
		return
	}
	if hist == nil {
		hist = []opencode.MessageWithParts{}
	}
	writeJSON(w, http.StatusOK, hist)
}

func (s *Server) promptAsync(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Parts []opencode.PartInput `json:"parts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Parts) == 0 {
		http.Error(w, "bad prompt", http.StatusBadRequest)
		return
	}
	var text strings.Builder
	for _, p := range body.Parts {
		text.WriteString(p.Text)
	}
	s.mu.Lock()
	ss, ok := s.sessions[id]
	if !ok {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"name": "NotFoundError"})
		return
	}
	s.prompts = append(s.prompts, text.String())
	prev := ss.done
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ss.cancel, ss.done, ss.busy = cancel, done, true
	s.mu.Unlock()
	go func() {
		defer close(done)
		if prev != nil {
			<-prev // turns of one session run one after another
		}
		s.runTurn(ctx, ss, text.String())
	}()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) abort(w http.ResponseWriter, r *http.Request) {
	ss, ok := s.session(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"name": "NotFoundError"})
		return
	}
	s.mu.Lock()
	if ss.cancel != nil {
		ss.cancel()
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, true)
}

// ---- event stream ----

func (s *Server) publish(typ string, props any) {
	data, err := json.Marshal(map[string]any{"type": typ, "properties": props})
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- data:
		default: // too slow: drop the subscriber, as a real server's socket would break
			delete(s.subs, ch)
			close(ch)
		}
	}
}

// RefuseStreams makes GET /event answer 503 (refuse) or work again; with
// DropStreams it simulates an event stream that stays down.
func (s *Server) RefuseStreams(refuse bool) {
	s.mu.Lock()
	s.refuse = refuse
	s.mu.Unlock()
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	refuse := s.refuse
	s.mu.Unlock()
	if refuse {
		http.Error(w, "event stream unavailable", http.StatusServiceUnavailable)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan []byte, s.opts.SubscriberBuffer)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if _, ok := s.subs[ch]; ok {
			delete(s.subs, ch)
			close(ch)
		}
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "data: {\"type\":%q,\"properties\":{}}\n\n", opencode.EventServerConnected)
	fl.Flush()
	hb := time.NewTicker(s.opts.HeartbeatEvery)
	defer hb.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-hb.C:
			fmt.Fprintf(w, "data: {\"type\":%q,\"properties\":{}}\n\n", opencode.EventServerHeartbeat)
			fl.Flush()
		case data, ok := <-ch:
			if !ok {
				return
			}
			w.Write([]byte("data: "))
			w.Write(data)
			w.Write([]byte("\n\n"))
			// Coalesce writes of events already queued before flushing.
			for n := len(ch); n > 0; n-- {
				data, ok = <-ch
				if !ok {
					fl.Flush()
					return
				}
				w.Write([]byte("data: "))
				w.Write(data)
				w.Write([]byte("\n\n"))
			}
			fl.Flush()
		}
	}
}

// ---- scripted turns ----

var directive = regexp.MustCompile(`\[\[(tokens|stamped|tool|toolerror|error|hang|pr)(?::([^\]]*))?\]\]`)

type step struct {
	kind string
	arg  string
}

func parseScript(prompt string) []step {
	var steps []step
	for _, m := range directive.FindAllStringSubmatch(prompt, -1) {
		steps = append(steps, step{kind: m[1], arg: m[2]})
	}
	if len(steps) == 0 {
		steps = []step{{kind: "echo", arg: prompt}}
	}
	return steps
}

func (s *Server) runTurn(ctx context.Context, ss *simSession, prompt string) {
	sid := ss.info.ID
	now := func() int64 { return time.Now().UnixMilli() }
	userMsg := opencode.MessageInfo{ID: s.nextID("msg"), SessionID: sid, Role: "user"}
	userMsg.Time.Created = now()
	userPart := opencode.Part{ID: s.nextID("prt"), SessionID: sid, MessageID: userMsg.ID, Type: opencode.PartText, Text: prompt}
	s.publish(opencode.EventMessageUpdated, map[string]any{"info": userMsg})
	s.publish(opencode.EventMessagePartUpdated, map[string]any{"part": userPart})
	s.publish(opencode.EventSessionStatus, map[string]any{"sessionID": sid, "status": opencode.SessionStatus{Type: "busy"}})

	asst := opencode.MessageInfo{ID: s.nextID("msg"), SessionID: sid, Role: "assistant", ParentID: userMsg.ID, ModelID: "agentsim", ProviderID: "sim"}
	asst.Time.Created = now()
	s.publish(opencode.EventMessageUpdated, map[string]any{"info": asst})
	var parts []opencode.Part
	part := func(p opencode.Part) {
		s.publish(opencode.EventMessagePartUpdated, map[string]any{"part": p})
	}
	part(opencode.Part{ID: s.nextID("prt"), SessionID: sid, MessageID: asst.ID, Type: opencode.PartStepStart})

	var turnErr *opencode.ErrorInfo
	aborted := false
	streamText := func(tokens func(i int) string, n int) {
		p := opencode.Part{ID: s.nextID("prt"), SessionID: sid, MessageID: asst.ID, Type: opencode.PartText, Time: &struct {
			Start int64 `json:"start,omitempty"`
			End   int64 `json:"end,omitempty"`
		}{Start: now()}}
		part(p)
		var sb strings.Builder
		for i := 0; i < n; i++ {
			if ctx.Err() != nil {
				aborted = true
				break
			}
			tok := tokens(i)
			sb.WriteString(tok)
			s.publish(opencode.EventMessagePartDelta, opencode.PartDelta{MessageID: asst.ID, PartID: p.ID, Field: "text", Delta: tok})
			if s.opts.TokenDelay > 0 {
				select {
				case <-time.After(s.opts.TokenDelay):
				case <-ctx.Done():
				}
			}
		}
		p.Text = sb.String()
		p.Time.End = now()
		part(p)
		parts = append(parts, p)
	}
	for _, st := range parseScript(prompt) {
		if aborted || turnErr != nil {
			break
		}
		switch st.kind {
		case "echo":
			words := strings.Fields("Echo: " + st.arg)
			streamText(func(i int) string {
				if i == 0 {
					return words[0]
				}
				return " " + words[i]
			}, len(words))
		case "tokens":
			n, _ := strconv.Atoi(st.arg)
			streamText(func(i int) string { return "tok" + strconv.Itoa(i) + " " }, n)
		case "stamped":
			n, _ := strconv.Atoi(st.arg)
			streamText(func(int) string { return "|" + strconv.FormatInt(time.Now().UnixNano(), 10) }, n)
		case "pr":
			streamText(func(int) string { return "Opened " + st.arg }, 1)
		case "tool", "toolerror":
			parts = append(parts, s.runTool(sid, asst.ID, st.arg, st.kind == "toolerror"))
		case "error":
			turnErr = &opencode.ErrorInfo{Name: "APIError", Data: mustJSON(map[string]any{"message": st.arg})}
		case "hang":
			<-ctx.Done()
			aborted = true
		}
		if ctx.Err() != nil {
			aborted = true
		}
	}
	if aborted {
		turnErr = &opencode.ErrorInfo{Name: "MessageAbortedError", Data: mustJSON(map[string]any{"message": "Aborted"})}
	}
	if turnErr == nil {
		finish := opencode.Part{ID: s.nextID("prt"), SessionID: sid, MessageID: asst.ID, Type: opencode.PartStepFinish, Reason: "stop",
			Tokens: &opencode.Tokens{Input: 10, Output: 20}}
		part(finish)
		asst.Finish = "stop"
	} else {
		asst.Error = turnErr
		s.publish(opencode.EventSessionError, map[string]any{"sessionID": sid, "error": turnErr})
	}
	asst.Time.Completed = now()
	s.publish(opencode.EventMessageUpdated, map[string]any{"info": asst})
	s.mu.Lock()
	ss.history = append(ss.history,
		opencode.MessageWithParts{Info: userMsg, Parts: []opencode.Part{userPart}},
		opencode.MessageWithParts{Info: asst, Parts: parts})
	ss.busy = false
	s.mu.Unlock()
	s.publish(opencode.EventSessionStatus, map[string]any{"sessionID": sid, "status": opencode.SessionStatus{Type: "idle"}})
	s.publish(opencode.EventSessionIdle, map[string]any{"sessionID": sid})
}

func (s *Server) runTool(sid, messageID, name string, fail bool) opencode.Part {
	callID := s.nextID("toolu")
	p := opencode.Part{ID: s.nextID("prt"), SessionID: sid, MessageID: messageID, Type: opencode.PartTool, Tool: name, CallID: callID}
	input := mustJSON(map[string]any{"command": "echo " + name})
	p.State = &opencode.ToolState{Status: opencode.ToolPending, Input: json.RawMessage(`{}`)}
	s.publish(opencode.EventMessagePartUpdated, map[string]any{"part": p})
	start := time.Now().UnixMilli()
	p.State = &opencode.ToolState{Status: opencode.ToolRunning, Input: input, Title: "Running " + name}
	p.State.Time.Start = start
	s.publish(opencode.EventMessagePartUpdated, map[string]any{"part": p})
	st := &opencode.ToolState{Status: opencode.ToolCompleted, Input: input, Title: "Running " + name, Output: name + " done\n"}
	if fail {
		st = &opencode.ToolState{Status: opencode.ToolError, Input: input, Error: name + " failed"}
	}
	st.Time.Start, st.Time.End = start, time.Now().UnixMilli()+1
	p.State = st
	s.publish(opencode.EventMessagePartUpdated, map[string]any{"part": p})
	return p
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
