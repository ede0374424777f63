// Package slackfake is an in-process Slack Web API for tests. It speaks the
// real wire format of conversations.open and chat.postMessage: POST
// /api/{method} with a JSON body (token in `Authorization: Bearer`, as Slack
// requires for JSON) or a form body (token in the header or the `token`
// field); answers are HTTP 200 with {"ok": true, …} or {"ok": false, "error":
// code}. It records what was posted and can be told to fail: the next N calls
// answer HTTP 500 (or 429 with Retry-After), or a given error code.
package slackfake

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// Post is one accepted chat.postMessage.
type Post struct {
	// Team is the workspace of the token that posted.
	Team    string
	Channel string
	Text    string
	Blocks  []map[string]any
	TS      string
}

// Open is one accepted conversations.open.
type Open struct {
	Team, User, Channel string
}

type failure struct {
	method     string // "" = any method
	status     int    // HTTP status; 200 with code for an envelope error
	code       string
	retryAfter int
}

// Server is the fake. Create it with New.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	tokens   map[string]string // token → team
	channels map[string]bool   // "team/channel" that exist
	failures []failure
	posts    []Post
	opens    []Open
	calls    map[string]int
	seq      int
}

// New starts a fake closed when the test ends.
func New(t fakekit.TB) *Server {
	s := &Server{tokens: map[string]string{}, channels: map[string]bool{}, calls: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the Web API base URL to configure (SLACK_API_URL).
func (s *Server) URL() string { return s.srv.URL + "/api" }

// AddToken makes token a valid bot token of team.
func (s *Server) AddToken(token, team string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = team
}

// RevokeToken makes token answer token_revoked.
func (s *Server) RevokeToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = "\x00revoked"
}

// AddChannel makes channel exist in team (conversations.open creates DM
// channels itself).
func (s *Server) AddChannel(team, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[team+"/"+channel] = true
}

// FailNext makes the next n calls (of any method) answer HTTP status with
// no Slack envelope (e.g. 500, 502).
func (s *Server) FailNext(n, status int) {
	s.queue(n, failure{status: status})
}

// RateLimitNext makes the next n calls answer 429 with Retry-After seconds.
func (s *Server) RateLimitNext(n, retryAfterSeconds int) {
	s.queue(n, failure{status: http.StatusTooManyRequests, retryAfter: retryAfterSeconds})
}

// FailWith makes the next n calls of method ("" = any) answer {"ok": false,
// "error": code}.
func (s *Server) FailWith(method, code string, n int) {
	s.queue(n, failure{method: method, status: http.StatusOK, code: code})
}

func (s *Server) queue(n int, f failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, f)
	}
}

// Posts returns the accepted messages, in order.
func (s *Server) Posts() []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Post(nil), s.posts...)
}

// Opens returns the accepted conversations.open calls, in order.
func (s *Server) Opens() []Open {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Open(nil), s.opens...)
}

// Calls returns how many requests reached method (failed ones included).
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	args, bodyToken, err := parseBody(r)
	if err != nil {
		reply(w, map[string]any{"ok": false, "error": err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	for i, f := range s.failures {
		if f.method != "" && f.method != method {
			continue
		}
		s.failures = append(s.failures[:i], s.failures[i+1:]...)
		switch {
		case f.status == http.StatusTooManyRequests:
			w.Header().Set("Retry-After", strconv.Itoa(f.retryAfter))
			http.Error(w, "rate limited", f.status)
		case f.status != http.StatusOK:
			http.Error(w, "upstream failure", f.status)
		default:
			reply(w, map[string]any{"ok": false, "error": f.code})
		}
		return
	}

	token, isBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !isBearer || token == "" {
		token = bodyToken
	}
	if token == "" {
		reply(w, map[string]any{"ok": false, "error": "not_authed"})
		return
	}
	team, known := s.tokens[token]
	switch {
	case !known:
		reply(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	case team == "\x00revoked":
		reply(w, map[string]any{"ok": false, "error": "token_revoked"})
		return
	}

	switch method {
	case "conversations.open":
		users := str(args["users"])
		if users == "" {
			reply(w, map[string]any{"ok": false, "error": "users_list_not_supplied"})
			return
		}
		if strings.Contains(users, ",") || !strings.HasPrefix(users, "U") {
			reply(w, map[string]any{"ok": false, "error": "user_not_found"})
			return
		}
		ch := "D" + strings.TrimPrefix(users, "U")
		s.channels[team+"/"+ch] = true
		s.opens = append(s.opens, Open{Team: team, User: users, Channel: ch})
		reply(w, map[string]any{"ok": true, "channel": map[string]any{"id": ch}})
	case "chat.postMessage":
		ch := str(args["channel"])
		if ch == "" || !s.channels[team+"/"+ch] {
			reply(w, map[string]any{"ok": false, "error": "channel_not_found"})
			return
		}
		text := str(args["text"])
		blocks, err := parseBlocks(args["blocks"])
		if err != nil {
			reply(w, map[string]any{"ok": false, "error": "invalid_blocks"})
			return
		}
		if text == "" && len(blocks) == 0 {
			reply(w, map[string]any{"ok": false, "error": "no_text"})
			return
		}
		s.seq++
		ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), s.seq)
		s.posts = append(s.posts, Post{Team: team, Channel: ch, Text: text, Blocks: blocks, TS: ts})
		reply(w, map[string]any{"ok": true, "channel": ch, "ts": ts, "message": map[string]any{"text": text, "ts": ts}})
	default:
		reply(w, map[string]any{"ok": false, "error": "unknown_method"})
	}
}

// parseBody reads a JSON or form body into arguments, like Slack does.
func parseBody(r *http.Request) (map[string]any, string, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, "", fmt.Errorf("invalid_form_data")
	}
	args := map[string]any{}
	switch ct {
	case "application/json":
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, "", fmt.Errorf("invalid_json")
		}
		// Slack ignores a token in a JSON body: it must be the bearer.
		return args, "", nil
	case "application/x-www-form-urlencoded":
		vals, err := url.ParseQuery(string(raw))
		if err != nil {
			return nil, "", fmt.Errorf("invalid_form_data")
		}
		for k := range vals {
			args[k] = vals.Get(k)
		}
		return args, vals.Get("token"), nil
	default:
		return nil, "", fmt.Errorf("invalid_form_data")
	}
}

// parseBlocks accepts blocks as a JSON array or (form bodies) its text.
func parseBlocks(v any) ([]map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	var raw []byte
	if s, ok := v.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	var out []map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	for _, b := range out {
		if str(b["type"]) == "" {
			return nil, fmt.Errorf("block without type")
		}
	}
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}
