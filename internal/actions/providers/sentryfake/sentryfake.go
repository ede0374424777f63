// Package sentryfake is an in-process Sentry REST API for tests.
//
// It speaks Sentry's wire format under /api/0 with `Authorization: Bearer
// <token>`: a missing or unknown token is HTTP 401 {"detail": …}, a token
// without the scope an endpoint needs is 403, an unknown resource 404
// {"detail": "The requested resource does not exist"} and an invalid update
// 400 with field errors ({"status": ["…"]}), as Sentry answers. Paths are
// routed on their escaped form, segment by segment, like Sentry's router: an
// id containing an escaped "/" stays one segment (and matches nothing).
//
// Endpoints: GET /projects/{org}/{project}/issues/?query=…, GET
// /issues/{id}/, PUT /issues/{id}/ {status, assignedTo}, GET
// /issues/{id}/events/ and GET /issues/{id}/events/{event_id|latest|oldest|recommended}/.
// The query understands is:unresolved|resolved|ignored, level:… and free
// text matched against the title and culprit (no query means
// is:unresolved, as in Sentry).
//
// It keeps state (updates are visible to later reads), records every
// request (Requests, Writes) and can be told to fail (FailNext) or hang
// until the client gives up (Hang).
package sentryfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// Scopes a token gets when AddToken is given none.
var DefaultScopes = []string{"org:read", "project:read", "event:read", "event:write"}

// Member is an organization member issues can be assigned to.
type Member struct {
	ID, Username, Name, Email string
}

// Issue is an issue (a "group") as the fake stores it.
type Issue struct {
	ID, ShortID, Title, Culprit, Level string
	// Status is unresolved, resolved or ignored; SubStatus records
	// resolvedInNextRelease.
	Status, StatusDetail string
	// AssignedTo is "user:<id>", "team:<id>" or "".
	AssignedTo string
	Org        string
	Project    string
	Count      int
	FirstSeen  time.Time
	LastSeen   time.Time
}

// Event is one occurrence of an issue.
type Event struct {
	ID        string // 32 hex characters
	IssueID   string
	Message   string
	Platform  string
	Tags      map[string]string
	Exception string // exception type, e.g. TypeError
	Frames    []string
	Created   time.Time
}

// Request is one request that reached the fake.
type Request struct {
	Method string
	// Path is the decoded path, RawPath the escaped one as sent.
	Path, RawPath string
	RawQuery      string
	Authorization string
	Body          []byte
}

// Server is the fake. Create it with New.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	tokens   map[string][]string // token → scopes
	projects map[string]bool     // "org/project"
	members  map[string][]Member // org → members
	issues   []*Issue
	events   []*Event
	seq      int
	requests []Request

	// Faults: FailNext answers HTTP status with Sentry's error body, before
	// authentication; Hang holds requests until released.
	fakekit.Faults
}

// New starts a fake closed when the test ends.
func New(t fakekit.TB) *Server {
	s := &Server{tokens: map[string][]string{}, projects: map[string]bool{}, members: map[string][]Member{}, seq: 4504312000}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.Release()
		s.srv.Close()
	})
	return s
}

// URL is the API base to configure (SENTRY_API_URL), ending in /api/0.
func (s *Server) URL() string { return s.srv.URL + "/api/0" }

// AddToken makes token valid with scopes (DefaultScopes when none).
func (s *Server) AddToken(token string, scopes ...string) {
	if len(scopes) == 0 {
		scopes = DefaultScopes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = slices.Clone(scopes)
}

// AddProject makes org/project exist.
func (s *Server) AddProject(org, project string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.projects[org+"/"+project] = true
}

// AddMember adds an organization member.
func (s *Server) AddMember(org string, m Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[org] = append(s.members[org], m)
}

// AddIssue stores an issue of an existing project, filling ID, ShortID,
// Status, Level and times when empty, and returns it.
func (s *Server) AddIssue(in Issue) Issue {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if in.ID == "" {
		in.ID = strconv.Itoa(s.seq)
	}
	if in.ShortID == "" {
		n := 1
		for _, is := range s.issues {
			if is.Org == in.Org && is.Project == in.Project {
				n++
			}
		}
		in.ShortID = fmt.Sprintf("%s-%d", strings.ToUpper(in.Project), n)
	}
	if in.Status == "" {
		in.Status = "unresolved"
	}
	if in.Level == "" {
		in.Level = "error"
	}
	if in.FirstSeen.IsZero() {
		in.FirstSeen = time.Now().UTC().Add(-time.Hour)
	}
	if in.LastSeen.IsZero() {
		in.LastSeen = time.Now().UTC()
	}
	is := in
	s.issues = append(s.issues, &is)
	return is
}

// AddEvent stores an event of an issue, filling ID and Created when empty.
func (s *Server) AddEvent(ev Event) Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if ev.ID == "" {
		ev.ID = fmt.Sprintf("%032x", s.seq)
	}
	if ev.Created.IsZero() {
		ev.Created = time.Now().UTC().Add(time.Duration(len(s.events)) * time.Second)
	}
	e := ev
	s.events = append(s.events, &e)
	if is := s.issue(ev.IssueID); is != nil {
		is.Count++
	}
	return e
}

