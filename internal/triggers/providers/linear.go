package providers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/runs"
)

func parseLinear(w Webhook) ([]runs.Event, error) {
	o, err := decodeObject(Linear, w.Body)
	if err != nil {
		return nil, err
	}
	if o.str("type") != "Issue" {
		return nil, nil // comments, projects, cycles…: no trigger listens to them
	}
	action := o.str("action")
	if action != "create" && action != "update" {
		return nil, nil // remove (and future actions) never start a run
	}
	if !o.isObj("data") {
		return nil, &ParseError{Provider: Linear, Reason: "Issue webhook without a data object"}
	}
	fallback := firstTime(w.ReceivedAt, o.time("webhookTimestamp", true), o.time("createdAt", false))
	ev, err := linearIssueEvent(o.obj("data"), action, deliveryID(w), fallback)
	if err != nil {
		return nil, err
	}
	l := ev.Context[Linear].(map[string]any)
	if ev.URL == "" {
		ev.URL = o.str("url")
		put(l, "issue_url", ev.URL)
	}
	if from := o.obj("updatedFrom"); len(from) > 0 {
		changed := make([]string, 0, len(from))
		for k := range from {
			changed = append(changed, k)
		}
		sortStrings(changed)
		l["changed_fields"] = changed
	}
	put(l, "actor", o.obj("actor").str("name"))
	return []runs.Event{ev}, nil
}

func linearIssueEvent(issue map[string]any, action, delivery string, fallback time.Time) (runs.Event, error) {
	is := obj(issue)
	id := is.str("id")
	if id == "" {
		return runs.Event{}, &ParseError{Provider: Linear, Reason: "issue without id"}
	}
	if action != "create" && action != "update" {
		return runs.Event{}, &ParseError{Provider: Linear, Reason: fmt.Sprintf("unsupported issue action %q", action)}
	}
	labels, labelIDs := []string{}, is.strs("labelIds")
	labelObjs := is.objs("labels")
	if len(labelObjs) == 0 {
		labelObjs = is.obj("labels").objs("nodes") // GraphQL connection
	}
	for _, lb := range labelObjs {
		if n := lb.str("name"); n != "" {
			labels = append(labels, n)
		}
		if lid := lb.str("id"); lid != "" && !contains(labelIDs, lid, false) {
			labelIDs = append(labelIDs, lid)
		}
	}
	priority := int64(0) // Linear: 0 means no priority
	if p, ok := is.num("priority"); ok && p >= 0 && p <= 4 {
		priority = int64(p)
	}
	l := map[string]any{"issue_id": id, "action": action, "priority": priority, "labels": labels, "label_ids": labelIDs}
	put(l, "identifier", is.str("identifier"))
	if n, ok := is.num("number"); ok {
		l["issue_number"] = int64(n)
	}
	put(l, "title", is.str("title"))
	put(l, "state", is.obj("state").str("name"))
	put(l, "state_type", is.obj("state").str("type"))
	put(l, "state_id", first(is.obj("state").str("id"), is.str("stateId")))
	put(l, "priority_label", is.str("priorityLabel"))
	put(l, "assignee_id", first(is.obj("assignee").str("id"), is.str("assigneeId")))
	put(l, "assignee_name", is.obj("assignee").str("name"))
	put(l, "project_id", first(is.obj("project").str("id"), is.str("projectId")))
	put(l, "project_name", is.obj("project").str("name"))
	put(l, "team_id", first(is.obj("team").str("id"), is.str("teamId")))
	put(l, "team_key", is.obj("team").str("key"))
	put(l, "team_name", is.obj("team").str("name"))
	put(l, "issue_url", is.str("url"))
	put(l, "created_at", is.str("createdAt"))
	put(l, "updated_at", is.str("updatedAt"))

	name := first(is.str("title"), "Untitled")
	title := "Linear Issue: " + name
	if ident := is.str("identifier"); ident != "" {
		title = "Linear Issue " + ident + ": " + name
	}
	ctx := map[string]any{"title": title, Linear: l}
	put(ctx, "description", is.str("description"))

	// A create happens once per issue; each update is its own event, told
	// apart by the issue's updatedAt (the delivery id when it has none).
	key := "linear:" + id + ":" + action
	if action == "update" {
		stamp := first(is.str("updatedAt"), delivery)
		if stamp == "" {
			stamp = strconv.FormatInt(fallback.UnixMilli(), 10)
		}
		key += ":" + stamp
	}
	occurred := firstTime(fallback, is.time("createdAt", false))
	if action == "update" {
		occurred = firstTime(fallback, is.time("updatedAt", false))
	}
	verb := map[string]string{"create": "created", "update": "updated"}[action]
	return runs.Event{
		Provider: Linear, EventType: "issue_" + verb, ProviderEventType: "Issue:" + action,
		OccurredAt: occurred, DedupKey: key, Title: truncate(title, 500), URL: is.str("url"), ExternalID: id, Context: ctx,
	}, nil
}

func matchLinear(cfg obj, ev ctxView) (bool, string) {
	l := ev.sub(Linear)
	if team := cfg.str("team_id"); team != "" {
		if l.str("team_id") != team && !strings.EqualFold(l.str("team_key"), team) {
			return false, fmt.Sprintf("team %q is not %q", first(l.str("team_key"), l.str("team_id")), team)
		}
	}
	if s := cfg.strs("states"); len(s) > 0 && !contains(s, l.str("state"), true) {
		return false, fmt.Sprintf("state %q is not one of states", l.str("state"))
	}
	if ps := cfg.list("priorities"); len(ps) > 0 {
		p, _ := l.num("priority")
		found := false
		for _, x := range ps {
			f, _ := x.(float64)
			found = found || f == p
		}
		if !found {
			return false, fmt.Sprintf("priority %v is not one of priorities", p)
		}
	}
	if s := cfg.strs("labels"); len(s) > 0 && !intersects(s, l.strs("labels"), true) {
		return false, "no label matches labels"
	}
	if s := cfg.strs("assignee_ids"); len(s) > 0 && !contains(s, l.str("assignee_id"), false) {
		return false, "assignee is not one of assignee_ids"
	}
	if s := cfg.strs("project_ids"); len(s) > 0 && !contains(s, l.str("project_id"), false) {
		return false, "project is not one of project_ids"
	}
	if s := cfg.strs("actions"); len(s) > 0 && !contains(s, l.str("action"), false) {
		return false, fmt.Sprintf("action %q is not one of actions", l.str("action"))
	}
	return true, ""
}
