// Package enrich builds the versioned enrichment payload of an automation
// run from its trigger
// event's normalized context (providers.Parse's runs.Event.Context, stored
// as trigger_events.parsed_context). It is pure and deterministic: no
// database, no network, no clock, no LLM; the same Input always gives the
// same Payload (related files sorted, maps marshalled with sorted keys).
//
// What Build extracts:
//
//   - summary: the event's title (Input.Title, else context "title") and
//     context "description"; titles are capped at 500 characters and
//     descriptions at 10,000.
//   - source: Input.URL / ExternalID (else the provider's url field in the
//     context), and the provider's native event type (Input.ProviderEventType,
//     else Input.EventType).
//   - related_files: context "related_files" (GitHub push files, Sentry
//     in-app stack frame filenames), Sentry frames, GitHub changed-file lists
//     when a context carries them, and file paths mentioned in the title and
//     description (tokens with a directory and an extension, or a file name
//     in backticks); URLs and node_modules are dropped, "./", "webpack:///"
//     and "app:///" prefixes stripped; sorted, unique, at most 50.
//   - suggested_repo_id: the first repository full name the context names
//     that matches an Input.Repos entry case-insensitively: GitHub
//     "repo" (repository.full_name) and "repo_url"; a top-level "repo" or
//     "repository"; a custom webhook payload's repository.full_name,
//     repository or repo; then github.com/owner/name links in the source URL
//     and description (a Linear issue or Sentry alert linking a GitHub item).
//   - provider_context: a curated subset per provider (see providerContext);
//     unknown providers give an empty object.
//
// Failures (*Error, the run fails with Reason): missing_context when a
// provider that needs one (github, linear, sentry, posthog, custom, and
// unknown providers) has an empty context or, for the four named providers,
// no provider object in it; missing_title when no title can be found.
//
// Scheduled and manual runs carry no external context and never fail: their
// title defaults to "Scheduled run" ("Scheduled run: <schedule name>" when
// the context names the schedule) and "Manual run"; their provider context
// holds the schedule's id/name/cron/timezone/fire time, or who started the
// manual run and their note; a manual run's note is its description.
package enrich

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Version of the payload Build produces.
const Version = 1

// Providers Build knows (the values of trigger_events.provider).
const (
	GitHub    = "github"
	Linear    = "linear"
	Sentry    = "sentry"
	PostHog   = "posthog"
	Custom    = "custom"
	Scheduled = "scheduled"
	Manual    = "manual"
)

// Error reasons.
const (
	ReasonMissingTitle   = "missing_title"
	ReasonMissingContext = "missing_context"
)

const (
	maxTitle        = 500
	maxDescription  = 10000
	maxRelatedFiles = 50
	maxScan         = 64 << 10 // bytes of free text scanned for file paths and links
	maxPathLen      = 300
)

// Payload is the versioned enrichment payload,
// JSON snake_case.
type Payload struct {
	Version         int      `json:"version"`
	Provider        string   `json:"provider"`
	Summary         Summary  `json:"summary"`
	Source          Source   `json:"source"`
	RelatedFiles    []string `json:"related_files"`
	SuggestedRepoID *string  `json:"suggested_repo_id"`
	// ProviderContext is never nil (an empty object for unknown providers).
	ProviderContext   map[string]any    `json:"provider_context"`
	AutomationContext AutomationContext `json:"automation_context"`
	// LLMAnalysis is the answer to the automation's LLM analysis prompt,
	// asked by the trigger processor before the run was queued; absent when
	// the automation has none (or the run was not started by a trigger event).
	LLMAnalysis *LLMAnalysis `json:"llm_analysis,omitempty"`
}

// LLMAnalysis is the model's analysis of the triggering event.
type LLMAnalysis struct {
	// Status is "done" (Text holds the analysis) or "failed" (Error says why).
	Status string  `json:"status"`
	Text   *string `json:"text"`
	Error  *string `json:"error"`
}

// Summary is the human summary of the triggering event.
type Summary struct {
	Title       string  `json:"title"`
	Description *string `json:"description"`
}

// Source says where the triggering event lives.
type Source struct {
	URL        *string `json:"url"`
	ExternalID *string `json:"external_id"`
	EventType  *string `json:"event_type"`
}

// AutomationContext describes the automation the run belongs to.
type AutomationContext struct {
	AutomationID   string `json:"automation_id"`
	AutomationName string `json:"automation_name"`
	HasLLMFilter   bool   `json:"has_llm_filter"`
	HasLLMAnalysis bool   `json:"has_llm_analysis"`
}

