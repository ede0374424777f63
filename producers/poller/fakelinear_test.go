package poller_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLinear speaks Linear's GraphQL API for the issues query: POST JSON
// {query, variables} with "Authorization: Bearer <token>", Relay cursor
// pagination (first/after, pageInfo {hasNextPage endCursor}), orderBy
// updatedAt (most recently updated first), filter updatedAt.gte; rate
// limiting as HTTP 429 with Retry-After, or as a GraphQL RATELIMITED error.
type fakeLinear struct {
	URL   string
	token string

	mu      sync.Mutex
	issues  map[string]map[string]any
	calls   []linearCall
	limited []limitReply
	limitAt map[int]limitReply // by call number, from 1
}

type linearCall struct {
	After        string
	UpdatedAfter string
	First        int
}

type limitReply struct {
	status     int
	retryAfter string
}

func newFakeLinear(t *testing.T, token string) *fakeLinear {
	f := &fakeLinear{token: token, issues: map[string]map[string]any{}, limitAt: map[int]limitReply{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL + "/graphql"
	return f
}

type issueSpec struct {
	id, title, team     string
	created, updated    time.Time
	state               string
	priority            int
	labels              []string
	assigneeID, project string
}

// put adds or replaces an issue (a GraphQL Issue node).
func (f *fakeLinear) put(s issueSpec) {
	labels := []any{}
	for i, l := range s.labels {
		labels = append(labels, map[string]any{"id": "lbl-" + string(rune('a'+i)), "name": l})
	}
	if s.state == "" {
		s.state = "Todo"
	}
	node := map[string]any{
		"id": s.id, "identifier": s.team + "-" + strings.TrimPrefix(s.id, "issue-"), "number": 1, "title": s.title,
		"description": "", "url": "https://linear.app/acme/issue/" + s.id, "priority": s.priority, "priorityLabel": "No priority",
		"createdAt": s.created.UTC().Format("2006-01-02T15:04:05.000Z"), "updatedAt": s.updated.UTC().Format("2006-01-02T15:04:05.000Z"),
		"state":    map[string]any{"id": "state-" + s.state, "name": s.state, "type": "unstarted"},
		"team":     map[string]any{"id": "team-" + s.team, "key": s.team, "name": s.team + " team"},
		"assignee": nil, "project": nil,
		"labels": map[string]any{"nodes": labels},
	}
	if s.assigneeID != "" {
		node["assignee"] = map[string]any{"id": s.assigneeID, "name": "Ada", "email": "ada@example.com"}
	}
	if s.project != "" {
		node["project"] = map[string]any{"id": s.project, "name": "Project"}
	}
	f.mu.Lock()
	f.issues[s.id] = node
	f.mu.Unlock()
}

// rateLimit makes the next calls answer with these rate-limit replies.
func (f *fakeLinear) rateLimit(r ...limitReply) {
	f.mu.Lock()
	f.limited = append(f.limited, r...)
	f.mu.Unlock()
}

// rateLimitAt makes call number n (from 1) answer with r.
func (f *fakeLinear) rateLimitAt(n int, r limitReply) {
	f.mu.Lock()
	f.limitAt[n] = r
	f.mu.Unlock()
}

func (f *fakeLinear) Calls() []linearCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]linearCall(nil), f.calls...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func gqlError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"errors": []any{map[string]any{"message": msg, "extensions": map[string]any{"code": code}}}})
}

func (f *fakeLinear) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		gqlError(w, http.StatusBadRequest, "BAD_REQUEST", "POST application/json expected")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		gqlError(w, http.StatusUnauthorized, "AUTHENTICATION_ERROR", "Authentication required, not authenticated")
		return
	}
	var req struct {
		Query     string `json:"query"`
		Variables struct {
			First        int     `json:"first"`
			After        *string `json:"after"`
			UpdatedAfter string  `json:"updatedAfter"`
		} `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !strings.Contains(req.Query, "issues(") ||
		!strings.Contains(req.Query, "orderBy: updatedAt") || !strings.Contains(req.Query, "pageInfo { hasNextPage endCursor }") {
		gqlError(w, http.StatusBadRequest, "GRAPHQL_VALIDATION_FAILED", "unexpected query")
		return
	}
	since, err := time.Parse(time.RFC3339Nano, req.Variables.UpdatedAfter)
	if err != nil {
		gqlError(w, http.StatusBadRequest, "INVALID_INPUT", "updatedAfter is not a DateTimeOrDuration")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	call := linearCall{UpdatedAfter: req.Variables.UpdatedAfter, First: req.Variables.First}
	if req.Variables.After != nil {
		call.After = *req.Variables.After
	}
	f.calls = append(f.calls, call)
	l, limited := f.limitAt[len(f.calls)]
	if !limited && len(f.limited) > 0 {
		l, limited = f.limited[0], true
		f.limited = f.limited[1:]
	}
	if limited {
		if l.retryAfter != "" {
			w.Header().Set("Retry-After", l.retryAfter)
		}
		gqlError(w, l.status, "RATELIMITED", "Rate limit exceeded")
		return
	}
	var nodes []map[string]any
	for _, n := range f.issues {
		u, _ := time.Parse(time.RFC3339Nano, n["updatedAt"].(string))
		if !u.Before(since) {
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool {
		ui, uj := nodes[i]["updatedAt"].(string), nodes[j]["updatedAt"].(string)
		if ui != uj {
			return ui > uj
		}
		return nodes[i]["id"].(string) < nodes[j]["id"].(string)
	})
	start := 0
	if call.After != "" {
		raw, _ := base64.StdEncoding.DecodeString(call.After)
		for i, n := range nodes {
			if n["id"] == string(raw) {
				start = i + 1
			}
		}
	}
	first := req.Variables.First
	if first <= 0 {
		first = 50
	}
	end := min(start+first, len(nodes))
	page := nodes[start:end]
	var endCursor any
	if len(page) > 0 {
		endCursor = base64.StdEncoding.EncodeToString([]byte(page[len(page)-1]["id"].(string)))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"issues": map[string]any{
		"nodes":    page,
		"pageInfo": map[string]any{"hasNextPage": end < len(nodes), "endCursor": endCursor},
	}}})
}
