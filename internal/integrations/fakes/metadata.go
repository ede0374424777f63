package fakes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// SentryProject is a project with its environments.
type SentryProject struct {
	Slug, Name, Platform string
	Environments         []string
}

// Sentry fakes the Sentry REST API under /api/0 (SENTRY_API_URL is URL +
// "/api/0"): organizations, an organization's projects (cursor-paginated
// with Link headers, PageSize per page) and a project's environments. The
// bearer token must be Token.
type Sentry struct {
	URL      string // the API base, ending in /api/0
	token    string
	PageSize int

	mu       sync.Mutex
	orgs     []string
	projects map[string][]SentryProject
	fail     int
	calls    int
}

// NewSentry starts the fake accepting token.
func NewSentry(t fakekit.TB, token string) *Sentry {
	s := &Sentry{token: token, PageSize: 100, projects: map[string][]SentryProject{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/api/0"
	return s
}

// AddOrg adds an organization with projects.
func (s *Sentry) AddOrg(slug string, projects ...SentryProject) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.orgs = append(s.orgs, slug)
	s.projects[slug] = projects
}

// SetToken changes the accepted token.
func (s *Sentry) SetToken(tok string) { s.mu.Lock(); s.token = tok; s.mu.Unlock() }

// Fail makes every call answer status (0: normal again).
func (s *Sentry) Fail(status int) { s.mu.Lock(); s.fail = status; s.mu.Unlock() }

// Calls counts requests.
func (s *Sentry) Calls() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

func (s *Sentry) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"detail": "Method not allowed"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"detail": "Invalid token"})
		return
	}
	if s.fail != 0 {
		writeJSON(w, s.fail, map[string]any{"detail": "Internal Error"})
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/api/0"), "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "organizations":
		out := []map[string]any{}
		for i, o := range s.orgs {
			out = append(out, map[string]any{"id": strconv.Itoa(i + 1), "slug": o, "name": strings.ToUpper(o[:1]) + o[1:], "status": map[string]any{"id": "active"}})
		}
		writeJSON(w, http.StatusOK, out)
	case len(parts) == 3 && parts[0] == "organizations" && parts[2] == "projects":
		ps, ok := s.projects[parts[1]]
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]any{"detail": "The requested resource does not exist"})
			return
		}
		start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		end := min(start+s.PageSize, len(ps))
		out := []map[string]any{}
		for i := start; i < end; i++ {
			p := ps[i]
			out = append(out, map[string]any{"id": strconv.Itoa(100 + i), "slug": p.Slug, "name": p.Name, "platform": p.Platform, "isMember": true})
		}
		base := "http://" + r.Host + r.URL.Path
		more := end < len(ps)
		w.Header().Set("Link", fmt.Sprintf(`<%s?cursor=%d>; rel="previous"; results="false"; cursor="%d", <%s?cursor=%d>; rel="next"; results="%t"; cursor="%d"`,
			base, start, start, base, end, more, end))
		writeJSON(w, http.StatusOK, out)
	case len(parts) == 4 && parts[0] == "projects" && parts[3] == "environments":
		for _, p := range s.projects[parts[1]] {
			if p.Slug == parts[2] {
				out := []map[string]any{}
				for i, e := range p.Environments {
					out = append(out, map[string]any{"id": strconv.Itoa(i + 1), "name": e, "isHidden": false})
				}
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "The requested resource does not exist"})
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "The requested resource does not exist"})
	}
}

// LinearData is the workspace the fake serves.
type LinearData struct {
	Teams    []map[string]any // id, name, key
	States   []map[string]any // id, name, type, color, team_id
	Labels   []map[string]any // id, name, color, team_id ("" for workspace labels)
	Users    []map[string]any // id, name, displayName, email, active
	Projects []map[string]any // id, name, state
}

// Linear fakes Linear's GraphQL endpoint (POST /graphql, JSON
// {query, variables}) for the metadata query: it checks the OAuth bearer
// token, that the document asks for the five connections, and applies the
// team filter when the $teamId variable is given. Authentication failures
// are HTTP 400 with an AUTHENTICATION_ERROR, as Linear answers.
type Linear struct {
	URL   string // the GraphQL endpoint
	token string
	Data  LinearData

	mu      sync.Mutex
	fail    int
	calls   int
	queries []string
}

// NewLinear starts the fake accepting token.
func NewLinear(t fakekit.TB, token string, data LinearData) *Linear {
	l := &Linear{token: token, Data: data}
	srv := httptest.NewServer(http.HandlerFunc(l.serve))
	t.Cleanup(srv.Close)
	l.URL = srv.URL + "/graphql"
	return l
}

// SetToken changes the accepted token.
func (l *Linear) SetToken(tok string) { l.mu.Lock(); l.token = tok; l.mu.Unlock() }

// Fail makes every call answer status (0: normal again).
func (l *Linear) Fail(status int) { l.mu.Lock(); l.fail = status; l.mu.Unlock() }

// Calls counts requests.
func (l *Linear) Calls() int { l.mu.Lock(); defer l.mu.Unlock(); return l.calls }

func linearErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"errors": []any{map[string]any{"message": msg, "extensions": map[string]any{"code": code, "type": code}}}})
}

func (l *Linear) serve(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if r.Method != http.MethodPost || r.URL.Path != "/graphql" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		linearErr(w, http.StatusBadRequest, "BAD_REQUEST", "POST application/json to /graphql")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+l.token {
		linearErr(w, http.StatusBadRequest, "AUTHENTICATION_ERROR", "Authentication required, not authenticated")
		return
	}
	if l.fail != 0 {
		linearErr(w, l.fail, "INTERNAL_SERVER_ERROR", "internal error")
		return
	}
	var req struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !strings.HasPrefix(strings.TrimSpace(req.Query), "query") {
		linearErr(w, http.StatusBadRequest, "GRAPHQL_PARSE_FAILED", "Syntax Error")
		return
	}
	for _, f := range []string{"teams(", "workflowStates(", "issueLabels(", "users(", "projects(", "nodes"} {
		if !strings.Contains(req.Query, f) {
			linearErr(w, http.StatusBadRequest, "GRAPHQL_VALIDATION_FAILED", "query lacks "+f)
			return
		}
	}
	teamID, _ := req.Variables["teamId"].(string)
	if teamID != "" && (!strings.Contains(req.Query, "$teamId: ID!") || !strings.Contains(req.Query, "eq: $teamId")) {
		linearErr(w, http.StatusBadRequest, "GRAPHQL_VALIDATION_FAILED", "variable $teamId is not declared or used")
		return
	}
	l.queries = append(l.queries, req.Query)
	withTeam := func(rows []map[string]any) []any {
		out := []any{}
		for _, row := range rows {
			tid, _ := row["team_id"].(string)
			if teamID != "" && tid != teamID {
				continue
			}
			n := map[string]any{}
			for k, v := range row {
				if k != "team_id" {
					n[k] = v
				}
			}
			if tid != "" {
				n["team"] = map[string]any{"id": tid}
			} else {
				n["team"] = nil
			}
			out = append(out, n)
		}
		return out
	}
	nodes := func(rows []map[string]any) map[string]any {
		out := []any{}
		for _, r := range rows {
			out = append(out, r)
		}
		return map[string]any{"nodes": out}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{
		"teams":          nodes(l.Data.Teams),
		"workflowStates": map[string]any{"nodes": withTeam(l.Data.States)},
		"issueLabels":    map[string]any{"nodes": withTeam(l.Data.Labels)},
		"users":          nodes(l.Data.Users),
		"projects":       nodes(l.Data.Projects),
	}})
}