// Repo is one repository of the organization (for suggesting a repo).
type Repo struct {
	ID string
	// FullName is "owner/name" (repos.github_repo_name).
	FullName string
}

// Input is everything Build needs; the caller loads it (trigger event row +
// automation + org repos).
type Input struct {
	Provider, EventType, ProviderEventType, Title, URL, ExternalID string
	// Context is trigger_events.parsed_context.
	Context                      map[string]any
	AutomationID, AutomationName string
	HasLLMFilter, HasLLMAnalysis bool
	Repos                        []Repo
	// Analysis is the stored answer to the LLM analysis prompt (nil: none).
	Analysis *LLMAnalysis
}

// Error is a run-failing enrichment problem (missing title or context);
// Reason is machine-readable.
type Error struct {
	Reason, Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("enrichment: %s: %s", e.Reason, e.Message)
}

// Build is pure and deterministic: same input, same payload (sorted related
// files, stable maps). Its only errors are *Error.
func Build(in Input) (Payload, error) {
	c := view(in.Context)
	internal := in.Provider == Scheduled || in.Provider == Manual
	if !internal {
		if len(c) == 0 {
			return Payload{}, &Error{Reason: ReasonMissingContext, Message: fmt.Sprintf("the %s event has no parsed context", providerName(in.Provider))}
		}
		switch in.Provider {
		case GitHub, Linear, Sentry, PostHog:
			if _, ok := in.Context[in.Provider].(map[string]any); !ok {
				return Payload{}, &Error{Reason: ReasonMissingContext, Message: fmt.Sprintf("the %s event's context has no %q object", in.Provider, in.Provider)}
			}
		}
	}
	sub := c.obj(in.Provider)

	title := first(strings.TrimSpace(in.Title), strings.TrimSpace(c.str("title")))
	if title == "" {
		switch in.Provider {
		case Scheduled:
			title = "Scheduled run"
			if name := first(c.str("schedule_name"), sub.str("schedule_name"), sub.str("name")); name != "" {
				title += ": " + name
			}
		case Manual:
			title = "Manual run"
		default:
			return Payload{}, &Error{Reason: ReasonMissingTitle, Message: fmt.Sprintf("the %s event has no title", providerName(in.Provider))}
		}
	}
	description := strings.TrimSpace(c.str("description"))
	if description == "" && in.Provider == Manual {
		description = strings.TrimSpace(c.str("note"))
	}

	p := Payload{
		Version:  Version,
		Provider: in.Provider,
		Summary:  Summary{Title: truncate(title, maxTitle), Description: optional(truncate(description, maxDescription))},
		Source: Source{
			URL:        optional(first(in.URL, sourceURL(in.Provider, sub))),
			ExternalID: optional(first(in.ExternalID, externalID(in.Provider, sub))),
			EventType:  optional(first(in.ProviderEventType, in.EventType)),
		},
		RelatedFiles:    relatedFiles(in.Provider, c, sub, title, description),
		ProviderContext: providerContext(in.Provider, c, sub),
		AutomationContext: AutomationContext{
			AutomationID: in.AutomationID, AutomationName: in.AutomationName,
			HasLLMFilter: in.HasLLMFilter, HasLLMAnalysis: in.HasLLMAnalysis,
		},
	}
	p.SuggestedRepoID = suggestRepo(in, c, sub, description)
	p.LLMAnalysis = in.Analysis
	return p, nil
}

func providerName(p string) string {
	if p == "" {
		return "trigger"
	}
	return p
}

// sourceURL is the provider's link to the event when the event row has none.
func sourceURL(provider string, sub obj) string {
	switch provider {
	case GitHub:
		return first(sub.str("pr_url"), sub.str("issue_url"), sub.str("workflow_url"), sub.str("compare_url"))
	case Linear, Sentry:
		return sub.str("issue_url")
	case PostHog:
		return sub.str("event_url")
	}
	return ""
}

func externalID(provider string, sub obj) string {
	switch provider {
	case Linear:
		return sub.str("issue_id")
	case Sentry:
		return first(sub.str("event_id"), sub.str("issue_id"))
	case PostHog:
		return first(sub.str("uuid"), sub.str("distinct_id"))
	case Scheduled:
		return sub.str("schedule_id")
	}
	return ""
}

