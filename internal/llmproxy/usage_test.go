package llmproxy_test

import (
	"fmt"
	"testing"

	"github.com/proliferate/proliferate/internal/llmproxy"
)

func TestCost(t *testing.T) {
	cases := []struct {
		u     llmproxy.Usage
		want  int64
		known bool
	}{
		{llmproxy.Usage{Model: "claude-sonnet-4-5-20250929", InputTokens: 1000, OutputTokens: 1000}, 18_000, true},
		{llmproxy.Usage{Model: "anthropic/claude-sonnet-4-20250514", InputTokens: 1}, 3, true},
		{llmproxy.Usage{Model: "claude-opus-4-5", InputTokens: 1_000_000, CacheWriteTokens: 1_000_000, CacheReadTokens: 1_000_000}, 11_750_000, true},
		{llmproxy.Usage{Model: "claude-opus-4-1-20250805", OutputTokens: 1}, 75, true},
		{llmproxy.Usage{Model: "claude-haiku-4-5", CacheReadTokens: 5}, 1, true},        // 0.5 rounds up
		{llmproxy.Usage{Model: "claude-3-5-haiku-latest", CacheReadTokens: 6}, 0, true}, // 0.48 rounds down
		{llmproxy.Usage{Model: "claude-3-5-haiku-latest", CacheReadTokens: 7}, 1, true}, // 0.56
		{llmproxy.Usage{Model: "claude-sim", InputTokens: 10, OutputTokens: 10}, 180, true},
		// Unknown: the most expensive known price (Opus 4.1), never free.
		{llmproxy.Usage{Model: "gpt-9", InputTokens: 1, OutputTokens: 1}, 90, false},
		{llmproxy.Usage{InputTokens: 1}, 15, false},
	}
	for _, c := range cases {
		got, known := llmproxy.Cost(c.u)
		if got != c.want || known != c.known {
			t.Errorf("%+v: %d (known %v), want %d (%v)", c.u, got, known, c.want, c.known)
		}
	}
}

// stream renders a well-formed Anthropic event stream with the given usage.
func stream(model string, in, cw, cr, out int64, crlf bool) string {
	s := fmt.Sprintf("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":%q,\"content\":[],\"usage\":{\"input_tokens\":%d,\"cache_creation_input_tokens\":%d,\"cache_read_input_tokens\":%d,\"output_tokens\":1}}}\n\n", model, in, cw, cr) +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"message_delta \\\"usage\\\": {\\\"output_tokens\\\": 999}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		fmt.Sprintf("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", out) +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if crlf {
		var b []byte
		for i := 0; i < len(s); i++ {
			if s[i] == '\n' {
				b = append(b, '\r')
			}
			b = append(b, s[i])
		}
		s = string(b)
	}
	return s
}

func TestJSONUsage(t *testing.T) {
	u, ok := llmproxy.ParseJSONUsage([]byte(`{"id":"m","model":"claude-sim","content":[{"type":"text","text":"\"usage\""}],` +
		`"usage":{"input_tokens":5,"output_tokens":7,"cache_creation_input_tokens":11,"cache_read_input_tokens":13}}`))
	if !ok || u != (llmproxy.Usage{Model: "claude-sim", InputTokens: 5, OutputTokens: 7, CacheWriteTokens: 11, CacheReadTokens: 13}) {
		t.Fatalf("%+v %v", u, ok)
	}
	if _, ok := llmproxy.ParseJSONUsage([]byte(`{"type":"error"}`)); ok {
		t.Fatal("usage from an error body")
	}
}

func FuzzUsageParser(f *testing.F) {
	f.Add([]byte(stream("claude-sim", 10, 20, 30, 40, false)), int64(10), int64(20), int64(30), int64(40), uint8(1), false)
	f.Add([]byte("data: {\"type\":\"message_start\"}\r\rdata: x\n\n"), int64(0), int64(0), int64(0), int64(1), uint8(7), true)
	f.Add([]byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-3}}\n\n"), int64(1<<40), int64(3), int64(0), int64(9), uint8(200), false)
	f.Fuzz(func(t *testing.T, junk []byte, in, cw, cr, out int64, chunk uint8, crlf bool) {
		// Arbitrary bytes, in arbitrary chunks: never a panic.
		var p llmproxy.SSEUsageParser
		size := int(chunk%64) + 1
		for i := 0; i < len(junk); i += size {
			_, _ = p.Write(junk[i:min(i+size, len(junk))])
		}
		_, _ = p.Usage()

		// A well-formed stream, split anywhere, yields its usage.
		abs := func(v int64) int64 {
			if v < 0 {
				v = -v
			}
			return v & (1<<53 - 1)
		}
		want := llmproxy.Usage{Model: "claude-sonnet-4-5", InputTokens: abs(in), CacheWriteTokens: abs(cw),
			CacheReadTokens: abs(cr), OutputTokens: abs(out)}
		s := []byte(stream(want.Model, want.InputTokens, want.CacheWriteTokens, want.CacheReadTokens, want.OutputTokens, crlf))
		var q llmproxy.SSEUsageParser
		for i := 0; i < len(s); i += size {
			_, _ = q.Write(s[i:min(i+size, len(s))])
		}
		if got, ok := q.Usage(); !ok || got != want {
			t.Fatalf("chunk %d crlf %v: usage %+v, want %+v", size, crlf, got, want)
		}
	})
}
