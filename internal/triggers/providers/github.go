package providers

import (
	"fmt"
	"path"
	"strings"

	"github.com/proliferate/proliferate/internal/runs"
)

// GitHub event types a trigger can fire on.
var githubEvents = []string{"issues", "pull_request", "push", "check_suite", "check_run", "workflow_run"}

var githubConclusions = []string{"success", "failure", "cancelled", "skipped", "timed_out", "action_required", "neutral", "stale", "startup_failure"}

// githubEventOf names the delivery's event: the X-GitHub-Event header, or,
// for Nango forwards (which drop the header), the payload's shape.
func githubEventOf(w Webhook, o obj) string {
	if e := header(w, "x-github-event"); e != "" {
		return e
	}
	switch {
	case o.has("zen") && o.has("hook_id"):
		return "ping"
	case o.isObj("workflow_run"):
		return "workflow_run"
	case o.isObj("check_run"):
		return "check_run"
	case o.isObj("check_suite"):
		return "check_suite"
	case o.isObj("comment"):
		return "comment" // issue_comment, pull_request_review_comment…: not a trigger event
	case o.isObj("pull_request"):
		return "pull_request"
	case o.isObj("issue"):
		return "issues"
	case o.has("ref") && o.has("commits"):
		return "push"
	case o.isObj("installation") && !o.isObj("repository") && o.str("action") != "":
		return "installation"
	}
	return ""
}

