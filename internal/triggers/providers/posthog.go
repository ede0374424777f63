package providers

import (
	"fmt"
	"strconv"

	"github.com/proliferate/proliferate/internal/runs"
)

// parsePostHog accepts both forms PostHog posts: the flat form
// {"event": "$pageview", "distinct_id", "properties", "timestamp", "uuid"}
// and the destination form {"event": {"event", "uuid", "distinct_id",
// "properties", "timestamp", "url"}, "person": {…}, "project": {…}}.
func parsePostHog(w Webhook) ([]runs.Event, error) {
	o, err := decodeObject(PostHog, w.Body)
	if err != nil {
		return nil, err
	}
	var name, distinct, ts, uuid, eventURL string
	var props obj
	var tsTime = o.time("timestamp", false)
	switch e := o["event"].(type) {
	case string:
		name, distinct, ts, uuid = e, o.str("distinct_id"), o.str("timestamp"), o.str("uuid")
		props = o.obj("properties")
	case map[string]any:
		eo := obj(e)
		name = eo.str("event")
		distinct = first(eo.str("distinct_id"), o.str("distinct_id"))
		ts = first(eo.str("timestamp"), o.str("timestamp"))
		tsTime = firstTime(tsTime, eo.time("timestamp", false))
		uuid = eo.str("uuid")
		eventURL = eo.str("url")
		props = eo.obj("properties")
		if !eo.isObj("properties") {
			props = o.obj("properties")
		}
	}
	if name == "" {
		return nil, &ParseError{Provider: PostHog, Reason: "no event name (event must be a string or an object with an event field)"}
	}
	if props == nil {
		props = obj{}
	}
	currentURL, _ := props["$current_url"].(string)
	url := first(eventURL, currentURL)
	p := map[string]any{"event": name, "properties": map[string]any(props)}
	put(p, "distinct_id", distinct)
	put(p, "timestamp", ts)
	put(p, "uuid", uuid)
	put(p, "event_url", url)
	if o.isObj("person") {
		p["person"] = map[string]any(o.obj("person"))
	}
	if o.isObj("project") {
		put(p, "project_id", o.obj("project").id("id"))
	}
	title := "PostHog: " + name
	ctx := map[string]any{"title": title, PostHog: p}
	put(ctx, "description", url)

	// Dedup on the event's uuid, else on event, person and time (spec); an
	// event with neither uuid nor timestamp dedups on its body within five
	// minutes rather than forever.
	var key string
	switch {
	case uuid != "":
		key = "posthog:" + uuid
	case ts != "":
		key = "posthog:" + name + ":" + first(distinct, "unknown") + ":" + ts
	default:
		key = "posthog:body:" + bodyWindowKey(w.Body, w.ReceivedAt)
	}
	return []runs.Event{{
		Provider: PostHog, EventType: "posthog_event", ProviderEventType: name,
		OccurredAt: firstTime(w.ReceivedAt, tsTime), DedupKey: key, Title: truncate(title, 500), URL: url,
		ExternalID: first(uuid, distinct, name), Context: ctx,
	}}, nil
}

// scalarString renders a JSON scalar for property comparison ("true", "42",
// "1.5", the string itself).
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}

func matchPostHog(cfg obj, ev ctxView) (bool, string) {
	p := ev.sub(PostHog)
	if names := cfg.strs("event_names"); len(names) > 0 && !contains(names, p.str("event"), false) {
		return false, fmt.Sprintf("event %q is not one of event_names", p.str("event"))
	}
	props := p.obj("properties")
	for _, k := range sortedKeys(cfg.obj("property_filters")) {
		want, _ := scalarString(cfg.obj("property_filters")[k])
		got, ok := scalarString(props[k])
		if !ok || got != want {
			return false, fmt.Sprintf("property %q is not %q", k, want)
		}
	}
	return true, ""
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}
