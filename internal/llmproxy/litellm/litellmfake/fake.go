// Package litellmfake is an in-memory LiteLLM admin API for tests: an
// httptest server speaking LiteLLM's wire format for the endpoints
// Proliferate calls (/team/info, /team/new, /key/generate, /key/delete,
// /spend/logs/v2). It requires the master key, keeps teams and keys in
// memory (enforcing LiteLLM's unique key aliases), records every call, lets
// tests add spend logs and inject failures.
package litellmfake

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Call is one recorded request.
type Call struct {
	Method string
	Path   string
	Query  url.Values
	Body   map[string]any
}

// Team is a stored team.
type Team struct {
	TeamID    string
	TeamAlias string
	Metadata  map[string]any
}

// Key is a stored virtual key.
type Key struct {
	Key       string
	Token     string // sha256 of Key, as LiteLLM stores it
	TeamID    string
	UserID    string
	KeyAlias  string
	MaxBudget *float64
	Duration  string
	Expires   *time.Time
	Metadata  map[string]any
}

// SpendLog is a LiteLLM_SpendLogs row.
type SpendLog struct {
	RequestID        string
	TeamID           string
	User             string // the key's user_id
	EndUser          string
	KeyAlias         string
	Spend            float64
	Model            string
	ModelGroup       string
	Provider         string
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	StartTime        time.Time
	EndTime          time.Time
	Status           string
}

type failure struct {
	status int
	team   string // "" = any
	sticky bool
}

// Server is the fake LiteLLM.
type Server struct {
	*httptest.Server
	MasterKey string

	mu       sync.Mutex
	calls    []Call
	teams    map[string]*Team
	keys     []*Key
	logs     []SpendLog
	failures map[string][]failure
	now      func() time.Time
}

// New starts a fake with the master key; it is closed when the test ends.
func New(t testing.TB, masterKey string) *Server {
	s := &Server{MasterKey: masterKey, teams: map[string]*Team{}, failures: map[string][]failure{}, now: time.Now}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// FailNext makes the next request to endpoint (e.g. "/spend/logs/v2")
// answer status.
func (s *Server) FailNext(endpoint string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[endpoint] = append(s.failures[endpoint], failure{status: status})
}

// FailTeam makes every request to endpoint for the team (team_id query
// parameter or body field) answer status until ClearFailures.
func (s *Server) FailTeam(endpoint, teamID string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[endpoint] = append(s.failures[endpoint], failure{status: status, team: teamID, sticky: true})
}

// ClearFailures removes every injected failure.
func (s *Server) ClearFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = map[string][]failure{}
}

// AddSpendLog stores a spend log.
func (s *Server) AddSpendLog(l SpendLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.TotalTokens == 0 {
		l.TotalTokens = l.PromptTokens + l.CompletionTokens
	}
	if l.EndTime.IsZero() {
		l.EndTime = l.StartTime
	}
	if l.Status == "" {
		l.Status = "success"
	}
	s.logs = append(s.logs, l)
}

// Calls returns the recorded calls, optionally only those to path.
func (s *Server) Calls(path string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if path == "" || c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// Teams returns the stored teams by id.
func (s *Server) Teams() map[string]Team {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Team{}
	for id, t := range s.teams {
		out[id] = *t
	}
	return out
}

// Keys returns the stored (live) keys.
func (s *Server) Keys() []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, *k)
	}
	return out
}