func parseGitHub(w Webhook) ([]runs.Event, error) {
	o, err := decodeObject(GitHub, w.Body)
	if err != nil {
		return nil, err
	}
	event := githubEventOf(w, o)
	supported := false
	for _, e := range githubEvents {
		supported = supported || e == event
	}
	if !supported {
		return nil, nil // ping, installation lifecycle, events no trigger listens to
	}
	action := o.str("action")
	repo := o.obj("repository")
	g := map[string]any{"event": event}
	put(g, "action", action)
	put(g, "repo", repo.str("full_name"))
	put(g, "repo_url", repo.str("html_url"))
	put(g, "sender", first(o.obj("sender").str("login"), o.obj("pusher").str("name")))
	if id := installationID(o); id != 0 {
		g["installation_id"] = id
	}
	ctx := map[string]any{}
	var externalID, title, url, stamp string
	var description string
	occurred := w.ReceivedAt

	need := func(key string) (obj, error) {
		if !o.isObj(key) {
			return nil, &ParseError{Provider: GitHub, Reason: event + " event without a " + key + " object"}
		}
		return o.obj(key), nil
	}
	switch event {
	case "issues":
		is, err := need("issue")
		if err != nil {
			return nil, err
		}
		if is.id("id") == "" {
			return nil, &ParseError{Provider: GitHub, Reason: "issue without id"}
		}
		externalID = "issue-" + is.id("id")
		num := is.id("number")
		title = fmt.Sprintf("Issue #%s: %s", num, is.str("title"))
		url = is.str("html_url")
		description = is.str("body")
		stamp = is.str("updated_at")
		occurred = firstTime(w.ReceivedAt, is.time("updated_at", false), is.time("created_at", false))
		put(g, "issue_number", numberOf(is))
		put(g, "issue_title", is.str("title"))
		put(g, "issue_url", url)
		put(g, "issue_state", is.str("state"))
		g["labels"] = is.names("labels")
	case "pull_request":
		pr, err := need("pull_request")
		if err != nil {
			return nil, err
		}
		if pr.id("id") == "" {
			return nil, &ParseError{Provider: GitHub, Reason: "pull request without id"}
		}
		externalID = "pr-" + pr.id("id")
		title = fmt.Sprintf("PR #%s: %s", pr.id("number"), pr.str("title"))
		url = pr.str("html_url")
		description = pr.str("body")
		stamp = pr.str("updated_at")
		occurred = firstTime(w.ReceivedAt, pr.time("updated_at", false), pr.time("created_at", false))
		put(g, "pr_number", numberOf(pr))
		put(g, "pr_title", pr.str("title"))
		put(g, "pr_url", url)
		put(g, "pr_state", pr.str("state"))
		put(g, "base_branch", pr.obj("base").str("ref"))
		put(g, "head_branch", pr.obj("head").str("ref"))
		put(g, "head_sha", pr.obj("head").str("sha"))
		put(g, "branch", pr.obj("base").str("ref"))
		g["is_draft"] = pr.boolean("draft")
		g["is_merged"] = pr.boolean("merged")
		g["labels"] = pr.names("labels")
		if n, ok := pr.num("changed_files"); ok {
			g["changed_files"] = int64(n)
		}
	case "push":
		ref := o.str("ref")
		if ref == "" {
			return nil, &ParseError{Provider: GitHub, Reason: "push event without ref"}
		}
		after := o.str("after")
		externalID = "push-" + first(after, ref)
		branch, isBranch := strings.CutPrefix(ref, "refs/heads/")
		if isBranch {
			g["branch"] = branch
		} else if tag, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
			g["tag"] = tag
		}
		put(g, "ref", ref)
		put(g, "head_sha", after)
		g["deleted"] = o.boolean("deleted")
		g["forced"] = o.boolean("forced")
		put(g, "compare_url", o.str("compare"))
		commits := o.objs("commits")
		list := make([]any, 0, len(commits))
		var messages []string
		var files []string
		for _, c := range commits {
			// The full messages are the description; each commit keeps its subject.
			list = append(list, map[string]any{"sha": c.str("id"), "message": firstLine(c.str("message")), "author": c.obj("author").str("name")})
			messages = append(messages, c.str("message"))
			for _, k := range []string{"added", "modified", "removed"} {
				files = append(files, c.strs(k)...)
			}
		}
		g["commits"] = list
		description = strings.Join(messages, "\n")
		ctx["related_files"] = uniq(files)
		title = fmt.Sprintf("Push to %s: %d commit(s)", first(branch, ref), len(commits))
		url = o.str("compare")
		occurred = firstTime(w.ReceivedAt, o.obj("head_commit").time("timestamp", false))
		action = ""
	case "check_suite":
		cs, err := need("check_suite")
		if err != nil {
			return nil, err
		}
		externalID = "check-suite-" + cs.id("id")
		name := first(cs.obj("app").str("name"), "Check Suite")
		title = fmt.Sprintf("Check Suite %s: %s", name, first(cs.str("conclusion"), cs.str("status")))
		url = first(cs.str("html_url"), checksURL(repo.str("html_url"), cs.str("head_sha")))
		stamp = cs.str("updated_at")
		occurred = firstTime(w.ReceivedAt, cs.time("updated_at", false))
		put(g, "branch", cs.str("head_branch"))
		put(g, "head_sha", cs.str("head_sha"))
		put(g, "conclusion", cs.str("conclusion"))
		put(g, "status", cs.str("status"))
		put(g, "check_name", name)
	case "check_run":
		cr, err := need("check_run")
		if err != nil {
			return nil, err
		}
		externalID = "check-run-" + cr.id("id")
		title = fmt.Sprintf("Check Run: %s - %s", cr.str("name"), first(cr.str("conclusion"), cr.str("status")))
		url = cr.str("html_url")
		stamp = first(cr.str("completed_at"), cr.str("started_at"))
		occurred = firstTime(w.ReceivedAt, cr.time("completed_at", false), cr.time("started_at", false))
		put(g, "branch", cr.obj("check_suite").str("head_branch"))
		put(g, "head_sha", cr.str("head_sha"))
		put(g, "conclusion", cr.str("conclusion"))
		put(g, "status", cr.str("status"))
		put(g, "check_name", cr.str("name"))
		put(g, "error_message", cr.obj("output").str("title"))
		description = cr.obj("output").str("summary")
	case "workflow_run":
		wr, err := need("workflow_run")
		if err != nil {
			return nil, err
		}
		externalID = "workflow-run-" + wr.id("id")
		name := workflowName(o, wr)
		title = fmt.Sprintf("Workflow: %s - %s", name, first(wr.str("conclusion"), wr.str("status")))
		runTitle := first(wr.str("display_title"), firstLine(wr.obj("head_commit").str("message")))
		description = runTitle
		url = wr.str("html_url")
		stamp = wr.str("updated_at")
		occurred = firstTime(w.ReceivedAt, wr.time("updated_at", false), wr.time("run_started_at", false))
		put(g, "branch", wr.str("head_branch"))
		put(g, "head_sha", wr.str("head_sha"))
		put(g, "conclusion", wr.str("conclusion"))
		put(g, "status", wr.str("status"))
		put(g, "workflow_name", name)
		put(g, "run_title", runTitle)
		put(g, "workflow_url", url)
		if n, ok := wr.num("run_attempt"); ok {
			g["run_attempt"] = int64(n)
		}
		if g["sender"] == nil {
			put(g, "sender", wr.obj("actor").str("login"))
		}
	}

	ctx["title"] = title
	put(ctx, "description", description)
	ctx[GitHub] = g
	providerType, normalized := event, event
	if action != "" {
		providerType += ":" + action
		normalized += "_" + action
	}
	if event == "issues" {
		normalized = "issue_" + action
	}
	return []runs.Event{{
		Provider: GitHub, EventType: normalized, ProviderEventType: providerType,
		OccurredAt: occurred, DedupKey: githubDedupKey(w, externalID, action, stamp),
		Title: truncate(title, 500), URL: url, ExternalID: externalID, Context: ctx,
	}}, nil
}

