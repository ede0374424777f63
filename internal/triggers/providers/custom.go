package providers

import (
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/proliferate/proliferate/internal/runs"
)

// parseCustom accepts any JSON object. Its dedup key is the caller's
// Idempotency-Key header when sent, else the SHA-256 of the body and the
// 5-minute window of its arrival: the same body posted again within that
// window queues nothing new.
func parseCustom(w Webhook) ([]runs.Event, error) {
	o, err := decodeObject(Custom, w.Body)
	if err != nil {
		return nil, err
	}
	key := "custom:" + bodyWindowKey(w.Body, w.ReceivedAt)
	if k := header(w, "idempotency-key"); k != "" {
		key = "custom:key:" + truncate(k, 200)
	}
	at := w.ReceivedAt.UTC()
	ctx := map[string]any{
		"title":   "Webhook received",
		"payload": map[string]any(o),
		Custom:    map[string]any{"received_at": at.Format("2006-01-02T15:04:05.000Z07:00")},
	}
	return []runs.Event{{
		Provider: Custom, EventType: "webhook_received", ProviderEventType: "webhook:received",
		OccurredAt: at, DedupKey: key, Title: "Webhook received", Context: ctx,
	}}, nil
}

func matchCustom(cfg obj, ev ctxView) (bool, string) {
	payload := map[string]any(ev.obj("payload"))
	for i, c := range cfg.objs("conditions") {
		path := c.str("path")
		v, found := lookupPath(payload, path)
		switch {
		case c.has("exists"):
			if found != c.boolean("exists") {
				if found {
					return false, fmt.Sprintf("conditions[%d]: %s exists", i, path)
				}
				return false, fmt.Sprintf("conditions[%d]: %s does not exist", i, path)
			}
		case c.has("equals"):
			if !found || !jsonEqual(v, c["equals"]) {
				return false, fmt.Sprintf("conditions[%d]: %s does not equal the expected value", i, path)
			}
		case c.has("in"):
			ok := false
			for _, want := range c.list("in") {
				ok = ok || (found && jsonEqual(v, want))
			}
			if !ok {
				return false, fmt.Sprintf("conditions[%d]: %s is not one of the listed values", i, path)
			}
		}
	}
	return true, ""
}

// jsonEqual compares decoded JSON values, numbers by value.
func jsonEqual(a, b any) bool {
	fa, aNum := toFloat(a)
	fb, bNum := toFloat(b)
	if aNum || bNum {
		return aNum && bNum && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, !math.IsNaN(x)
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// lookupPath evaluates a JSON path of the documented subset ($, .name,
// ["name"], [index]) against root. Paths were validated against
// jsonPathPattern; anything else finds nothing.
func lookupPath(root any, path string) (any, bool) {
	steps, ok := parsePath(path)
	if !ok {
		return nil, false
	}
	cur := root
	for _, s := range steps {
		switch x := cur.(type) {
		case map[string]any:
			if s.index >= 0 {
				return nil, false
			}
			v, ok := x[s.key]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			if s.index < 0 || s.index >= len(x) {
				return nil, false
			}
			cur = x[s.index]
		default:
			return nil, false
		}
	}
	return cur, true
}

type pathStep struct {
	key   string
	index int // -1 for a key step
}

func parsePath(path string) ([]pathStep, bool) {
	if len(path) == 0 || path[0] != '$' {
		return nil, false
	}
	var steps []pathStep
	i := 1
	for i < len(path) {
		switch path[i] {
		case '.':
			j := i + 1
			for j < len(path) && (isIdent(path[j]) || (j > i+1 && (path[j] == '-' || isDigit(path[j])))) {
				j++
			}
			if j == i+1 || isDigit(path[i+1]) || path[i+1] == '-' {
				return nil, false
			}
			steps = append(steps, pathStep{key: path[i+1 : j], index: -1})
			i = j
		case '[':
			if i+1 < len(path) && path[i+1] == '"' {
				var key []byte
				j := i + 2
				for ; j < len(path) && path[j] != '"'; j++ {
					if path[j] == '\\' {
						if j+1 >= len(path) || (path[j+1] != '"' && path[j+1] != '\\') {
							return nil, false
						}
						j++
					}
					key = append(key, path[j])
				}
				if j+1 >= len(path) || path[j+1] != ']' {
					return nil, false
				}
				steps = append(steps, pathStep{key: string(key), index: -1})
				i = j + 2
				continue
			}
			j := i + 1
			for j < len(path) && isDigit(path[j]) {
				j++
			}
			if j == i+1 || j >= len(path) || path[j] != ']' || j-i-1 > 6 {
				return nil, false
			}
			n, _ := strconv.Atoi(path[i+1 : j])
			steps = append(steps, pathStep{index: n})
			i = j + 1
		default:
			return nil, false
		}
	}
	return steps, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdent(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || isDigit(c)
}