// AddKey stores a key directly (for revocation tests).
func (s *Server) AddKey(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.Key == "" {
		k.Key = newKey()
	}
	k.Token = hash(k.Key)
	s.keys = append(s.keys, &k)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{}
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		if len(b) > 0 {
			if err := json.Unmarshal(b, &body); err != nil {
				writeErr(w, http.StatusUnprocessableEntity, "invalid JSON body: "+err.Error(), "bad_request_error", "body")
				return
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Body: body})

	auth := r.Header.Get("Authorization")
	if auth == "" {
		auth = "Bearer " + r.Header.Get("x-litellm-api-key")
	}
	if auth != "Bearer "+s.MasterKey {
		writeErr(w, http.StatusUnauthorized, "Authentication Error, Invalid proxy server token passed.", "auth_error", "None")
		return
	}
	team := r.URL.Query().Get("team_id")
	if t, ok := body["team_id"].(string); ok {
		team = t
	}
	if st := s.takeFailure(r.URL.Path, team); st != 0 {
		writeErr(w, st, fmt.Sprintf("injected failure %d", st), "internal_server_error", "None")
		return
	}

	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/team/info":
		s.teamInfo(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/team/new":
		s.teamNew(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/key/generate":
		s.keyGenerate(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/key/delete":
		s.keyDelete(w, body)
	case r.Method == http.MethodGet && r.URL.Path == "/spend/logs/v2":
		s.spendLogs(w, r)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
	}
}

func (s *Server) takeFailure(path, team string) int {
	fs := s.failures[path]
	for i, f := range fs {
		if f.team != "" && f.team != team {
			continue
		}
		if !f.sticky {
			s.failures[path] = slices.Delete(fs, i, i+1)
		}
		return f.status
	}
	return 0
}

func (s *Server) teamInfo(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("team_id")
	if id == "" {
		writeErr(w, http.StatusBadRequest, "Malformed request. No team id passed in.", "bad_request_error", "team_id")
		return
	}
	t, ok := s.teams[id]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": map[string]any{"message": "Team not found, passed team id: " + id + "."}})
		return
	}
	var keys []map[string]any
	for _, k := range s.keys {
		if k.TeamID == id {
			keys = append(keys, map[string]any{"token": k.Token, "key_alias": k.KeyAlias, "user_id": k.UserID})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"team_id":          id,
		"team_info":        teamJSON(t),
		"keys":             keys,
		"team_memberships": []any{},
	})
}

func teamJSON(t *Team) map[string]any {
	return map[string]any{"team_id": t.TeamID, "team_alias": t.TeamAlias, "metadata": t.Metadata, "spend": 0.0,
		"max_budget": nil, "models": []any{}, "blocked": false, "members_with_roles": []any{}}
}

func (s *Server) teamNew(w http.ResponseWriter, body map[string]any) {
	id, _ := body["team_id"].(string)
	if id == "" {
		id = newID()
	}
	if _, ok := s.teams[id]; ok {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("Team id = %s already exists. Please use a different team id.", id), "bad_request_error", "team_id")
		return
	}
	alias, _ := body["team_alias"].(string)
	md, _ := body["metadata"].(map[string]any)
	t := &Team{TeamID: id, TeamAlias: alias, Metadata: md}
	s.teams[id] = t
	writeJSON(w, http.StatusOK, teamJSON(t))
}

var durationRE = regexp.MustCompile(`^(\d+)(s|m|h|d|w|mo)$`)

func parseDuration(d string) (time.Duration, bool) {
	m := durationRE.FindStringSubmatch(d)
	if m == nil {
		return 0, false
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour, "mo": 30 * 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit, true
}

func (s *Server) keyGenerate(w http.ResponseWriter, body map[string]any) {
	k := &Key{}
	k.TeamID, _ = body["team_id"].(string)
	k.UserID, _ = body["user_id"].(string)
	k.KeyAlias, _ = body["key_alias"].(string)
	k.Metadata, _ = body["metadata"].(map[string]any)
	if v, ok := body["max_budget"].(float64); ok {
		k.MaxBudget = &v
	}
	if k.TeamID != "" {
		if _, ok := s.teams[k.TeamID]; !ok {
			writeErr(w, http.StatusBadRequest, "Team not found, passed team_id="+k.TeamID, "bad_request_error", "team_id")
			return
		}
	}
	if k.KeyAlias != "" {
		for _, o := range s.keys {
			if o.KeyAlias == k.KeyAlias {
				writeErr(w, http.StatusBadRequest, fmt.Sprintf("Key with alias '%s' already exists. Unique key aliases across all keys are required.", k.KeyAlias), "bad_request_error", "key_alias")
				return
			}
		}
	}
	if d, ok := body["duration"].(string); ok && d != "" {
		dur, ok := parseDuration(d)
		if !ok {
			writeErr(w, http.StatusBadRequest, "Invalid duration: "+d, "bad_request_error", "duration")
			return
		}
		exp := s.now().UTC().Add(dur)
		k.Duration, k.Expires = d, &exp
	}
	k.Key = newKey()
	k.Token = hash(k.Key)
	s.keys = append(s.keys, k)
	var expires any
	if k.Expires != nil {
		expires = pyTime(*k.Expires)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"key": k.Key, "token": k.Token, "key_alias": k.KeyAlias, "team_id": k.TeamID, "user_id": k.UserID,
		"expires": expires, "max_budget": k.MaxBudget, "duration": k.Duration, "metadata": k.Metadata,
		"models": []any{}, "spend": 0.0,
	})
}