// githubDedupKey is the delivery id (a redelivery of a GitHub webhook keeps
// its X-GitHub-Delivery); without one (Nango forwards) it is the spec's
// github:{item}:{action}, qualified by the item's update time so that two
// edits of one issue are two events.
func githubDedupKey(w Webhook, externalID, action, stamp string) string {
	if id := deliveryID(w); id != "" {
		return "github:delivery:" + id
	}
	key := "github:" + externalID + ":" + first(action, "event")
	if stamp != "" {
		key += ":" + stamp
	}
	return key
}

func numberOf(o obj) any {
	if n, ok := o.num("number"); ok {
		return int64(n)
	}
	return nil
}

func checksURL(repoURL, sha string) string {
	if repoURL == "" || sha == "" {
		return ""
	}
	return repoURL + "/commit/" + sha + "/checks"
}

func uniq(ss []string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, s := range ss {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// workflowName names a workflow_run's workflow. Real deliveries may carry
// an empty (or null) workflow_run.name, e.g. runs started by
// repository_dispatch; the top-level workflow object names it then, and a
// workflow without a name: is known by its file.
func workflowName(o, wr obj) string {
	wf := o.obj("workflow")
	if n := first(strings.TrimSpace(wr.str("name")), strings.TrimSpace(wf.str("name"))); n != "" {
		return n
	}
	if p := first(wr.str("path"), wf.str("path")); p != "" {
		return path.Base(p)
	}
	return "workflow " + first(wr.id("workflow_id"), wf.id("id"), "(unnamed)")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

// githubEventHasAction: every trigger event of GitHub's but push carries
// an action (opened, completed, requested…).
func githubEventHasAction(event string) bool { return event != "push" }

// matchGitHub applies a GitHub trigger config to a GitHub event.
func matchGitHub(cfg obj, ev ctxView) (bool, string) {
	g := ev.sub(GitHub)
	event, action := g.str("event"), g.str("action")
	if l := cfg.strs("events"); len(l) > 0 && !contains(l, event, false) {
		return false, fmt.Sprintf("event %q is not one of events", event)
	}
	// Push events have no action: the actions filter narrows only the
	// events that have one, so a trigger on push and pull_request with
	// actions [opened] fires on every push and on opened pull requests.
	if l := cfg.strs("actions"); len(l) > 0 && githubEventHasAction(event) {
		merged := event == "pull_request" && action == "closed" && g.boolean("is_merged")
		if !contains(l, action, false) && !(merged && contains(l, "merged", false)) {
			return false, fmt.Sprintf("action %q is not one of actions", action)
		}
	}
	if l := cfg.strs("branches"); len(l) > 0 && event != "issues" {
		branch := g.str("branch")
		if !anyGlob(l, branch, false) {
			return false, fmt.Sprintf("branch %q matches none of branches", branch)
		}
	}
	if l := cfg.strs("labels"); len(l) > 0 && (event == "issues" || event == "pull_request") {
		if !intersects(l, g.strs("labels"), false) {
			return false, "no label matches labels"
		}
	}
	if l := cfg.strs("repos"); len(l) > 0 {
		repo := g.str("repo")
		if !anyGlob(l, repo, true) {
			return false, fmt.Sprintf("repository %q matches none of repos", repo)
		}
	}
	if l := cfg.strs("conclusions"); len(l) > 0 && (event == "check_suite" || event == "check_run" || event == "workflow_run") {
		c := g.str("conclusion")
		if c == "" {
			return false, fmt.Sprintf("%s has no conclusion yet", event)
		}
		if !contains(l, c, false) {
			return false, fmt.Sprintf("conclusion %q is not one of conclusions", c)
		}
	}
	return true, ""
}