// Issue returns an issue by id.
func (s *Server) Issue(id string) (Issue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if is := s.issue(id); is != nil {
		return *is, true
	}
	return Issue{}, false
}

// Requests returns every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Writes returns the received requests that were not GETs, in order.
func (s *Server) Writes() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Method != http.MethodGet {
			out = append(out, r)
		}
	}
	return out
}

// --- serving -----------------------------------------------------------------

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func detail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"detail": msg})
}

func notFound(w http.ResponseWriter) {
	detail(w, http.StatusNotFound, "The requested resource does not exist")
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	rec := Request{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		Authorization: r.Header.Get("Authorization"), Body: body}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	if !s.Wait(r.Context()) {
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if status, fail := s.Next(); fail {
		detail(w, status, "Internal Error")
		return
	}
	rest, ok := strings.CutPrefix(rec.RawPath, "/api/0/")
	if !ok || !strings.HasSuffix(rest, "/") {
		notFound(w)
		return
	}
	tok, bearer := strings.CutPrefix(rec.Authorization, "Bearer ")
	scopes, known := s.tokens[tok]
	switch {
	case rec.Authorization == "":
		detail(w, http.StatusUnauthorized, "Authentication credentials were not provided.")
		return
	case !bearer || !known:
		detail(w, http.StatusUnauthorized, "Invalid token")
		return
	}
	var parts []string
	for _, p := range strings.Split(strings.TrimSuffix(rest, "/"), "/") {
		seg, err := url.PathUnescape(p)
		if err != nil {
			notFound(w)
			return
		}
		parts = append(parts, seg)
	}
	need := "event:read"
	if r.Method != http.MethodGet {
		need = "event:write"
	}
	if !slices.Contains(scopes, need) && !slices.Contains(scopes, "event:admin") {
		detail(w, http.StatusForbidden, "You do not have permission to perform this action.")
		return
	}
	switch {
	case len(parts) == 4 && parts[0] == "projects" && parts[3] == "issues" && r.Method == http.MethodGet:
		s.listIssues(w, r, parts[1], parts[2])
	case len(parts) == 2 && parts[0] == "issues" && r.Method == http.MethodGet:
		if is := s.issue(parts[1]); is != nil {
			writeJSON(w, http.StatusOK, s.issueJSON(is))
			return
		}
		notFound(w)
	case len(parts) == 2 && parts[0] == "issues" && r.Method == http.MethodPut:
		s.updateIssue(w, parts[1], body)
	case len(parts) == 3 && parts[0] == "issues" && parts[2] == "events" && r.Method == http.MethodGet:
		if s.issue(parts[1]) == nil {
			notFound(w)
			return
		}
		out := []any{}
		evs := s.eventsOf(parts[1])
		for i := len(evs) - 1; i >= 0; i-- {
			out = append(out, s.eventJSON(evs[i], false))
		}
		writeJSON(w, http.StatusOK, out)
	case len(parts) == 4 && parts[0] == "issues" && parts[2] == "events" && r.Method == http.MethodGet:
		if s.issue(parts[1]) == nil {
			notFound(w)
			return
		}
		evs := s.eventsOf(parts[1])
		var ev *Event
		switch parts[3] {
		case "latest", "recommended":
			if len(evs) > 0 {
				ev = evs[len(evs)-1]
			}
		case "oldest":
			if len(evs) > 0 {
				ev = evs[0]
			}
		default:
			for _, e := range evs {
				if e.ID == parts[3] {
					ev = e
				}
			}
		}
		if ev == nil {
			notFound(w)
			return
		}
		writeJSON(w, http.StatusOK, s.eventJSON(ev, true))
	case len(parts) >= 1 && (parts[0] == "issues" || parts[0] == "projects") && r.Method != http.MethodGet && r.Method != http.MethodPut:
		detail(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method %q not allowed.", r.Method))
	default:
		notFound(w)
	}
}

func (s *Server) listIssues(w http.ResponseWriter, r *http.Request, org, project string) {
	if !s.projects[org+"/"+project] {
		notFound(w)
		return
	}
	q := "is:unresolved"
	if vals, given := r.URL.Query()["query"]; given {
		q = vals[0]
	}
	out := []any{}
	for i := len(s.issues) - 1; i >= 0; i-- {
		is := s.issues[i]
		if is.Org == org && is.Project == project && matches(is, q) {
			out = append(out, s.issueJSON(is))
		}
	}
	base := "http://" + r.Host + r.URL.Path
	w.Header().Set("Link", fmt.Sprintf(`<%s?cursor=0:0:1>; rel="previous"; results="false"; cursor="0:0:1", <%s?cursor=0:100:0>; rel="next"; results="false"; cursor="0:100:0"`, base, base))
	writeJSON(w, http.StatusOK, out)
}

// matches applies the small subset of Sentry's search syntax the fake knows.
func matches(is *Issue, q string) bool {
	for _, tok := range strings.Fields(q) {
		k, v, isFilter := strings.Cut(tok, ":")
		switch {
		case isFilter && k == "is":
			if is.Status != v {
				return false
			}
		case isFilter && k == "level":
			if is.Level != v {
				return false
			}
		default:
			hay := strings.ToLower(is.Title + " " + is.Culprit)
			if !strings.Contains(hay, strings.ToLower(tok)) {
				return false
			}
		}
	}
	return true
}

func (s *Server) updateIssue(w http.ResponseWriter, id string, body []byte) {
	is := s.issue(id)
	if is == nil {
		notFound(w)
		return
	}
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		detail(w, http.StatusBadRequest, "JSON parse error")
		return
	}
	status, hasStatus := in["status"]
	if hasStatus {
		st, _ := status.(string)
		switch st {
		case "resolved", "unresolved", "ignored":
		case "resolvedInNextRelease":
		default:
			writeJSON(w, http.StatusBadRequest, map[string]any{"status": []string{fmt.Sprintf("%q is not a valid choice.", fmt.Sprint(status))}})
			return
		}
	}
	assignee, hasAssignee := in["assignedTo"]
	var actor string
	if hasAssignee {
		a, _ := assignee.(string)
		var ok bool
		if actor, ok = s.resolveActor(is.Org, a); !ok {
			writeJSON(w, http.StatusBadRequest, map[string]any{"assignedTo": []string{"Unknown actor input"}})
			return
		}
	}
	if hasStatus {
		st := status.(string)
		is.StatusDetail = ""
		if st == "resolvedInNextRelease" {
			st, is.StatusDetail = "resolved", "inNextRelease"
		}
		is.Status = st
	}
	if hasAssignee {
		is.AssignedTo = actor
	}
	writeJSON(w, http.StatusOK, s.issueJSON(is))
}

// resolveActor maps an assignedTo value to "user:<id>" / "team:<id>" / "".
func (s *Server) resolveActor(org, a string) (string, bool) {
	if a == "" {
		return "", true
	}
	if id, ok := strings.CutPrefix(a, "team:"); ok && id != "" {
		return a, true
	}
	id, isUser := strings.CutPrefix(a, "user:")
	for _, m := range s.members[org] {
		if (isUser && m.ID == id) || (!isUser && (m.Username == a || strings.EqualFold(m.Email, a))) {
			return "user:" + m.ID, true
		}
	}
	return "", false
}

func (s *Server) issue(id string) *Issue {
	for _, is := range s.issues {
		if is.ID == id {
			return is
		}
	}
	return nil
}

func (s *Server) eventsOf(issueID string) []*Event {
	var out []*Event
	for _, e := range s.events {
		if e.IssueID == issueID {
			out = append(out, e)
		}
	}
	return out
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func (s *Server) issueJSON(is *Issue) map[string]any {
	var assigned any
	if typ, id, ok := strings.Cut(is.AssignedTo, ":"); ok {
		a := map[string]any{"type": typ, "id": id, "name": id}
		for _, m := range s.members[is.Org] {
			if typ == "user" && m.ID == id {
				a["name"], a["email"] = m.Name, m.Email
			}
		}
		assigned = a
	}
	statusDetails := map[string]any{}
	if is.StatusDetail == "inNextRelease" {
		statusDetails["inNextRelease"] = true
	}
	return map[string]any{
		"id": is.ID, "shortId": is.ShortID, "title": is.Title, "culprit": is.Culprit, "level": is.Level,
		"status": is.Status, "statusDetails": statusDetails, "assignedTo": assigned,
		"permalink": fmt.Sprintf("https://%s.sentry.io/issues/%s/", is.Org, is.ID),
		"project":   map[string]any{"id": "1", "slug": is.Project, "name": is.Project},
		"type":      "error", "metadata": map[string]any{"title": is.Title},
		"count": strconv.Itoa(is.Count), "userCount": 0, "numComments": 0,
		"firstSeen": ts(is.FirstSeen), "lastSeen": ts(is.LastSeen), "isPublic": false, "hasSeen": false,
	}
}

func (s *Server) eventJSON(e *Event, full bool) map[string]any {
	tags := []any{}
	keys := make([]string, 0, len(e.Tags))
	for k := range e.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		tags = append(tags, map[string]any{"key": k, "value": e.Tags[k]})
	}
	out := map[string]any{"id": e.ID, "eventID": e.ID, "groupID": e.IssueID, "title": e.Message,
		"message": e.Message, "platform": e.Platform, "dateCreated": ts(e.Created), "tags": tags, "user": nil}
	if full {
		frames := []any{}
		for _, f := range e.Frames {
			frames = append(frames, map[string]any{"function": f, "inApp": true})
		}
		out["entries"] = []any{map[string]any{"type": "exception", "data": map[string]any{"values": []any{
			map[string]any{"type": e.Exception, "value": e.Message, "stacktrace": map[string]any{"frames": frames}}}}}}
		out["context"] = map[string]any{}
	}
	return out
}
