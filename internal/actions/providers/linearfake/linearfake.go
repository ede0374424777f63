// Package linearfake is an in-process Linear GraphQL API for tests.
//
// It speaks Linear's wire format: POST /graphql with a JSON body {query,
// variables, operationName} and `Authorization: Bearer <oauth token>` (or a
// raw personal API key, lin_api_…); answers are {"data": {…}} or
// {"errors": [{message, extensions: {code, type, userPresentableMessage}}]}.
// A missing or unknown credential is HTTP 400 with AUTHENTICATION_ERROR, a
// document that does not match Linear's schema (an undeclared or mistyped
// variable, an input field the input type does not have) is HTTP 400 with
// GRAPHQL_VALIDATION_FAILED, and an entity that does not exist is an
// INVALID_INPUT error beside "data": null, as Linear answers.
//
// The fake does not parse GraphQL in full: it recognises the root field of
// the operation (issues, issue, issueCreate, issueUpdate, commentCreate),
// checks that the variables the root takes are declared with Linear's type
// names and passed to the field, and answers with the whole object (every
// field the provider source selects, and a few more).
//
// It keeps state — teams with their workflow states, users, issues,
// comments — so created issues are listable and comments attach; it records
// every request (Requests, Mutations), and it can be told to fail (FailNext)
// or to hang until the client gives up (Hang).
package linearfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// Team is a Linear team. AddTeam gives it three workflow states with ids
// "<team id>-backlog" (the default of new issues), "<team id>-todo" and
// "<team id>-done".
type Team struct {
	ID, Key, Name string
}

// State is a workflow state.
type State struct {
	ID, Name, Type, TeamID string
}

// User is a workspace member.
type User struct {
	ID, Name, Email string
}

// Comment is a comment on an issue.
type Comment struct {
	ID, Body, UserID string
	CreatedAt        time.Time
}

// Issue is an issue as the fake stores it.
type Issue struct {
	ID, Identifier, Title, Description string
	Priority                           int
	TeamID, StateID, AssigneeID        string
	ProjectID                          string
	LabelIDs                           []string
	Comments                           []Comment
	CreatedAt, UpdatedAt               time.Time
}

// Request is one request that reached the fake, accepted or not.
type Request struct {
	Method, Path  string
	Authorization string
	ContentType   string
	// Query, OperationName and Variables are the decoded JSON body.
	Query         string
	OperationName string
	Variables     map[string]any
	// Root is the operation's root field ("issueCreate"), "" when none was
	// recognised; Mutation tells whether the document is a mutation.
	Root     string
	Mutation bool
}

// Server is the fake. Create it with New.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	oauth    map[string]string // token → user id
	apiKeys  map[string]string
	teams    map[string]Team
	states   map[string]State
	users    map[string]User
	issues   []*Issue // creation order
	counters map[string]int
	seq      int
	requests []Request

	// Faults: FailNext answers HTTP status with an INTERNAL_SERVER_ERROR
	// body, before authentication; Hang holds requests until released.
	fakekit.Faults
}

// New starts a fake closed when the test ends.
func New(t fakekit.TB) *Server {
	s := &Server{oauth: map[string]string{}, apiKeys: map[string]string{}, teams: map[string]Team{},
		states: map[string]State{}, users: map[string]User{}, counters: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.Release()
		s.srv.Close()
	})
	return s
}

// URL is the GraphQL endpoint to configure (LINEAR_API_URL).
func (s *Server) URL() string { return s.srv.URL + "/graphql" }

// AddToken makes token a valid OAuth access token (sent as Bearer) acting
// as userID.
func (s *Server) AddToken(token, userID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oauth[token] = userID
}

// AddAPIKey makes key a valid personal API key (sent raw) acting as userID.
func (s *Server) AddAPIKey(key, userID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKeys[key] = userID
}

