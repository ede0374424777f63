package integrations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// --- Sentry -------------------------------------------------------------------

// Sentry reads project metadata from the Sentry REST API (SENTRY_API_URL,
// e.g. https://sentry.io/api/0).
type Sentry struct {
	baseURL string
	up      upstream
}

// NewSentry builds the client.
func NewSentry(baseURL string, client *http.Client) *Sentry {
	if client == nil {
		client = http.DefaultClient
	}
	return &Sentry{baseURL: strings.TrimRight(baseURL, "/"), up: upstream{provider: "sentry", client: client}}
}

// SentryLevels are Sentry's fixed event levels.
var SentryLevels = []string{"debug", "info", "warning", "error", "fatal"}

// SentryOrganization, SentryProject and SentryEnvironment are the fields
// kept from Sentry's answers.
type SentryOrganization struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
}

type SentryProject struct {
	ID       string `json:"id"`
	Slug     string `json:"slug"`
	Name     string `json:"name"`
	Platform string `json:"platform"`
}

type SentryEnvironment struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// SentryMetadata is what trigger and action configuration needs.
type SentryMetadata struct {
	Organization string              `json:"organization"`
	Projects     []SentryProject     `json:"projects"`
	Project      string              `json:"project"`
	Environments []SentryEnvironment `json:"environments"`
	Levels       []string            `json:"levels"`
}

// sentryPages bounds how many Link-paginated pages are followed.
const sentryPages = 10

var linkNextRE = regexp.MustCompile(`<([^>]+)>;\s*rel="next";\s*results="true"`)

// get follows Sentry's cursor pagination (Link: …; rel="next"; results="true").
func sentryGet[T any](ctx context.Context, c *Sentry, op, token, path string) ([]T, error) {
	var all []T
	next := c.baseURL + path
	for page := 0; page < sentryPages && next != ""; page++ {
		req, err := http.NewRequest(http.MethodGet, next, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		var items []T
		var link string
		if _, err := c.up.doWithHeader(ctx, op, req, &items, sentryErrorCode, "Link", &link); err != nil {
			return nil, err
		}
		all = append(all, items...)
		next = ""
		if m := linkNextRE.FindStringSubmatch(link); m != nil && sameOrigin(m[1], c.baseURL) {
			next = m[1]
		}
	}
	if all == nil {
		all = []T{}
	}
	return all, nil
}

// sameOrigin keeps pagination on the configured Sentry host, so a hostile
// Link header cannot send the bearer token elsewhere.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Scheme == ub.Scheme && ua.Host == ub.Host
}

func sentryErrorCode(body []byte) string {
	var e struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(body, &e)
	return sanitizeCode(e.Detail)
}

// Metadata lists the organization's projects and the environments of one
// project (project, or the first one). organization defaults to the first
// organization the token can access.
func (c *Sentry) Metadata(ctx context.Context, token, organization, project string) (SentryMetadata, error) {
	md := SentryMetadata{Levels: SentryLevels, Projects: []SentryProject{}, Environments: []SentryEnvironment{}}
	orgs, err := sentryGet[SentryOrganization](ctx, c, "list organizations", token, "/organizations/")
	if err != nil {
		return md, err
	}
	for _, o := range orgs {
		if organization == "" || o.Slug == organization {
			md.Organization = o.Slug
			break
		}
	}
	if md.Organization == "" {
		if organization != "" {
			return md, invalid("organization", "is not a Sentry organization this connection can access")
		}
		return md, nil
	}
	md.Projects, err = sentryGet[SentryProject](ctx, c, "list projects", token, "/organizations/"+url.PathEscape(md.Organization)+"/projects/")
	if err != nil {
		return md, err
	}
	for _, p := range md.Projects {
		if project == "" || p.Slug == project {
			md.Project = p.Slug
			break
		}
	}
	if md.Project == "" {
		if project != "" {
			return md, invalid("project", "is not a project of the Sentry organization")
		}
		return md, nil
	}
	md.Environments, err = sentryGet[SentryEnvironment](ctx, c, "list environments", token,
		"/projects/"+url.PathEscape(md.Organization)+"/"+url.PathEscape(md.Project)+"/environments/")
	return md, err
}

// --- Linear -------------------------------------------------------------------

// Linear reads workspace metadata through Linear's GraphQL API
// (LINEAR_API_URL, https://api.linear.app/graphql).
type Linear struct {
	url string
	up  upstream
}

// NewLinear builds the client.
func NewLinear(endpoint string, client *http.Client) *Linear {
	if client == nil {
		client = http.DefaultClient
	}
	return &Linear{url: endpoint, up: upstream{provider: "linear", client: client}}
}

// LinearMetadata is what trigger and action configuration needs.
type LinearMetadata struct {
	Teams    []LinearTeam    `json:"teams"`
	States   []LinearState   `json:"states"`
	Labels   []LinearLabel   `json:"labels"`
	Users    []LinearUser    `json:"users"`
	Projects []LinearProject `json:"projects"`
}

type LinearTeam struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Key  string `json:"key"`
}

type LinearState struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	Color  string `json:"color"`
	TeamID string `json:"team_id"`
}

type LinearLabel struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Color  string `json:"color"`
	TeamID string `json:"team_id,omitempty"`
}

type LinearUser struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	Email       string `json:"email"`
	Active      bool   `json:"active"`
}

type LinearProject struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
}

const linearFields = `
  teams(first: 250) { nodes { id name key } }
  workflowStates(first: 250%s) { nodes { id name type color team { id } } }
  issueLabels(first: 250%s) { nodes { id name color team { id } } }
  users(first: 250) { nodes { id name displayName email active } }
  projects(first: 250) { nodes { id name state } }
`

