package providers

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Each provider's config is described once, as a JSON Schema (draft 2020-12);
// ValidateConfig interprets that same schema (the subset of keywords used
// here), so the document GET /providers serves and the checks applied on
// create can never disagree.

const draft = "https://json-schema.org/draft/2020-12/schema"

// jsonPathPattern is the JSON path subset custom conditions accept: $, then
// .name, ["name"] (with \" and \\ escapes) or [index] steps.
const jsonPathPattern = `^\$(\.[A-Za-z_][A-Za-z0-9_-]*|\[[0-9]{1,6}\]|\["([^"\\]|\\["\\])*"\])*$`

var patternProblems = map[string]string{
	jsonPathPattern: `must be a JSON path such as $.a.b[0].c (steps: .name, ["name"], [index])`,
}

var compiledPatterns = map[string]*regexp.Regexp{
	jsonPathPattern: regexp.MustCompile(jsonPathPattern),
}

func strList(desc string, maxLen int, extra map[string]any) map[string]any {
	item := map[string]any{"type": "string", "minLength": 1, "maxLength": maxLen}
	for k, v := range extra {
		item[k] = v
	}
	return map[string]any{"type": "array", "description": desc, "items": item, "maxItems": 50, "uniqueItems": true}
}

func enumList(desc string, values []string) map[string]any {
	return map[string]any{"type": "array", "description": desc, "items": map[string]any{"type": "string", "enum": toAny(values)},
		"maxItems": len(values), "uniqueItems": true}
}

