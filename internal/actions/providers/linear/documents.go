package linear

import (
	"encoding/json"

	"github.com/proliferate/proliferate/internal/actions/providers/remote"
)

// The GraphQL documents, as Linear's schema names its fields and input types.
const issueFields = `id identifier title description priority priorityLabel url createdAt updatedAt
  state { id name type } assignee { id name email } team { id key name } project { id name }
  labels { nodes { id name } }`

const (
	listIssuesQuery = `query ListIssues($first: Int!, $after: String, $filter: IssueFilter) {
  issues(first: $first, after: $after, filter: $filter) {
    nodes { ` + issueFields + ` }
    pageInfo { hasNextPage endCursor }
  }
}`
	getIssueQuery = `query GetIssue($id: String!) {
  issue(id: $id) { ` + issueFields + `
    comments { nodes { id body createdAt user { id name } } }
  }
}`
	createIssueMutation = `mutation CreateIssue($input: IssueCreateInput!) {
  issueCreate(input: $input) { success issue { ` + issueFields + ` } }
}`
	updateIssueMutation = `mutation UpdateIssue($id: String!, $input: IssueUpdateInput!) {
  issueUpdate(id: $id, input: $input) { success issue { ` + issueFields + ` } }
}`
	addCommentMutation = `mutation AddComment($input: CommentCreateInput!) {
  commentCreate(input: $input) { success comment { id body url createdAt issue { id identifier } } }
}`
)

// JSON Schemas (draft 2020-12) of the parameters.
const (
	listIssuesSchema = `{"type":"object","additionalProperties":false,"properties":{
"teamId":{"type":"string","minLength":1,"description":"Only issues of this team (id)."},
"projectId":{"type":"string","minLength":1,"description":"Only issues of this project (id)."},
"first":{"type":"integer","minimum":1,"maximum":50,"default":50,"description":"Page size, at most 50."},
"after":{"type":"string","minLength":1,"description":"Cursor: pageInfo.endCursor of the previous page."}}}`
	getIssueSchema = `{"type":"object","additionalProperties":false,"required":["issueId"],"properties":{
"issueId":{"type":"string","minLength":1,"description":"Issue id or identifier (ENG-123)."}}}`
	createIssueSchema = `{"type":"object","additionalProperties":false,"required":["teamId","title"],"properties":{
"teamId":{"type":"string","minLength":1,"description":"Team id."},
"title":{"type":"string","minLength":1},
"description":{"type":"string","description":"Markdown."},
"assigneeId":{"type":"string","minLength":1,"description":"User id."},
"stateId":{"type":"string","minLength":1,"description":"Workflow state id."},
"priority":{"type":"integer","minimum":0,"maximum":4,"description":"0 none, 1 urgent, 2 high, 3 medium, 4 low."},
"labelIds":{"type":"array","items":{"type":"string","minLength":1}},
"projectId":{"type":"string","minLength":1,"description":"Project id."}}}`
	updateIssueSchema = `{"type":"object","additionalProperties":false,"required":["issueId"],"properties":{
"issueId":{"type":"string","minLength":1,"description":"Issue id or identifier (ENG-123)."},
"title":{"type":"string","minLength":1},
"description":{"type":"string","description":"Markdown."},
"assigneeId":{"type":"string","minLength":1,"description":"User id."},
"stateId":{"type":"string","minLength":1,"description":"Workflow state id."},
"priority":{"type":"integer","minimum":0,"maximum":4,"description":"0 none, 1 urgent, 2 high, 3 medium, 4 low."}}}`
	addCommentSchema = `{"type":"object","additionalProperties":false,"required":["issueId","body"],"properties":{
"issueId":{"type":"string","minLength":1,"description":"Issue id or identifier (ENG-123)."},
"body":{"type":"string","minLength":1,"description":"Markdown."}}}`
)