// LinearMetadataQuery is the one GraphQL document sent; with a team id,
// workflow states and labels are filtered to that team.
func LinearMetadataQuery(byTeam bool) string {
	if byTeam {
		f := `, filter: { team: { id: { eq: $teamId } } }`
		return "query ProliferateMetadata($teamId: ID!) {" + strings.ReplaceAll(strings.ReplaceAll(linearFields, "%s", f), "\n", " ") + "}"
	}
	return "query ProliferateMetadata {" + strings.ReplaceAll(strings.ReplaceAll(linearFields, "%s", ""), "\n", " ") + "}"
}

type linearRef struct {
	ID string `json:"id"`
}

// Metadata fetches teams, workflow states, labels, users and projects in one
// request.
func (c *Linear) Metadata(ctx context.Context, token, teamID string) (LinearMetadata, error) {
	body := map[string]any{"query": LinearMetadataQuery(teamID != "")}
	if teamID != "" {
		body["variables"] = map[string]any{"teamId": teamID}
	}
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(raw))
	if err != nil {
		return LinearMetadata{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	var out struct {
		Data *struct {
			Teams struct {
				Nodes []LinearTeam `json:"nodes"`
			} `json:"teams"`
			WorkflowStates struct {
				Nodes []struct {
					LinearState
					Team *linearRef `json:"team"`
				} `json:"nodes"`
			} `json:"workflowStates"`
			IssueLabels struct {
				Nodes []struct {
					LinearLabel
					Team *linearRef `json:"team"`
				} `json:"nodes"`
			} `json:"issueLabels"`
			Users struct {
				Nodes []struct {
					LinearUser
					DisplayName string `json:"displayName"`
				} `json:"nodes"`
			} `json:"users"`
			Projects struct {
				Nodes []LinearProject `json:"nodes"`
			} `json:"projects"`
		} `json:"data"`
		Errors []linearError `json:"errors"`
	}
	_, err = c.up.do(ctx, "metadata query", req, &out, linearErrorCode)
	var ue *UpstreamError
	if errors.As(err, &ue) && ue.Status == http.StatusBadRequest && ue.Code == "AUTHENTICATION_ERROR" {
		ue.Err = ErrUpstreamUnauthorized
	}
	if err != nil {
		return LinearMetadata{}, err
	}
	if len(out.Errors) > 0 || out.Data == nil {
		code := "graphql_error"
		if len(out.Errors) > 0 && out.Errors[0].Extensions.Code != "" {
			code = sanitizeCode(out.Errors[0].Extensions.Code)
		}
		kind := ErrUpstreamRejected
		if code == "AUTHENTICATION_ERROR" {
			kind = ErrUpstreamUnauthorized
		}
		return LinearMetadata{}, &UpstreamError{Provider: "linear", Op: "metadata query", Status: http.StatusOK, Code: code, Err: kind}
	}
	d := out.Data
	md := LinearMetadata{Teams: d.Teams.Nodes, Projects: d.Projects.Nodes,
		States: []LinearState{}, Labels: []LinearLabel{}, Users: []LinearUser{}}
	for _, s := range d.WorkflowStates.Nodes {
		if s.Team != nil {
			s.LinearState.TeamID = s.Team.ID
		}
		md.States = append(md.States, s.LinearState)
	}
	for _, l := range d.IssueLabels.Nodes {
		if l.Team != nil {
			l.LinearLabel.TeamID = l.Team.ID
		}
		md.Labels = append(md.Labels, l.LinearLabel)
	}
	for _, u := range d.Users.Nodes {
		u.LinearUser.DisplayName = u.DisplayName
		md.Users = append(md.Users, u.LinearUser)
	}
	if md.Teams == nil {
		md.Teams = []LinearTeam{}
	}
	if md.Projects == nil {
		md.Projects = []LinearProject{}
	}
	return md, nil
}

type linearError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code string `json:"code"`
	} `json:"extensions"`
}

func linearErrorCode(body []byte) string {
	var e struct {
		Errors []linearError `json:"errors"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Errors) > 0 {
		return sanitizeCode(e.Errors[0].Extensions.Code)
	}
	return ""
}

// --- through the token boundary ----------------------------------------------

// ErrWrongProvider: the integration exists but is not of the provider the
// request is about (a not-found to callers).
var ErrWrongProvider = fmt.Errorf("integration of that provider %w", ErrNotFound)

// metadataToken resolves the token of an integration of the given provider
// that viewer can see.
func (s *Service) metadataToken(ctx context.Context, orgID, viewer, id, provider string) (Token, error) {
	it, err := s.Get(ctx, orgID, viewer, id)
	if err != nil {
		return Token{}, err
	}
	if it.IntegrationID != provider {
		return Token{}, ErrWrongProvider
	}
	return s.GetToken(ctx, it)
}

// SentryMetadata lists Sentry organizations' projects, environments and
// levels through a sentry integration the viewer can see.
func (s *Service) SentryMetadata(ctx context.Context, orgID, viewer, id, organization, project string) (SentryMetadata, error) {
	tok, err := s.metadataToken(ctx, orgID, viewer, id, "sentry")
	if err != nil {
		return SentryMetadata{}, err
	}
	return s.sentry.Metadata(ctx, tok.Value, organization, project)
}

// LinearMetadata lists Linear teams, workflow states, labels, users and
// projects through a linear integration the viewer can see.
func (s *Service) LinearMetadata(ctx context.Context, orgID, viewer, id, teamID string) (LinearMetadata, error) {
	tok, err := s.metadataToken(ctx, orgID, viewer, id, "linear")
	if err != nil {
		return LinearMetadata{}, err
	}
	return s.linear.Metadata(ctx, tok.Value, teamID)
}