func objectSchema(id, title string, props map[string]any) map[string]any {
	return map[string]any{"$schema": draft, "$id": "https://proliferate.dev/schemas/triggers/" + id + ".json", "title": title,
		"type": "object", "additionalProperties": false, "properties": props}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

var sentryLevels = []string{"debug", "info", "warning", "error", "fatal"}

var schemas = map[string]map[string]any{
	GitHub: objectSchema("github", "GitHub trigger config", map[string]any{
		"events":  enumList("Event types to fire on (empty: all).", githubEvents),
		"actions": strList(`Payload actions to fire on, e.g. opened, closed, completed; "merged" matches a merged pull request's close. Push events have no action and are not filtered by it.`, 100, nil),
		"branches": strList("Branch globs (* within a path segment, ** across segments, ?): the pushed branch, a pull request's base branch, "+
			"a check's or workflow run's head branch. Issues are not filtered by branch.", 255, nil),
		"labels":      strList("Fire only for issues and pull requests with any of these labels.", 100, nil),
		"repos":       strList(`Repository globs on "owner/name", case-insensitive.`, 200, nil),
		"conclusions": enumList("Conclusions of check suites, check runs and workflow runs to fire on (runs without a conclusion yet do not match).", githubConclusions),
	}),
	Linear: objectSchema("linear", "Linear trigger config", map[string]any{
		"team_id":      map[string]any{"type": "string", "minLength": 1, "maxLength": 100, "description": "Team id or key (e.g. ENG)."},
		"states":       strList("Workflow state names (case-insensitive).", 100, nil),
		"priorities":   map[string]any{"type": "array", "description": "Priorities: 0 none, 1 urgent, 2 high, 3 medium, 4 low.", "items": map[string]any{"type": "integer", "minimum": 0, "maximum": 4}, "maxItems": 5, "uniqueItems": true},
		"labels":       strList("Fire for issues with any of these label names (case-insensitive).", 100, nil),
		"assignee_ids": strList("Assignee user ids.", 100, nil),
		"project_ids":  strList("Project ids.", 100, nil),
		"actions":      enumList("Webhook actions to fire on.", []string{"create", "update"}),
		"poll_interval_seconds": map[string]any{"type": "integer", "minimum": 10, "maximum": 86400,
			"description": "Polling triggers: how often the poll group polls (the smallest of its triggers' intervals; default 60)."},
	}),
	Sentry: objectSchema("sentry", "Sentry trigger config", map[string]any{
		"project_slug": map[string]any{"type": "string", "minLength": 1, "maxLength": 100, "description": "Sentry project slug."},
		"environments": strList("Environments (from the event's environment or tags).", 100, nil),
		"min_level":    map[string]any{"type": "string", "enum": toAny(sentryLevels), "description": "Minimum level: debug < info < warning < error < fatal (unknown levels count as error)."},
	}),
	PostHog: objectSchema("posthog", "PostHog trigger config", map[string]any{
		"event_names": strList("Event names to fire on, e.g. $pageview.", 200, nil),
		"property_filters": map[string]any{"type": "object", "description": "Event properties that must equal these values.",
			"additionalProperties": map[string]any{"type": []any{"string", "number", "boolean"}}, "maxProperties": 50},
	}),
	Custom: objectSchema("custom", "Custom webhook trigger config", map[string]any{
		"conditions": map[string]any{"type": "array", "maxItems": 20,
			"description": `Conditions on the JSON body, all of which must hold. path is a JSON path ($, then .name, ["name"] or [index]); ` +
				"equals compares the value (any JSON), in lists allowed values, exists: true/false requires the path to exist or not.",
			"items": map[string]any{"type": "object", "additionalProperties": false, "required": []any{"path"},
				"properties": map[string]any{
					"path":   map[string]any{"type": "string", "minLength": 1, "maxLength": 500, "pattern": jsonPathPattern},
					"equals": map[string]any{},
					"in":     map[string]any{"type": "array", "minItems": 1, "maxItems": 100},
					"exists": map[string]any{"type": "boolean"},
				},
				"oneOf": []any{
					map[string]any{"required": []any{"equals"}},
					map[string]any{"required": []any{"in"}},
					map[string]any{"required": []any{"exists"}},
				},
			}},
	}),
	Scheduled: objectSchema("scheduled", "Scheduled trigger config (the cron expression lives on the schedule)", map[string]any{}),
	Manual:    objectSchema("manual", "Manual (Run Now) trigger config", map[string]any{}),
}

var infos = []struct {
	id, name string
	types    []string
}{
	{GitHub, "GitHub", []string{"webhook"}},
	{Linear, "Linear", []string{"webhook", "polling"}},
	{Sentry, "Sentry", []string{"webhook"}},
	{PostHog, "PostHog", []string{"webhook"}},
	{Custom, "Custom webhook", []string{"webhook"}},
	{Scheduled, "Schedule", []string{"scheduled"}},
	{Manual, "Manual", []string{"manual"}},
}

func providerInfos() []Info {
	out := make([]Info, 0, len(infos))
	for _, in := range infos {
		out = append(out, Info{ID: in.id, Name: in.name, TriggerTypes: append([]string(nil), in.types...),
			ConfigSchema: deepCopy(schemas[in.id]).(map[string]any)})
	}
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

func validateConfig(provider string, config map[string]any) []ConfigProblem {
	_, problems := checkConfig(provider, config)
	return problems
}

// checkConfig validates config against the provider's schema and returns it
// in canonical (JSON-decoded) form.
func checkConfig(provider string, config map[string]any) (obj, []ConfigProblem) {
	schema, ok := schemas[provider]
	if !ok {
		return nil, []ConfigProblem{{Path: "", Problem: fmt.Sprintf("unknown trigger provider %q", provider)}}
	}
	cfg, err := canon(config)
	if err != nil {
		return nil, []ConfigProblem{{Path: "", Problem: "must be a JSON object"}}
	}
	var problems []ConfigProblem
	validate(schema, cfg, "", &problems)
	return obj(cfg), problems
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// childPath appends key to a JSON path: .key, or ["key"] when key is not a
// plain identifier.
func childPath(parent, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(key)
		return parent + "[" + key + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func indexPath(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

func typeName(t string) string {
	switch t {
	case "object", "array", "integer":
		return "an " + t
	}
	return "a " + t
}

func hasType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "null":
		return v == nil
	}
	return false
}

func intOf(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case float64:
		return int(x)
	}
	return 0
}

// validate checks v against schema (the keywords the schemas above use),
// appending problems in a stable order.
func validate(schema map[string]any, v any, path string, problems *[]ConfigProblem) {
	add := func(p string, msg string) { *problems = append(*problems, ConfigProblem{Path: p, Problem: msg}) }
	if t, ok := schema["type"]; ok {
		var types []string
		switch x := t.(type) {
		case string:
			types = []string{x}
		case []any:
			for _, e := range x {
				types = append(types, e.(string))
			}
		}
		okType := false
		for _, t := range types {
			okType = okType || hasType(v, t)
		}
		if !okType {
			names := make([]string, len(types))
			for i, t := range types {
				names[i] = typeName(t)
			}
			add(path, "must be "+strings.Join(names, " or "))
			return
		}
	}
	if enum, ok := schema["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || reflect.DeepEqual(e, v)
		}
		if !found {
			vals := make([]string, len(enum))
			for i, e := range enum {
				vals[i] = fmt.Sprint(e)
			}
			add(path, "must be one of: "+strings.Join(vals, ", "))
			return
		}
	}
	switch x := v.(type) {
	case string:
		n := len([]rune(x))
		if m, ok := schema["minLength"]; ok && n < intOf(m) {
			if intOf(m) == 1 {
				add(path, "must not be empty")
			} else {
				add(path, fmt.Sprintf("must be at least %d characters", intOf(m)))
			}
			return
		}
		if m, ok := schema["maxLength"]; ok && n > intOf(m) {
			add(path, fmt.Sprintf("must be at most %d characters", intOf(m)))
			return
		}
		if p, ok := schema["pattern"].(string); ok && !compiledPatterns[p].MatchString(x) {
			add(path, first(patternProblems[p], "does not match "+p))
		}
	case float64:
		if m, ok := schema["minimum"]; ok && x < float64(intOf(m)) {
			add(path, fmt.Sprintf("must be at least %d", intOf(m)))
		}
		if m, ok := schema["maximum"]; ok && x > float64(intOf(m)) {
			add(path, fmt.Sprintf("must be at most %d", intOf(m)))
		}
	case []any:
		if m, ok := schema["minItems"]; ok && len(x) < intOf(m) {
			add(path, fmt.Sprintf("must have at least %d item(s)", intOf(m)))
		}
		if m, ok := schema["maxItems"]; ok && len(x) > intOf(m) {
			add(path, fmt.Sprintf("must have at most %d items", intOf(m)))
			return
		}
		items, _ := schema["items"].(map[string]any)
		for i, e := range x {
			if items != nil {
				validate(items, e, indexPath(path, i), problems)
			}
			if schema["uniqueItems"] == true {
				for j := 0; j < i; j++ {
					if reflect.DeepEqual(x[j], e) {
						add(indexPath(path, i), fmt.Sprintf("repeats item %d", j))
						break
					}
				}
			}
		}
	case map[string]any:
		if m, ok := schema["maxProperties"]; ok && len(x) > intOf(m) {
			add(path, fmt.Sprintf("must have at most %d keys", intOf(m)))
			return
		}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if _, ok := x[r.(string)]; !ok {
					add(childPath(path, r.(string)), "is required")
				}
			}
		}
		props, _ := schema["properties"].(map[string]any)
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]any); ok {
				validate(ps, x[k], childPath(path, k), problems)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case bool:
				if !ap {
					add(childPath(path, k), "unknown key")
				}
			case map[string]any:
				validate(ap, x[k], childPath(path, k), problems)
			}
		}
		if one, ok := schema["oneOf"].([]any); ok {
			matched := 0
			var names []string
			for _, alt := range one {
				req := alt.(map[string]any)["required"].([]any)
				all := true
				for _, r := range req {
					names = append(names, r.(string))
					_, has := x[r.(string)]
					all = all && has
				}
				if all {
					matched++
				}
			}
			if matched != 1 {
				add(path, "must have exactly one of: "+strings.Join(names, ", "))
			}
		}
	}
}
