package llmproxy

import (
	"regexp"
	"strings"
)

// Price is a model's list price in micro-dollars per million tokens.
type Price struct {
	Input      int64
	Output     int64
	CacheWrite int64 // 5-minute prompt-cache write
	CacheRead  int64
}

// usd converts dollars per million tokens to micro-dollars per million.
func usd(dollars float64) int64 { return int64(dollars*1_000_000 + 0.5) }

var (
	opus4    = Price{Input: usd(15), Output: usd(75), CacheWrite: usd(18.75), CacheRead: usd(1.50)}
	opus45   = Price{Input: usd(5), Output: usd(25), CacheWrite: usd(6.25), CacheRead: usd(0.50)}
	sonnet4  = Price{Input: usd(3), Output: usd(15), CacheWrite: usd(3.75), CacheRead: usd(0.30)}
	haiku45  = Price{Input: usd(1), Output: usd(5), CacheWrite: usd(1.25), CacheRead: usd(0.10)}
	haiku35  = Price{Input: usd(0.80), Output: usd(4), CacheWrite: usd(1), CacheRead: usd(0.08)}
	priciest = opus4
)

// prices are Anthropic's public per-MTok prices by model id without its date
// suffix (standard context; Sonnet's >200k-token long-context tier is not
// modelled). The scripted model (llm-sim) is priced like Sonnet so the
// development stack shows real-looking spend.
var prices = map[string]Price{
	"claude-opus-4-5":   opus45,
	"claude-opus-4-1":   opus4,
	"claude-opus-4-0":   opus4,
	"claude-opus-4":     opus4,
	"claude-sonnet-4-5": sonnet4,
	"claude-sonnet-4-0": sonnet4,
	"claude-sonnet-4":   sonnet4,
	"claude-3-7-sonnet": sonnet4,
	"claude-haiku-4-5":  haiku45,
	"claude-3-5-haiku":  haiku35,
	"claude-sim":        sonnet4,
}

// dateSuffix is a snapshot suffix: -20250929 or -latest.
var dateSuffix = regexp.MustCompile(`-(\d{8}|latest)$`)

// PriceOf returns the price of a model id as the API reports it
// ("claude-sonnet-4-5-20250929", "anthropic/claude-sonnet-4-5", "claude-sim").
// An unknown model gets the most expensive known price and known = false:
// never free.
func PriceOf(model string) (p Price, known bool) {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	m = dateSuffix.ReplaceAllString(m, "")
	if p, ok := prices[m]; ok {
		return p, true
	}
	if strings.HasPrefix(m, "claude-sim") {
		return sonnet4, true
	}
	return priciest, false
}

// maxTokens caps each count so the integer maths cannot overflow (4 × 2^30
// tokens × $75/MTok stays far below 2^63).
const maxTokens = 1 << 30

// Cost is the request's cost in micro-dollars, computed exactly in integers
// and rounded half up once per request; known is false when the model was
// not in the price table.
func Cost(u Usage) (micros int64, known bool) {
	p, known := PriceOf(u.Model)
	clamp := func(n int64) int64 { return min(max(n, 0), maxTokens) }
	perMillion := clamp(u.InputTokens)*p.Input + clamp(u.OutputTokens)*p.Output +
		clamp(u.CacheWriteTokens)*p.CacheWrite + clamp(u.CacheReadTokens)*p.CacheRead
	return (perMillion + 500_000) / 1_000_000, known
}
