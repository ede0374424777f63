package providers

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/proliferate/proliferate/internal/runs"
)

// maxFrames is how many stack frames (innermost first) an event's context
// keeps, as in the original (last 10).
const maxFrames = 10

// projectInEventURL finds the project slug in an event's API url
// (…/api/0/projects/{org}/{project}/events/{id}/).
var projectInEventURL = regexp.MustCompile(`/projects/[^/]+/([^/]+)/events/`)

// sentryResource is the Sentry-Hook-Resource header, or for Nango forwards
// (which drop it) the payload's shape.
func sentryResource(w Webhook, data obj) string {
	if r := header(w, "sentry-hook-resource"); r != "" {
		return r
	}
	switch {
	case data.isObj("issue"):
		return "issue"
	case data.isObj("event"):
		return "event_alert"
	case data.isObj("error"):
		return "error"
	}
	return ""
}

func parseSentry(w Webhook) ([]runs.Event, error) {
	o, err := decodeObject(Sentry, w.Body)
	if err != nil {
		return nil, err
	}
	data := o.obj("data")
	resource := sentryResource(w, data)
	action := o.str("action")
	var issue, event obj
	switch resource {
	case "issue":
		if !data.isObj("issue") {
			return nil, &ParseError{Provider: Sentry, Reason: "issue webhook without data.issue"}
		}
		issue = data.obj("issue")
		if issue.id("id") == "" {
			return nil, &ParseError{Provider: Sentry, Reason: "issue without id"}
		}
		event = data.obj("event") // not sent by Sentry today, kept if present
	case "event_alert", "error":
		key := map[string]string{"event_alert": "event", "error": "error"}[resource]
		if !data.isObj(key) {
			return nil, &ParseError{Provider: Sentry, Reason: resource + " webhook without data." + key}
		}
		event = data.obj(key)
		if event.id("event_id") == "" {
			return nil, &ParseError{Provider: Sentry, Reason: "event without event_id"}
		}
		issue = data.obj("issue")
		action = first(action, map[string]string{"event_alert": "triggered", "error": "created"}[resource])
	default:
		return nil, nil // installation, metric alerts, comments…: not trigger events
	}
	if action == "" {
		action = "created"
	}

	issueID := first(issue.id("id"), event.id("issue_id"), event.id("groupID"))
	eventID := event.id("event_id")
	level := first(event.str("level"), issue.str("level"), "error")
	environment := first(event.str("environment"), sentryTag(event, "environment"), sentryTag(issue, "environment"))
	project := first(issue.obj("project").str("slug"), event.str("project_slug"))
	if project == "" {
		if m := projectInEventURL.FindStringSubmatch(event.str("url")); m != nil {
			project = m[1]
		}
	}
	frames, files, trace := sentryFrames(event)
	exc := lastException(event)
	title := first(issue.str("title"), event.str("title"), "Sentry Error")
	url := first(issue.str("web_url"), issue.str("permalink"), event.str("web_url"), event.str("issue_url"))
	if url == "" && issueID != "" {
		url = "https://sentry.io/issues/" + issueID + "/"
	}
	s := map[string]any{"resource": resource, "action": action, "level": level, "frames": frames}
	put(s, "issue_id", issueID)
	put(s, "short_id", issue.str("shortId"))
	put(s, "event_id", eventID)
	put(s, "project_slug", project)
	put(s, "project_id", first(issue.obj("project").id("id"), event.id("project")))
	put(s, "environment", environment)
	put(s, "release", first(sentryRelease(event), sentryTag(event, "release"), sentryTag(issue, "release")))
	put(s, "platform", first(event.str("platform"), issue.str("platform")))
	put(s, "culprit", first(issue.str("culprit"), event.str("culprit")))
	put(s, "error_type", first(issue.obj("metadata").str("type"), exc.str("type"), event.obj("metadata").str("type")))
	put(s, "error_message", first(issue.obj("metadata").str("value"), exc.str("value"), event.str("message"), event.obj("logentry").str("formatted")))
	put(s, "stack_trace", trace)
	put(s, "issue_url", url)
	put(s, "status", issue.str("status"))
	put(s, "triggered_rule", data.str("triggered_rule"))
	ctx := map[string]any{"title": title, "related_files": files, Sentry: s}
	put(ctx, "description", first(issue.str("culprit"), event.str("culprit")))

	// Events dedup on their id (spec); issue webhooks on issue and action,
	// qualified by the delivery so a second resolve is a second event.
	var key, externalID string
	if eventID != "" {
		key, externalID = "sentry:"+eventID, eventID
	} else {
		key, externalID = "sentry:issue:"+issueID+":"+action, issueID
		if action != "created" {
			if d := first(deliveryID(w), header(w, "sentry-hook-timestamp")); d != "" {
				key += ":" + d
			}
		}
	}
	occurred := firstTime(w.ReceivedAt, event.time("datetime", false), event.time("timestamp", false),
		issue.time("lastSeen", false), issue.time("firstSeen", false))
	return []runs.Event{{
		Provider: Sentry, EventType: resource + "_" + action, ProviderEventType: resource + ":" + action,
		OccurredAt: occurred, DedupKey: key, Title: truncate(title, 500), URL: url, ExternalID: externalID, Context: ctx,
	}}, nil
}