// providerContext is the curated subset of the provider object the agent
// prompt and notifications use; absent keys stay absent.
func providerContext(provider string, c, sub obj) map[string]any {
	out := map[string]any{}
	pick := func(from obj, keys ...string) {
		for _, k := range keys {
			if v, ok := from[k]; ok && !empty(v) {
				out[k] = clone(v)
			}
		}
	}
	switch provider {
	case GitHub:
		pick(sub, "event", "action", "repo", "branch", "base_branch", "head_branch", "head_sha", "tag",
			"labels", "conclusion", "status", "check_name", "workflow_name", "is_draft", "is_merged")
		if n, ok := first2(sub, "pr_number", "issue_number"); ok {
			out["number"] = n
		}
		if a := sub.str("sender"); a != "" {
			out["author"] = a
		}
	case Linear:
		pick(sub, "issue_id", "identifier", "issue_number", "action", "team_id", "team_key", "team_name",
			"state", "priority", "priority_label", "labels", "project_id", "project_name", "assignee_id", "assignee_name")
	case Sentry:
		pick(sub, "issue_id", "short_id", "event_id", "level", "culprit", "project_slug", "project_id",
			"environment", "release", "platform", "error_type", "error_message")
	case PostHog:
		pick(sub, "event", "distinct_id", "uuid", "timestamp", "project_id")
	case Custom:
		pick(sub, "received_at")
		// Top-level scalar fields of the body (event names, statuses, ids):
		// enough to summarise a run without copying a large payload.
		fields := map[string]any{}
		for k, v := range c.obj("payload") {
			switch x := v.(type) {
			case string:
				if len(x) <= 200 {
					fields[k] = x
				}
			case bool, float64, int, int64:
				fields[k] = x
			}
		}
		if len(fields) > 0 {
			out["fields"] = fields
		}
	case Scheduled:
		pick(c, "schedule_id", "schedule_name", "cron_expression", "timezone", "scheduled_for")
		pick(sub, "schedule_id", "schedule_name", "cron_expression", "timezone", "scheduled_for")
	case Manual:
		pick(c, "triggered_by", "note")
	}
	return out
}

func first2(o obj, keys ...string) (any, bool) {
	for _, k := range keys {
		if v, ok := o[k]; ok && !empty(v) {
			return clone(v), true
		}
	}
	return nil, false
}

// relatedFiles collects, normalizes, dedupes and sorts file paths.
func relatedFiles(provider string, c, sub obj, title, description string) []string {
	var cands []string
	cands = append(cands, c.strs("related_files")...)
	if provider == Sentry {
		for _, f := range sub.objs("frames") {
			if f.boolean("in_app") {
				cands = append(cands, f.str("filename"))
			}
		}
	}
	if provider == GitHub {
		// Not sent in PR webhooks today (changed_files is a count there); a
		// poller or future parser may attach the list.
		cands = append(cands, sub.strs("changed_files")...)
		cands = append(cands, sub.strs("files")...)
		for _, f := range sub.objs("files") {
			cands = append(cands, f.str("filename"))
		}
	}
	cands = append(cands, mentionedPaths(title)...)
	cands = append(cands, mentionedPaths(description)...)

	seen := map[string]bool{}
	out := []string{}
	for _, f := range cands {
		f = cleanPath(f)
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		out = append(out, f)
	}
	sort.Strings(out)
	if len(out) > maxRelatedFiles {
		out = out[:maxRelatedFiles]
	}
	return out
}

var (
	// pathToken is a run of path characters; mentionedPaths keeps those
	// with a directory and an extension.
	pathToken = regexp.MustCompile(`[A-Za-z0-9_.@/+-]+`)
	backticks = regexp.MustCompile("`([^`\\s]{1,300})`")
	extension = regexp.MustCompile(`\.[A-Za-z][A-Za-z0-9]{0,9}$`)
)

// mentionedPaths finds file paths in free text: tokens like src/a/b.ts (a
// directory and an extension, not part of a URL) and backticked names with
// an extension (`save.ts`).
func mentionedPaths(text string) []string {
	if len(text) > maxScan {
		text = text[:maxScan]
	}
	var out []string
	for _, loc := range pathToken.FindAllStringIndex(text, -1) {
		tok := text[loc[0]:loc[1]]
		if strings.HasPrefix(tok, "///") {
			tok = tok[3:] // webpack:///src/a.ts, app:///src/a.ts, file:///…
		} else if loc[0] > 0 && text[loc[0]-1] == ':' || strings.HasPrefix(tok, "//") {
			continue // a URL (scheme://host/…) or host:path
		}
		tok = strings.TrimRight(tok, ".")
		if strings.Contains(tok, "/") && extension.MatchString(tok) && !strings.Contains(tok, "@") {
			out = append(out, tok)
		}
	}
	for _, m := range backticks.FindAllStringSubmatch(text, -1) {
		tok := strings.TrimRight(m[1], ".,:;")
		if !strings.Contains(tok, "://") && extension.MatchString(tok) {
			out = append(out, tok)
		}
	}
	return out
}