// AddTeam adds a team and its three workflow states.
func (s *Server) AddTeam(t Team) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.teams[t.ID] = t
	for _, st := range []State{{"-backlog", "Backlog", "backlog", ""}, {"-todo", "Todo", "unstarted", ""}, {"-done", "Done", "completed", ""}} {
		s.states[t.ID+st.ID] = State{ID: t.ID + st.ID, Name: st.Name, Type: st.Type, TeamID: t.ID}
	}
}

// AddUser adds a workspace member.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// AddIssue stores an issue (its team must exist) and returns it with ID,
// Identifier, StateID and timestamps filled in when empty.
func (s *Server) AddIssue(in Issue) Issue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.create(in)
}

// Issue returns an issue by id or identifier.
func (s *Server) Issue(idOrIdentifier string) (Issue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if is := s.find(idOrIdentifier); is != nil {
		return clone(is), true
	}
	return Issue{}, false
}

// Issues returns every issue, in creation order.
func (s *Server) Issues() []Issue {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Issue, 0, len(s.issues))
	for _, is := range s.issues {
		out = append(out, clone(is))
	}
	return out
}

// Requests returns every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Mutations returns the received requests whose document is a mutation
// (accepted or refused), in order.
func (s *Server) Mutations() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if r.Mutation {
			out = append(out, r)
		}
	}
	return out
}

// MutationCount is len(Mutations()).
func (s *Server) MutationCount() int { return len(s.Mutations()) }

// --- serving -----------------------------------------------------------------

