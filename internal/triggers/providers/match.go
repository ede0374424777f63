package providers

import (
	"encoding/json"
	"strings"

	"github.com/proliferate/proliferate/internal/runs"
)

// ctxView reads a normalized event context.
type ctxView = obj

func matches(provider string, config map[string]any, ev runs.Event) (bool, string) {
	cfg, problems := checkConfig(provider, config)
	if len(problems) > 0 {
		p := problems[0]
		return false, "invalid trigger config: " + joinPath(p.Path, p.Problem)
	}
	if ev.Provider != provider {
		return false, "event from " + ev.Provider + ", trigger for " + provider
	}
	view := ctxView(ev.Context)
	switch provider {
	case GitHub:
		return matchGitHub(cfg, view)
	case Linear:
		return matchLinear(cfg, view)
	case Sentry:
		return matchSentry(cfg, view)
	case PostHog:
		return matchPostHog(cfg, view)
	case Custom:
		return matchCustom(cfg, view)
	case Scheduled, Manual:
		return true, ""
	}
	return false, "unsupported provider " + provider
}

func joinPath(path, problem string) string {
	if path == "" {
		return problem
	}
	return path + ": " + problem
}

// canon returns config with JSON's types (arrays as []any, numbers as
// float64), whatever Go types the caller built it with.
func canon(config map[string]any) (map[string]any, error) {
	if config == nil {
		return map[string]any{}, nil
	}
	b, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}

func contains(list []string, s string, fold bool) bool {
	for _, x := range list {
		if x == s || (fold && strings.EqualFold(x, s)) {
			return true
		}
	}
	return false
}

func intersects(want, have []string, fold bool) bool {
	for _, h := range have {
		if contains(want, h, fold) {
			return true
		}
	}
	return false
}

func anyGlob(patterns []string, s string, fold bool) bool {
	if fold {
		s = strings.ToLower(s)
	}
	for _, p := range patterns {
		if fold {
			p = strings.ToLower(p)
		}
		if globMatch(p, s) {
			return true
		}
	}
	return false
}

// globMatch matches s against a glob: * is any run of characters except /,
// ** any run including /, ? one character except /; everything else is
// literal. An empty s never matches (an event without a branch does not
// match a branch filter).
func globMatch(pattern, s string) bool {
	if s == "" {
		return false
	}
	return glob(pattern, s)
}

// glob runs in O(len(pattern)·len(s)) by dynamic programming, whatever the
// number of wildcards.
func glob(pattern, s string) bool {
	type tok struct {
		kind byte // 'l' literal, '?', '*', 'D' (**)
		r    rune
	}
	var toks []tok
	pr := []rune(pattern)
	for i := 0; i < len(pr); i++ {
		switch {
		case pr[i] == '*' && i+1 < len(pr) && pr[i+1] == '*':
			for i+1 < len(pr) && pr[i+1] == '*' {
				i++
			}
			toks = append(toks, tok{kind: 'D'})
		case pr[i] == '*':
			toks = append(toks, tok{kind: '*'})
		case pr[i] == '?':
			toks = append(toks, tok{kind: '?'})
		default:
			toks = append(toks, tok{kind: 'l', r: pr[i]})
		}
	}
	rs := []rune(s)
	// next[j]: tokens i+1.. match rs[j:]; cur[j]: tokens i.. match rs[j:].
	next := make([]bool, len(rs)+1)
	next[len(rs)] = true
	cur := make([]bool, len(rs)+1)
	for i := len(toks) - 1; i >= 0; i-- {
		t := toks[i]
		for j := len(rs); j >= 0; j-- {
			switch t.kind {
			case 'D':
				cur[j] = next[j] || (j < len(rs) && cur[j+1])
			case '*':
				cur[j] = next[j] || (j < len(rs) && rs[j] != '/' && cur[j+1])
			case '?':
				cur[j] = j < len(rs) && rs[j] != '/' && next[j+1]
			default:
				cur[j] = j < len(rs) && rs[j] == t.r && next[j+1]
			}
		}
		next, cur = cur, next
	}
	return next[0]
}
