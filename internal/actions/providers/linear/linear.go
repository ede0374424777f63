// Package linear is the Linear provider action source: five actions over
// Linear's GraphQL API.
//
// Wire format: POST {endpoint} (LINEAR_API_URL, by default
// https://api.linear.app/graphql) with a JSON body {query, variables}. The
// platform resolves an OAuth access token per call (ExecContext.Token) and
// sends it as `Authorization: Bearer <token>`; a personal API key
// ("lin_api_…") is sent raw, as Linear requires. Documents use Linear's own
// schema names: issues(first, after, filter), issue(id), issueCreate(input),
// issueUpdate(id, input) and commentCreate(input).
//
// Results are the GraphQL `data` object as Linear returned it. Failures:
// an HTTP status outside 2xx, or a GraphQL `errors` array, is an
// *actions.ExecError carrying the HTTP status and the first error's message;
// a mutation answering success=false is one too. Timeouts and transport
// failures are *actions.ExecError with Status 0. Parameters that cannot be
// decoded are *actions.ParamsError (see package remote).
package linear

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
)

// DefaultEndpoint is Linear's GraphQL endpoint.
const DefaultEndpoint = "https://api.linear.app/graphql"

// MaxPageSize caps list_issues' `first`.
const MaxPageSize = 50

//go:embed guide.md
var guide string

// Options configure a Source (BaseURL is the GraphQL endpoint; default
// DefaultEndpoint).
type Options = remote.SourceOptions

// Source is the Linear action source. It is stateless and safe for
// concurrent use.
type Source struct {
	remote.Catalog
	endpoint string
	c        *remote.Client
}

// New returns the source.
func New(o Options) *Source {
	endpoint, c := o.Client("linear", DefaultEndpoint)
	return &Source{Catalog: remote.Catalog{SourceID: "linear", Name: "Linear", GuideMD: guide, Defs: Definitions}, endpoint: endpoint, c: c}
}

var _ actions.Source = (*Source)(nil)

// Definitions returns the catalog (a fresh copy).
func Definitions() []actions.Definition {
	return []actions.Definition{
		{ID: "list_issues", Risk: actions.RiskRead, Params: json.RawMessage(listIssuesSchema),
			Description: "List issues, newest first, optionally filtered by team or project; cursor pagination (first ≤ 50, after = pageInfo.endCursor)."},
		{ID: "get_issue", Risk: actions.RiskRead, Params: json.RawMessage(getIssueSchema),
			Description: "Get one issue by id or identifier (ENG-123), with its state, assignee, labels and comments."},
		{ID: "create_issue", Risk: actions.RiskWrite, Params: json.RawMessage(createIssueSchema),
			Description: "Create an issue in a team."},
		{ID: "update_issue", Risk: actions.RiskWrite, Params: json.RawMessage(updateIssueSchema),
			Description: "Update an issue's title, description, assignee, state or priority."},
		{ID: "add_comment", Risk: actions.RiskWrite, Params: json.RawMessage(addCommentSchema),
			Description: "Add a markdown comment to an issue."},
	}
}

// Execute implements actions.Source.
func (s *Source) Execute(ctx context.Context, actionID string, params json.RawMessage, ec actions.ExecContext) (json.RawMessage, error) {
	var (
		query, root string
		vars        map[string]any
		err         error
	)
	switch actionID {
	case "list_issues":
		query, root = listIssuesQuery, "issues"
		vars, err = listIssuesVars(params)
	case "get_issue":
		query, root = getIssueQuery, "issue"
		vars, err = getIssueVars(params)
	case "create_issue":
		query, root = createIssueMutation, "issueCreate"
		vars, err = createIssueVars(params)
	case "update_issue":
		query, root = updateIssueMutation, "issueUpdate"
		vars, err = updateIssueVars(params)
	case "add_comment":
		query, root = addCommentMutation, "commentCreate"
		vars, err = addCommentVars(params)
	default:
		return nil, fmt.Errorf("linear %q: %w", actionID, actions.ErrUnknownAction)
	}
	if err != nil {
		return nil, fmt.Errorf("linear %s: %w", actionID, err)
	}
	return s.graphql(ctx, actionID, query, root, vars, ec.Token)
}

// Authorization is the header value for a Linear credential: OAuth access
// tokens as Bearer, personal API keys (lin_api_…) raw.
func Authorization(token string) string {
	if strings.HasPrefix(token, "lin_api_") || strings.HasPrefix(token, "Bearer ") {
		return token
	}
	return "Bearer " + token
}

type gqlError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code                   string `json:"code"`
		UserPresentableMessage string `json:"userPresentableMessage"`
	} `json:"extensions"`
}

func (s *Source) graphql(ctx context.Context, action, query, root string, vars map[string]any, token string) (json.RawMessage, error) {
	resp, err := s.c.Do(ctx, remote.Request{Action: action, Method: http.MethodPost, URL: s.endpoint,
		Body: map[string]any{"query": query, "variables": vars}, Authorization: Authorization(token), Token: token})
	if err != nil {
		return nil, err
	}
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlError      `json:"errors"`
	}
	decodeErr := json.Unmarshal(resp.Body, &env)
	if len(env.Errors) > 0 {
		return nil, s.execError(resp.Status, firstMessage(env.Errors[0]), token)
	}
	if resp.Status < 200 || resp.Status > 299 {
		return nil, s.execError(resp.Status, http.StatusText(resp.Status), token)
	}
	if decodeErr != nil || len(env.Data) == 0 || string(env.Data) == "null" {
		return nil, s.execError(resp.Status, "answer without data", token)
	}
	if strings.HasSuffix(root, "Create") || strings.HasSuffix(root, "Update") {
		var m map[string]struct {
			Success *bool `json:"success"`
		}
		if err := json.Unmarshal(env.Data, &m); err == nil {
			if r, ok := m[root]; ok && r.Success != nil && !*r.Success {
				return nil, s.execError(resp.Status, root+" reported success=false", token)
			}
		}
	}
	return env.Data, nil
}

func firstMessage(e gqlError) string {
	msg := e.Message
	if e.Extensions.UserPresentableMessage != "" && e.Extensions.UserPresentableMessage != msg {
		msg += ": " + e.Extensions.UserPresentableMessage
	}
	if msg == "" {
		msg = "GraphQL error"
	}
	if e.Extensions.Code != "" {
		msg += " (" + e.Extensions.Code + ")"
	}
	return msg
}

func (s *Source) execError(status int, msg, token string) *actions.ExecError {
	return &actions.ExecError{Status: status, Message: "linear: " + remote.Truncate(remote.Scrub(msg, token), 500)}
}