func listIssuesVars(params json.RawMessage) (map[string]any, error) {
	var p struct {
		TeamID    string `json:"teamId"`
		ProjectID string `json:"projectId"`
		First     *int   `json:"first"`
		After     string `json:"after"`
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	first := MaxPageSize
	if p.First != nil {
		first = min(max(*p.First, 1), MaxPageSize)
	}
	vars := map[string]any{"first": first}
	if p.After != "" {
		vars["after"] = p.After
	}
	filter := map[string]any{}
	if p.TeamID != "" {
		filter["team"] = map[string]any{"id": map[string]any{"eq": p.TeamID}}
	}
	if p.ProjectID != "" {
		filter["project"] = map[string]any{"id": map[string]any{"eq": p.ProjectID}}
	}
	if len(filter) > 0 {
		vars["filter"] = filter
	}
	return vars, nil
}

func getIssueVars(params json.RawMessage) (map[string]any, error) {
	var p struct {
		IssueID string `json:"issueId"`
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.IssueID == "" {
		return nil, remote.Required("issueId")
	}
	return map[string]any{"id": p.IssueID}, nil
}

func checkPriority(p *int) error {
	if p != nil && (*p < 0 || *p > 4) {
		return remote.InvalidParams("/priority", "must be between 0 and 4")
	}
	return nil
}

func createIssueVars(params json.RawMessage) (map[string]any, error) {
	var p struct {
		TeamID      string   `json:"teamId"`
		Title       string   `json:"title"`
		Description *string  `json:"description"`
		AssigneeID  string   `json:"assigneeId"`
		StateID     string   `json:"stateId"`
		Priority    *int     `json:"priority"`
		LabelIDs    []string `json:"labelIds"`
		ProjectID   string   `json:"projectId"`
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	switch {
	case p.TeamID == "":
		return nil, remote.Required("teamId")
	case p.Title == "":
		return nil, remote.Required("title")
	}
	if err := checkPriority(p.Priority); err != nil {
		return nil, err
	}
	in := map[string]any{"teamId": p.TeamID, "title": p.Title}
	if p.Description != nil {
		in["description"] = *p.Description
	}
	setNonEmpty(in, "assigneeId", p.AssigneeID)
	setNonEmpty(in, "stateId", p.StateID)
	setNonEmpty(in, "projectId", p.ProjectID)
	if p.Priority != nil {
		in["priority"] = *p.Priority
	}
	if p.LabelIDs != nil {
		in["labelIds"] = p.LabelIDs
	}
	return map[string]any{"input": in}, nil
}

func updateIssueVars(params json.RawMessage) (map[string]any, error) {
	var p struct {
		IssueID     string  `json:"issueId"`
		Title       *string `json:"title"`
		Description *string `json:"description"`
		AssigneeID  *string `json:"assigneeId"`
		StateID     *string `json:"stateId"`
		Priority    *int    `json:"priority"`
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.IssueID == "" {
		return nil, remote.Required("issueId")
	}
	if err := checkPriority(p.Priority); err != nil {
		return nil, err
	}
	in := map[string]any{}
	for k, v := range map[string]*string{"title": p.Title, "description": p.Description, "assigneeId": p.AssigneeID, "stateId": p.StateID} {
		if v != nil {
			in[k] = *v
		}
	}
	if p.Priority != nil {
		in["priority"] = *p.Priority
	}
	if len(in) == 0 {
		return nil, remote.InvalidParams("", "nothing to update: give title, description, assigneeId, stateId or priority")
	}
	return map[string]any{"id": p.IssueID, "input": in}, nil
}

func addCommentVars(params json.RawMessage) (map[string]any, error) {
	var p struct {
		IssueID string `json:"issueId"`
		Body    string `json:"body"`
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return nil, err
	}
	switch {
	case p.IssueID == "":
		return nil, remote.Required("issueId")
	case p.Body == "":
		return nil, remote.Required("body")
	}
	return map[string]any{"input": map[string]any{"issueId": p.IssueID, "body": p.Body}}, nil
}

func setNonEmpty(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}