// cleanPath normalizes a candidate file path, or returns "" to drop it.
func cleanPath(f string) string {
	f = strings.TrimSpace(f)
	for _, prefix := range []string{"webpack:///", "app:///", "file://"} {
		f = strings.TrimPrefix(f, prefix)
	}
	for strings.HasPrefix(f, "./") {
		f = f[2:]
	}
	switch {
	case f == "", len(f) > maxPathLen, !utf8.ValidString(f),
		strings.HasPrefix(f, "<"), strings.Contains(f, "://"),
		strings.Contains(f, "node_modules/"), strings.ContainsAny(f, " \t\r\n\x00"):
		return ""
	}
	return f
}

var githubLink = regexp.MustCompile(`(?i)(?:https?://)?(?:www\.)?github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)`)

// suggestRepo returns the id of the first org repo the context names.
func suggestRepo(in Input, c, sub obj, description string) *string {
	if len(in.Repos) == 0 {
		return nil
	}
	byName := map[string]string{}
	for _, r := range in.Repos {
		name := strings.ToLower(strings.TrimSpace(r.FullName))
		if name == "" || r.ID == "" {
			continue
		}
		if cur, ok := byName[name]; !ok || r.ID < cur {
			byName[name] = r.ID // smallest id wins: independent of the slice's order
		}
	}
	var cands []string
	if in.Provider == GitHub {
		cands = append(cands, sub.str("repo"), linkedRepo(sub.str("repo_url")))
	}
	cands = append(cands, c.str("repo"), c.str("repository"), c.obj("repository").str("full_name"))
	if in.Provider == Custom {
		payload := c.obj("payload")
		cands = append(cands, payload.obj("repository").str("full_name"), payload.str("repository"), payload.str("repo"))
	}
	cands = append(cands, linkedRepo(in.URL), linkedRepo(sourceURL(in.Provider, sub)))
	text := description
	if len(text) > maxScan {
		text = text[:maxScan]
	}
	for _, m := range githubLink.FindAllStringSubmatch(text, 20) {
		cands = append(cands, m[1]+"/"+strings.TrimSuffix(m[2], ".git"))
	}
	for _, cand := range cands {
		if id, ok := byName[strings.ToLower(strings.TrimSpace(cand))]; ok && cand != "" {
			return &id
		}
	}
	return nil
}

// linkedRepo is "owner/name" of a github.com URL, or "".
func linkedRepo(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(strings.TrimPrefix(u.Host, "www."), "github.com") {
		return ""
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return ""
	}
	return parts[0] + "/" + strings.TrimSuffix(parts[1], ".git")
}

// obj reads a decoded JSON object leniently: wrong types read as absent.
type obj map[string]any

func view(m map[string]any) obj { return obj(m) }

func (o obj) str(k string) string {
	s, _ := o[k].(string)
	return s
}

func (o obj) obj(k string) obj {
	m, _ := o[k].(map[string]any)
	return obj(m)
}

func (o obj) boolean(k string) bool {
	b, _ := o[k].(bool)
	return b
}

func (o obj) objs(k string) []obj {
	var out []obj
	switch l := o[k].(type) {
	case []any:
		for _, x := range l {
			if m, ok := x.(map[string]any); ok {
				out = append(out, obj(m))
			}
		}
	case []map[string]any:
		for _, m := range l {
			out = append(out, obj(m))
		}
	}
	return out
}

func (o obj) strs(k string) []string {
	switch l := o[k].(type) {
	case []string:
		return l
	case []any:
		out := make([]string, 0, len(l))
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// clone deep-copies JSON-like values so the payload never aliases the
// caller's context.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = clone(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = clone(e)
		}
		return l
	case []string:
		return append([]string(nil), x...)
	}
	return v
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	}
	return false
}

func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// truncate cuts s to at most n runes (invalid UTF-8 is replaced first so the
// payload is valid JSON text either way).
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