type gqlError struct {
	status  int
	code    string
	typ     string
	message string
	user    string
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (e *gqlError) write(w http.ResponseWriter) {
	ext := map[string]any{"code": e.code, "type": e.typ, "userError": e.status < 500}
	if e.user != "" {
		ext["userPresentableMessage"] = e.user
	}
	body := map[string]any{"errors": []any{map[string]any{"message": e.message, "extensions": ext}}}
	if e.status == http.StatusOK {
		body["data"] = nil
	}
	writeJSON(w, e.status, body)
}

func validation(msg string) *gqlError {
	return &gqlError{status: http.StatusBadRequest, code: "GRAPHQL_VALIDATION_FAILED", typ: "graphql error", message: msg}
}

func invalidInput(msg, user string) *gqlError {
	return &gqlError{status: http.StatusOK, code: "INVALID_INPUT", typ: "invalid input", message: msg, user: user}
}

func notFound(entity string) *gqlError {
	return invalidInput("Entity not found: "+entity, "Could not find referenced "+entity+".")
}

var (
	rootRE = regexp.MustCompile(`^\s*(\w+)\s*[({]`)
	opRE   = regexp.MustCompile(`^\s*(query|mutation|subscription)\b`)
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var body struct {
		Query         string         `json:"query"`
		Variables     map[string]any `json:"variables"`
		OperationName string         `json:"operationName"`
	}
	bodyErr := json.Unmarshal(raw, &body)
	rec := Request{Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization"),
		ContentType: r.Header.Get("Content-Type"), Query: body.Query, OperationName: body.OperationName,
		Variables: body.Variables}
	if m := opRE.FindStringSubmatch(body.Query); m != nil {
		rec.Mutation = m[1] == "mutation"
	}
	if i := strings.Index(body.Query, "{"); i >= 0 {
		if m := rootRE.FindStringSubmatch(body.Query[i+1:]); m != nil {
			rec.Root = m[1]
		}
	}

	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	if !s.Wait(r.Context()) {
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if status, fail := s.Next(); fail {
		(&gqlError{status: status, code: "INTERNAL_SERVER_ERROR", typ: "internal error", message: "Internal server error"}).write(w)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/graphql" {
		http.NotFound(w, r)
		return
	}
	viewer, ok := s.authenticate(rec.Authorization)
	if !ok {
		(&gqlError{status: http.StatusBadRequest, code: "AUTHENTICATION_ERROR", typ: "authentication error",
			message: "Authentication required, not authenticated", user: "You need to authenticate to access this operation."}).write(w)
		return
	}
	ct := rec.ContentType
	if !strings.HasPrefix(ct, "application/json") {
		(&gqlError{status: http.StatusBadRequest, code: "BAD_REQUEST", typ: "graphql error", message: "POST body must be application/json"}).write(w)
		return
	}
	if bodyErr != nil || strings.TrimSpace(body.Query) == "" {
		(&gqlError{status: http.StatusBadRequest, code: "GRAPHQL_PARSE_FAILED", typ: "graphql error", message: "Must provide query string."}).write(w)
		return
	}
	if body.Variables == nil {
		body.Variables = map[string]any{}
	}
	data, gerr := s.execute(rec, body.Variables, viewer)
	if gerr != nil {
		gerr.write(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
}

func (s *Server) authenticate(h string) (string, bool) {
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		u, known := s.oauth[tok]
		return u, known
	}
	u, known := s.apiKeys[h]
	return u, h != "" && known
}

// arg is one argument of a root field: its variable, Linear's type and
// whether the type is non-null.
type arg struct {
	name, typ string
	required  bool
}

var roots = map[string]struct {
	mutation bool
	args     []arg
}{
	"issues":        {false, []arg{{"first", "Int", false}, {"after", "String", false}, {"filter", "IssueFilter", false}}},
	"issue":         {false, []arg{{"id", "String", true}}},
	"issueCreate":   {true, []arg{{"input", "IssueCreateInput", true}}},
	"issueUpdate":   {true, []arg{{"id", "String", true}, {"input", "IssueUpdateInput", true}}},
	"commentCreate": {true, []arg{{"input", "CommentCreateInput", true}}},
}

// checkDocument verifies the variables the root field takes are declared
// with Linear's types, passed to the field, and given when non-null.
func checkDocument(rec Request, vars map[string]any) *gqlError {
	def, ok := roots[rec.Root]
	if !ok {
		return validation(fmt.Sprintf("Cannot query field %q on type %q.", rec.Root, map[bool]string{true: "Mutation", false: "Query"}[rec.Mutation]))
	}
	if def.mutation != rec.Mutation {
		return validation(fmt.Sprintf("Cannot query field %q on this operation type.", rec.Root))
	}
	header := rec.Query[:strings.Index(rec.Query, "{")]
	for name := range vars {
		if !strings.Contains(header, "$"+name) {
			return validation(fmt.Sprintf("Variable \"$%s\" is not defined by operation.", name))
		}
	}
	for _, a := range def.args {
		decl := regexp.MustCompile(`\$` + a.name + `\s*:\s*(\w+)(!?)`).FindStringSubmatch(header)
		if decl == nil {
			if a.required {
				return validation(fmt.Sprintf("Field %q argument %q of type \"%s!\" is required, but it was not provided.", rec.Root, a.name, a.typ))
			}
			continue
		}
		if decl[1] != a.typ {
			return validation(fmt.Sprintf("Variable \"$%s\" of type \"%s\" used in position expecting type \"%s\".", a.name, decl[1], a.typ))
		}
		if !regexp.MustCompile(`\b` + a.name + `\s*:\s*\$` + a.name + `\b`).MatchString(rec.Query) {
			return validation(fmt.Sprintf("Variable \"$%s\" is never used in operation.", a.name))
		}
		if _, given := vars[a.name]; !given && (a.required || decl[2] == "!") {
			return validation(fmt.Sprintf("Variable \"$%s\" of required type \"%s!\" was not provided.", a.name, a.typ))
		}
	}
	return nil
}

func (s *Server) execute(rec Request, vars map[string]any, viewer string) (map[string]any, *gqlError) {
	if e := checkDocument(rec, vars); e != nil {
		return nil, e
	}
	switch rec.Root {
	case "issues":
		return s.listIssues(vars)
	case "issue":
		is := s.find(str(vars["id"]))
		if is == nil {
			return nil, notFound("Issue")
		}
		return map[string]any{"issue": s.issueJSON(is)}, nil
	case "issueCreate":
		return s.issueCreate(vars)
	case "issueUpdate":
		return s.issueUpdate(vars)
	default: // commentCreate
		return s.commentCreate(vars, viewer)
	}
}

func (s *Server) listIssues(vars map[string]any) (map[string]any, *gqlError) {
	first := 50
	if v, ok := vars["first"]; ok && v != nil {
		f, isNum := v.(float64)
		if !isNum || f != float64(int(f)) {
			return nil, validation(`Variable "$first" got invalid value; Int cannot represent non-integer value`)
		}
		first = int(f)
	}
	if first < 0 || first > 250 {
		return nil, invalidInput("Argument Validation Error", "first must be between 0 and 250.")
	}
	var teamID, projectID string
	if f, ok := vars["filter"].(map[string]any); ok {
		for k, v := range f {
			eq, ok := idEq(v)
			switch {
			case k != "team" && k != "project":
				return nil, validation(fmt.Sprintf(`Variable "$filter" got invalid value; Field %q is not defined by type "IssueFilter".`, k))
			case !ok:
				return nil, validation(fmt.Sprintf(`Variable "$filter" got invalid value at "filter.%s"`, k))
			case k == "team":
				teamID = eq
			default:
				projectID = eq
			}
		}
	}
	// Newest first; the cursor is the id of the last issue of a page.
	var matched []*Issue
	for i := len(s.issues) - 1; i >= 0; i-- {
		is := s.issues[i]
		if (teamID == "" || is.TeamID == teamID) && (projectID == "" || is.ProjectID == projectID) {
			matched = append(matched, is)
		}
	}
	start := 0
	if after := str(vars["after"]); after != "" {
		start = -1
		for i, is := range matched {
			if is.ID == after {
				start = i + 1
			}
		}
		if start < 0 {
			return nil, invalidInput("Argument Validation Error", "Invalid cursor.")
		}
	}
	end := min(start+first, len(matched))
	nodes := []any{}
	for _, is := range matched[start:end] {
		nodes = append(nodes, s.issueJSON(is))
	}
	var endCursor any
	if end > start {
		endCursor = matched[end-1].ID
	}
	return map[string]any{"issues": map[string]any{"nodes": nodes, "pageInfo": map[string]any{
		"hasNextPage": end < len(matched), "hasPreviousPage": start > 0, "endCursor": endCursor}}}, nil
}

var inputFields = map[string][]string{
	"IssueCreateInput":   {"teamId", "title", "description", "assigneeId", "stateId", "priority", "labelIds", "projectId", "parentId", "estimate", "dueDate"},
	"IssueUpdateInput":   {"title", "description", "assigneeId", "stateId", "priority", "labelIds", "projectId", "parentId", "estimate", "dueDate", "teamId"},
	"CommentCreateInput": {"issueId", "body", "parentId"},
}

// input checks an input object against its type's fields.
func input(vars map[string]any, typ string) (map[string]any, *gqlError) {
	in, ok := vars["input"].(map[string]any)
	if !ok {
		return nil, validation(fmt.Sprintf(`Variable "$input" got invalid value; Expected type "%s" to be an object.`, typ))
	}
	for k, v := range in {
		if !slices.Contains(inputFields[typ], k) {
			return nil, validation(fmt.Sprintf(`Variable "$input" got invalid value; Field %q is not defined by type %q.`, k, typ))
		}
		switch k {
		case "priority", "estimate":
			if f, isNum := v.(float64); !isNum || f != float64(int(f)) {
				return nil, validation(fmt.Sprintf(`Variable "$input" got invalid value at "input.%s"; Int cannot represent non-integer value`, k))
			}
		case "labelIds":
			items, isList := v.([]any)
			for _, it := range items {
				if _, isStr := it.(string); !isStr {
					isList = false
				}
			}
			if !isList {
				return nil, validation(`Variable "$input" got invalid value at "input.labelIds"; Expected type "[String!]".`)
			}
		default:
			if _, isStr := v.(string); !isStr && v != nil {
				return nil, validation(fmt.Sprintf(`Variable "$input" got invalid value at "input.%s"; String cannot represent a non string value`, k))
			}
		}
	}
	return in, nil
}

func (s *Server) checkRefs(in map[string]any, teamID string) *gqlError {
	if p, ok := in["priority"].(float64); ok && (p < 0 || p > 4) {
		return invalidInput("Argument Validation Error", "priority must not be greater than 4 or less than 0.")
	}
	if st, ok := in["stateId"].(string); ok {
		if state, known := s.states[st]; !known || state.TeamID != teamID {
			return notFound("WorkflowState")
		}
	}
	if a, ok := in["assigneeId"].(string); ok && a != "" {
		if _, known := s.users[a]; !known {
			return notFound("User")
		}
	}
	return nil
}

func (s *Server) issueCreate(vars map[string]any) (map[string]any, *gqlError) {
	in, e := input(vars, "IssueCreateInput")
	if e != nil {
		return nil, e
	}
	teamID := str(in["teamId"])
	if _, ok := s.teams[teamID]; !ok {
		return nil, notFound("Team")
	}
	if strings.TrimSpace(str(in["title"])) == "" {
		return nil, invalidInput("Argument Validation Error", "title should not be empty.")
	}
	if e := s.checkRefs(in, teamID); e != nil {
		return nil, e
	}
	is := Issue{TeamID: teamID}
	apply(&is, in)
	created := s.create(is)
	return map[string]any{"issueCreate": map[string]any{"success": true, "lastSyncId": s.seq, "issue": s.issueJSON(created)}}, nil
}

func (s *Server) issueUpdate(vars map[string]any) (map[string]any, *gqlError) {
	is := s.find(str(vars["id"]))
	in, e := input(vars, "IssueUpdateInput")
	if e != nil {
		return nil, e
	}
	if is == nil {
		return nil, notFound("Issue")
	}
	if e := s.checkRefs(in, is.TeamID); e != nil {
		return nil, e
	}
	apply(is, in)
	s.seq++
	is.UpdatedAt = time.Now().UTC()
	return map[string]any{"issueUpdate": map[string]any{"success": true, "lastSyncId": s.seq, "issue": s.issueJSON(is)}}, nil
}

func (s *Server) commentCreate(vars map[string]any, viewer string) (map[string]any, *gqlError) {
	in, e := input(vars, "CommentCreateInput")
	if e != nil {
		return nil, e
	}
	is := s.find(str(in["issueId"]))
	if is == nil {
		return nil, notFound("Issue")
	}
	if strings.TrimSpace(str(in["body"])) == "" {
		return nil, invalidInput("Argument Validation Error", "body should not be empty.")
	}
	s.seq++
	c := Comment{ID: s.uuid(), Body: str(in["body"]), UserID: viewer, CreatedAt: time.Now().UTC()}
	is.Comments = append(is.Comments, c)
	cj := s.commentJSON(c)
	cj["issue"] = map[string]any{"id": is.ID, "identifier": is.Identifier}
	cj["url"] = issueURL(is) + "#comment-" + c.ID[:8]
	return map[string]any{"commentCreate": map[string]any{"success": true, "lastSyncId": s.seq, "comment": cj}}, nil
}

// apply copies input fields onto an issue.
func apply(is *Issue, in map[string]any) {
	for k, v := range in {
		switch k {
		case "title":
			is.Title = str(v)
		case "description":
			is.Description = str(v)
		case "assigneeId":
			is.AssigneeID = str(v)
		case "stateId":
			is.StateID = str(v)
		case "projectId":
			is.ProjectID = str(v)
		case "priority":
			is.Priority = int(v.(float64))
		case "labelIds":
			is.LabelIDs = nil
			for _, l := range v.([]any) {
				is.LabelIDs = append(is.LabelIDs, l.(string))
			}
		}
	}
}

// create stores an issue; callers hold s.mu.
func (s *Server) create(in Issue) *Issue {
	s.seq++
	team := s.teams[in.TeamID]
	if in.ID == "" {
		in.ID = s.uuid()
	}
	if in.Identifier == "" {
		key := team.Key
		if key == "" {
			key = "ISS"
		}
		s.counters[in.TeamID]++
		in.Identifier = fmt.Sprintf("%s-%d", key, s.counters[in.TeamID])
	}
	if in.StateID == "" {
		if _, ok := s.states[in.TeamID+"-backlog"]; ok {
			in.StateID = in.TeamID + "-backlog"
		}
	}
	now := time.Now().UTC()
	if in.CreatedAt.IsZero() {
		in.CreatedAt = now
	}
	if in.UpdatedAt.IsZero() {
		in.UpdatedAt = in.CreatedAt
	}
	is := &in
	s.issues = append(s.issues, is)
	return is
}

func (s *Server) find(idOrIdentifier string) *Issue {
	for _, is := range s.issues {
		if is.ID == idOrIdentifier || strings.EqualFold(is.Identifier, idOrIdentifier) {
			return is
		}
	}
	return nil
}

func (s *Server) uuid() string {
	s.seq++
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffff, s.seq)
}

var priorityLabels = []string{"No priority", "Urgent", "High", "Medium", "Low"}

func issueURL(is *Issue) string {
	return "https://linear.app/fake/issue/" + is.Identifier
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func (s *Server) issueJSON(is *Issue) map[string]any {
	out := map[string]any{"id": is.ID, "identifier": is.Identifier, "title": is.Title, "description": nil,
		"priority": is.Priority, "url": issueURL(is), "createdAt": ts(is.CreatedAt), "updatedAt": ts(is.UpdatedAt),
		"state": nil, "assignee": nil, "project": nil}
	if is.Priority >= 0 && is.Priority < len(priorityLabels) {
		out["priorityLabel"] = priorityLabels[is.Priority]
	}
	if is.Description != "" {
		out["description"] = is.Description
	}
	if st, ok := s.states[is.StateID]; ok {
		out["state"] = map[string]any{"id": st.ID, "name": st.Name, "type": st.Type}
	}
	if u, ok := s.users[is.AssigneeID]; ok {
		out["assignee"] = map[string]any{"id": u.ID, "name": u.Name, "email": u.Email}
	}
	team := s.teams[is.TeamID]
	out["team"] = map[string]any{"id": team.ID, "key": team.Key, "name": team.Name}
	if is.ProjectID != "" {
		out["project"] = map[string]any{"id": is.ProjectID, "name": is.ProjectID}
	}
	labels := []any{}
	for _, l := range is.LabelIDs {
		labels = append(labels, map[string]any{"id": l, "name": l})
	}
	out["labels"] = map[string]any{"nodes": labels}
	comments := []any{}
	for _, c := range is.Comments {
		comments = append(comments, s.commentJSON(c))
	}
	out["comments"] = map[string]any{"nodes": comments}
	return out
}

func (s *Server) commentJSON(c Comment) map[string]any {
	out := map[string]any{"id": c.ID, "body": c.Body, "createdAt": ts(c.CreatedAt), "user": nil}
	if u, ok := s.users[c.UserID]; ok {
		out["user"] = map[string]any{"id": u.ID, "name": u.Name}
	}
	return out
}

func clone(is *Issue) Issue {
	c := *is
	c.LabelIDs = slices.Clone(is.LabelIDs)
	c.Comments = slices.Clone(is.Comments)
	return c
}

// idEq reads a {id: {eq: "…"}} comparator.
func idEq(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	id, ok := m["id"].(map[string]any)
	if !ok {
		return "", false
	}
	eq, ok := id["eq"].(string)
	return eq, ok
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