func (s *Server) keyDelete(w http.ResponseWriter, body map[string]any) {
	var want []string
	byAlias := false
	if v, ok := body["keys"].([]any); ok && len(v) > 0 {
		want = strs(v)
	} else if v, ok := body["key_aliases"].([]any); ok && len(v) > 0 {
		want, byAlias = strs(v), true
	} else {
		writeErr(w, http.StatusBadRequest, "Invalid request type", "bad_request_error", "keys")
		return
	}
	var deleted []string
	s.keys = slices.DeleteFunc(s.keys, func(k *Key) bool {
		match := (byAlias && slices.Contains(want, k.KeyAlias)) || (!byAlias && (slices.Contains(want, k.Key) || slices.Contains(want, k.Token)))
		if match {
			deleted = append(deleted, k.Token)
		}
		return match
	})
	if len(deleted) == 0 {
		writeErr(w, http.StatusNotFound, "Failed to delete all keys. Keys passed in: "+strings.Join(want, ","), "not_found_error", "keys")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted_keys": want})
}

const dateLayout = "2006-01-02 15:04:05"

func (s *Server) spendLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("start_date") == "" || q.Get("end_date") == "" {
		writeErr(w, http.StatusBadRequest, "Start date and end date are required", "bad_request", "None")
		return
	}
	start, err1 := time.Parse(dateLayout, q.Get("start_date"))
	end, err2 := time.Parse(dateLayout, q.Get("end_date"))
	if err1 != nil || err2 != nil {
		writeErr(w, http.StatusInternalServerError, "time data does not match format '%Y-%m-%d %H:%M:%S'", "internal_server_error", "None")
		return
	}
	page, pageSize := 1, 50
	if v := q.Get("page"); v != "" {
		page, _ = strconv.Atoi(v)
	}
	if v := q.Get("page_size"); v != "" {
		pageSize, _ = strconv.Atoi(v)
	}
	if page < 1 || pageSize < 1 || pageSize > 100 {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []any{map[string]any{"msg": "page >= 1, 1 <= page_size <= 100"}}})
		return
	}
	var rows []SpendLog
	for _, l := range s.logs {
		if st := l.StartTime.UTC(); st.Before(start) || st.After(end) {
			continue
		}
		if t := q.Get("team_id"); t != "" && l.TeamID != t {
			continue
		}
		rows = append(rows, l)
	}
	slices.SortStableFunc(rows, func(a, b SpendLog) int { return b.StartTime.Compare(a.StartTime) })
	total := len(rows)
	from := min((page-1)*pageSize, total)
	to := min(from+pageSize, total)
	data := make([]map[string]any, 0, to-from)
	for _, l := range rows[from:to] {
		data = append(data, logJSON(l))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"data": data, "total": total, "page": page, "page_size": pageSize,
		"total_pages": (total + pageSize - 1) / pageSize,
	})
}

func logJSON(l SpendLog) map[string]any {
	opt := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return map[string]any{
		"request_id":          l.RequestID,
		"call_type":           "anthropic_messages",
		"api_key":             hash(l.RequestID),
		"spend":               l.Spend,
		"total_tokens":        l.TotalTokens,
		"prompt_tokens":       l.PromptTokens,
		"completion_tokens":   l.CompletionTokens,
		"startTime":           pyTime(l.StartTime),
		"endTime":             pyTime(l.EndTime),
		"completionStartTime": pyTime(l.StartTime),
		"model":               l.Model,
		"model_id":            "",
		"model_group":         opt(l.ModelGroup),
		"custom_llm_provider": opt(l.Provider),
		"api_base":            "https://api.anthropic.com/v1/messages",
		"user":                opt(l.User),
		"team_id":             opt(l.TeamID),
		"end_user":            opt(l.EndUser),
		"status":              l.Status,
		"cache_hit":           "False",
		"cache_key":           "Cache OFF",
		"request_tags":        []any{},
		"metadata": map[string]any{
			"user_api_key_alias":   opt(l.KeyAlias),
			"user_api_key_user_id": opt(l.User),
			"user_api_key_team_id": opt(l.TeamID),
			"status":               l.Status,
			"usage_object": map[string]any{
				"prompt_tokens": l.PromptTokens, "completion_tokens": l.CompletionTokens, "total_tokens": l.TotalTokens,
				"cache_read_input_tokens": l.CacheReadTokens, "cache_creation_input_tokens": l.CacheWriteTokens,
			},
		},
	}
}

// pyTime formats like Python's datetime.isoformat() of an aware UTC time.
func pyTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000-07:00") }

func writeErr(w http.ResponseWriter, status int, msg, typ, param string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": param, "code": strconv.Itoa(status)}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func strs(v []any) []string {
	out := make([]string, 0, len(v))
	for _, x := range v {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func newKey() string { return "sk-" + newID() }

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}
