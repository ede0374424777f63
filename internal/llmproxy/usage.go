package llmproxy

import (
	"bytes"
	"encoding/json"
)

// Usage is what one Messages API response consumed, as the upstream reported
// it: the model and the four token counts Anthropic bills separately.
type Usage struct {
	Model            string
	InputTokens      int64
	OutputTokens     int64
	CacheWriteTokens int64 // cache_creation_input_tokens
	CacheReadTokens  int64 // cache_read_input_tokens
}

// Total is the sum of every token count.
func (u Usage) Total() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheWriteTokens + u.CacheReadTokens
}

// usageJSON is Anthropic's usage object; absent fields stay nil so that a
// message_delta only overrides the counts it carries.
type usageJSON struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

func (j *usageJSON) applyTo(u *Usage) {
	if j == nil {
		return
	}
	set := func(dst *int64, v *int64) {
		if v != nil && *v >= 0 {
			*dst = *v
		}
	}
	set(&u.InputTokens, j.InputTokens)
	set(&u.OutputTokens, j.OutputTokens)
	set(&u.CacheWriteTokens, j.CacheCreationInputTokens)
	set(&u.CacheReadTokens, j.CacheReadInputTokens)
}

// ParseJSONUsage reads the model and top-level usage of a non-streamed
// Messages API response; ok is false when the body carries no usage.
func ParseJSONUsage(body []byte) (u Usage, ok bool) {
	var m struct {
		Model string     `json:"model"`
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(body, &m) != nil || m.Usage == nil {
		return Usage{}, false
	}
	u.Model = m.Model
	m.Usage.applyTo(&u)
	return u, true
}

// maxEventBytes bounds the data the parser keeps for one SSE event; usage
// events are a few hundred bytes, so a larger one is not one we read.
const maxEventBytes = 1 << 20

// SSEUsageParser extracts usage from an Anthropic event stream fed to it in
// arbitrary chunks (it is an io.Writer, so the proxy tees the bytes it
// forwards into it): the model and usage of message_start, then the
// cumulative usage of each message_delta. Other events are skipped without
// decoding. It never fails; malformed input just yields no usage.
type SSEUsageParser struct {
	line     []byte // the current, incomplete line
	skipLine bool   // the current line outgrew maxEventBytes
	lastCR   bool   // the previous chunk ended in \r (a \n next ends nothing)
	event    []byte // the current event's name
	data     []byte // the current event's data lines, joined by \n
	hasData  bool
	skipData bool // the current event's data outgrew maxEventBytes

	usage Usage
	seen  bool
}

// Write feeds stream bytes; it always consumes all of p.
func (p *SSEUsageParser) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		if p.lastCR {
			p.lastCR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			p.appendLine(b)
			break
		}
		p.appendLine(b[:i])
		if b[i] == '\r' {
			p.lastCR = true
		}
		b = b[i+1:]
		p.endLine()
	}
	return n, nil
}

func (p *SSEUsageParser) appendLine(b []byte) {
	if p.skipLine {
		return
	}
	if len(p.line)+len(b) > maxEventBytes {
		p.skipLine = true
		p.line = p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

func (p *SSEUsageParser) endLine() {
	line, skipped := p.line, p.skipLine
	p.line, p.skipLine = p.line[:0], false
	if skipped {
		// An overlong line can only be data of an event we cannot read.
		p.skipData = true
		return
	}
	if len(line) == 0 {
		p.dispatch()
		return
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "event":
		p.event = append(p.event[:0], value...)
	case "data":
		if p.skipData || !p.interesting() {
			return
		}
		if len(p.data)+len(value)+1 > maxEventBytes {
			p.skipData = true
			return
		}
		if p.hasData {
			p.data = append(p.data, '\n')
		}
		p.data = append(p.data, value...)
		p.hasData = true
	}
}

// interesting reports whether the current event may carry usage: named
// message_start or message_delta, or unnamed (its data's type decides).
func (p *SSEUsageParser) interesting() bool {
	switch string(p.event) {
	case "", "message_start", "message_delta":
		return true
	}
	return false
}

func (p *SSEUsageParser) dispatch() {
	defer func() {
		p.event, p.data, p.hasData, p.skipData = p.event[:0], p.data[:0], false, false
	}()
	if !p.hasData || p.skipData || !p.interesting() {
		return
	}
	if !bytes.Contains(p.data, []byte("message_start")) && !bytes.Contains(p.data, []byte("message_delta")) {
		return
	}
	var d struct {
		Type    string `json:"type"`
		Message *struct {
			Model string     `json:"model"`
			Usage *usageJSON `json:"usage"`
		} `json:"message"`
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(p.data, &d) != nil {
		return
	}
	switch d.Type {
	case "message_start":
		if d.Message == nil {
			return
		}
		if d.Message.Model != "" {
			p.usage.Model = d.Message.Model
		}
		if d.Message.Usage != nil {
			d.Message.Usage.applyTo(&p.usage)
			p.seen = true
		}
	case "message_delta":
		if d.Usage != nil {
			d.Usage.applyTo(&p.usage)
			p.seen = true
		}
	}
}

// Usage returns what the stream reported so far; ok is false when no usage
// was seen at all.
func (p *SSEUsageParser) Usage() (u Usage, ok bool) {
	return p.usage, p.seen
}