// sentryTag reads a tag from Sentry's list of [key, value] pairs (events) or
// {key, value} objects (issues).
func sentryTag(o obj, key string) string {
	for _, t := range o.list("tags") {
		switch x := t.(type) {
		case []any:
			if len(x) == 2 {
				if k, _ := x[0].(string); k == key {
					v, _ := x[1].(string)
					return v
				}
			}
		case map[string]any:
			if obj(x).str("key") == key {
				return obj(x).str("value")
			}
		}
	}
	return ""
}

func sentryRelease(event obj) string {
	if s := event.str("release"); s != "" {
		return s
	}
	return event.obj("release").str("version")
}

// lastException is the exception that was raised: Sentry lists chained
// exceptions oldest first.
func lastException(event obj) obj {
	vals := event.obj("exception").objs("values")
	for i := len(vals) - 1; i >= 0; i-- {
		if vals[i].isObj("stacktrace") {
			return vals[i]
		}
	}
	if len(vals) > 0 {
		return vals[len(vals)-1]
	}
	return obj{}
}

// sentryFrames returns the raised exception's last frames, innermost first,
// with their source context, the files of the in-app frames of every
// exception (all frames when none is marked in-app), and a printable trace.
func sentryFrames(event obj) ([]any, []string, string) {
	frames := []any{}
	var lines []string
	exc := lastException(event)
	fs := exc.obj("stacktrace").objs("frames")
	if len(fs) > maxFrames {
		fs = fs[len(fs)-maxFrames:]
	}
	for i := len(fs) - 1; i >= 0; i-- {
		f := fs[i]
		fr := map[string]any{"in_app": f.boolean("in_app")}
		put(fr, "filename", f.str("filename"))
		put(fr, "abs_path", f.str("abs_path"))
		put(fr, "function", f.str("function"))
		put(fr, "module", f.str("module"))
		if n, ok := f.num("lineno"); ok {
			fr["lineno"] = int64(n)
		}
		if n, ok := f.num("colno"); ok {
			fr["colno"] = int64(n)
		}
		put(fr, "context_line", f.str("context_line"))
		if pre := f.strs("pre_context"); len(pre) > 0 {
			fr["pre_context"] = pre
		}
		if post := f.strs("post_context"); len(post) > 0 {
			fr["post_context"] = post
		}
		frames = append(frames, fr)
		loc := first(f.str("filename"), f.str("abs_path"), "?")
		if n, ok := f.num("lineno"); ok {
			loc += fmt.Sprintf(":%d", int64(n))
			if c, ok := f.num("colno"); ok {
				loc += fmt.Sprintf(":%d", int64(c))
			}
		}
		lines = append(lines, fmt.Sprintf("  at %s (%s)", first(f.str("function"), "<anonymous>"), loc))
	}
	var inApp, all []string
	for _, e := range event.obj("exception").objs("values") {
		for _, f := range e.obj("stacktrace").objs("frames") {
			name := f.str("filename")
			if name == "" || strings.HasPrefix(name, "<") {
				continue
			}
			all = append(all, name)
			if f.boolean("in_app") {
				inApp = append(inApp, name)
			}
		}
	}
	if len(inApp) == 0 {
		inApp = all
	}
	return frames, uniq(inApp), strings.Join(lines, "\n")
}

func levelIndex(level string) int {
	for i, l := range sentryLevels {
		if l == level {
			return i
		}
	}
	return 3 // unknown levels count as error
}

func matchSentry(cfg obj, ev ctxView) (bool, string) {
	s := ev.sub(Sentry)
	if p := cfg.str("project_slug"); p != "" && s.str("project_slug") != p {
		return false, fmt.Sprintf("project %q is not %q", s.str("project_slug"), p)
	}
	if envs := cfg.strs("environments"); len(envs) > 0 && !contains(envs, s.str("environment"), false) {
		return false, fmt.Sprintf("environment %q is not one of environments", s.str("environment"))
	}
	if min := cfg.str("min_level"); min != "" && levelIndex(s.str("level")) < levelIndex(min) {
		return false, fmt.Sprintf("level %q is below %q", s.str("level"), min)
	}
	return true, ""
}
