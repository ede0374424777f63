package llmsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Script is a scripted conversation: Turns[i] is the assistant's reply to
// the i-th request after the latest user prompt (i counts the assistant
// messages already in the conversation). Requests past the last turn get a
// short closing text, so an agent never loops on a script.
type Script struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Turns       []Turn `json:"turns"`
}

// Turn is one assistant reply: text (streamed in several deltas), tool_use
// blocks, or an API error.
//
// Text, Deltas and the string values of tool inputs may hold placeholders:
// {{prompt}} (the latest user prompt), {{tool_result}} (the text of the
// latest tool result in the conversation), {{workdir}} (the working directory the
// agent's system prompt names) and {{key}} for any "key: value" (or
// "key=value") line found in the user prompts, latest first, then the system
// prompt. Unresolved placeholders are left as they are.
type Turn struct {
	Text string `json:"text,omitempty"`
	// Deltas, when set, are streamed as the text deltas verbatim (Text is
	// then ignored); otherwise Text is split into chunks of a few words.
	Deltas    []string   `json:"deltas,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// DelayMS (or Delay, from Go) pauses before each streamed delta.
	DelayMS int           `json:"delay_ms,omitempty"`
	Delay   time.Duration `json:"-"`
	// Error makes this turn answer with an Anthropic error response.
	Error *ErrorReply `json:"error,omitempty"`
}

// ToolCall is one tool_use block.
type ToolCall struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ErrorReply is an API error a turn answers with. Prefer 4xx statuses in
// tests: OpenCode retries 5xx (and 429/529) forever with backoff.
type ErrorReply struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (t Turn) delay() time.Duration {
	if t.Delay > 0 {
		return t.Delay
	}
	return time.Duration(t.DelayMS) * time.Millisecond
}

// Validate reports what makes a script unusable.
func (s Script) Validate() error {
	if s.Name == "" {
		return errors.New("script has no name")
	}
	if len(s.Turns) == 0 {
		return fmt.Errorf("script %q has no turns", s.Name)
	}
	for i, t := range s.Turns {
		if t.Error == nil && t.Text == "" && len(t.Deltas) == 0 && len(t.ToolCalls) == 0 {
			return fmt.Errorf("script %q turn %d is empty (want text, deltas, tool_calls or error)", s.Name, i)
		}
		if t.Error != nil && (t.Error.Status < 400 || t.Error.Status > 599) {
			return fmt.Errorf("script %q turn %d: error status %d is not 4xx/5xx", s.Name, i, t.Error.Status)
		}
		for j, c := range t.ToolCalls {
			if c.Name == "" {
				return fmt.Errorf("script %q turn %d tool call %d has no name", s.Name, i, j)
			}
			if len(c.Input) > 0 {
				var obj map[string]any
				if err := json.Unmarshal(c.Input, &obj); err != nil {
					return fmt.Errorf("script %q turn %d tool call %q: input must be a JSON object: %w", s.Name, i, c.Name, err)
				}
			}
		}
	}
	return nil
}

// LoadDir reads every *.json file of dir as a Script (a file's name, without
// .json, names the script when the file does not).
func LoadDir(dir string) ([]Script, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("list scripts in %s: %w", dir, err)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("scripts dir: %w", err)
	}
	scripts := make([]Script, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read script %s: %w", p, err)
		}
		var s Script
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("parse script %s: %w", p, err)
		}
		if s.Name == "" {
			s.Name = strings.TrimSuffix(filepath.Base(p), ".json")
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("script %s: %w", p, err)
		}
		scripts = append(scripts, s)
	}
	return scripts, nil
}

// slowWords is the text of the slow script: 200 words.
func slowWords() []string {
	words := make([]string, 200)
	for i := range words {
		words[i] = fmt.Sprintf("word%d ", i+1)
	}
	return words
}

// BuiltinScripts returns the scripts every Server knows.
func BuiltinScripts() []Script {
	return []Script{
		{
			Name:        "hello",
			Description: "streams a multi-sentence text",
			Turns: []Turn{{Text: "Hello! I am the Proliferate scripted model. " +
				"I stream this reply in several small deltas so clients can render tokens as they arrive. " +
				"Nothing here needs a tool. Have a nice day."}},
		},
		{
			Name:        "bash",
			Description: "runs `echo hi > hello.txt` with the bash tool, then reports",
			Turns: []Turn{
				{Text: "I will create hello.txt.", ToolCalls: []ToolCall{{Name: "bash",
					Input: json.RawMessage(`{"command":"echo hi > hello.txt","description":"Write hi into hello.txt"}`)}}},
				{Text: "Created hello.txt containing \"hi\"."},
			},
		},
		{
			Name:        "edit",
			Description: "writes notes.md with the write tool, edits it with the edit tool, then reports",
			Turns: []Turn{
				{ToolCalls: []ToolCall{{Name: "write",
					Input: json.RawMessage(`{"filePath":"{{workdir}}/notes.md","content":"# Notes\n\nstatus: draft\n"}`)}}},
				{ToolCalls: []ToolCall{{Name: "edit",
					Input: json.RawMessage(`{"filePath":"{{workdir}}/notes.md","oldString":"status: draft","newString":"status: done"}`)}}},
				{Text: "Wrote notes.md and marked it done."},
			},
		},
		{
			Name:        "complete",
			Description: "calls automation_complete with the run_id and completion_id found in the prompt",
			Turns: []Turn{
				{Text: "The task is finished; reporting the outcome.", ToolCalls: []ToolCall{{Name: "automation_complete",
					Input: json.RawMessage(`{"run_id":"{{run_id}}","completion_id":"{{completion_id}}","outcome":"succeeded","summary_markdown":"Completed by the scripted model."}`)}}},
				{Text: "Run completed."},
			},
		},
		{
			Name:        "snapshot",
			Description: "calls save_snapshot",
			Turns: []Turn{
				{ToolCalls: []ToolCall{{Name: "save_snapshot",
					Input: json.RawMessage(`{"message":"Environment configured by the scripted model"}`)}}},
				{Text: "Snapshot saved."},
			},
		},
		{
			Name:        "env",
			Description: "asks the user for DEMO_TOKEN with request_env_variables, then checks in bash that it is set (without printing it)",
			Turns: []Turn{
				{Text: "I need a token to continue.", ToolCalls: []ToolCall{{Name: "request_env_variables",
					Input: json.RawMessage(`{"keys":[{"key":"DEMO_TOKEN","type":"secret","description":"Any value: the demo only checks that it arrives"}]}`)}}},
				{ToolCalls: []ToolCall{{Name: "bash",
					Input: json.RawMessage(`{"command":"if [ -n \"$DEMO_TOKEN\" ]; then echo \"DEMO_TOKEN is set (${#DEMO_TOKEN} characters)\"; else echo DEMO_TOKEN is not set; fi","description":"Check that DEMO_TOKEN is set"}`)}}},
				{Text: "{{tool_result}}"},
			},
		},
		{
			Name:        "slow",
			Description: "streams 200 words with a delay before each (for cancel tests)",
			Turns:       []Turn{{Deltas: slowWords(), Delay: 50 * time.Millisecond}},
		},
		{
			Name:        "filter-yes",
			Description: "answers an automation's LLM filter with run: true (put the marker in the filter prompt)",
			Turns:       []Turn{{Text: `{"run": true, "reason": "the scripted model lets every event through"}`}},
		},
		{
			Name:        "filter-no",
			Description: "answers an automation's LLM filter with run: false",
			Turns:       []Turn{{Text: `{"run": false, "reason": "the scripted model declines every event"}`}},
		},
	}
}

var (
	placeholderRE = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}`)
	workdirRE     = regexp.MustCompile(`(?m)Working directory:\s*(\S+)`)
)

// expander resolves placeholders against one request.
type expander struct{ req *Request }

func (e expander) lookup(key string) (string, bool) {
	switch key {
	case "prompt":
		return e.req.LatestPrompt(), true
	case "tool_result":
		return e.req.LastToolResult()
	case "workdir":
		if m := workdirRE.FindStringSubmatch(e.req.SystemText()); m != nil {
			return m[1], true
		}
		return "", false
	}
	re, err := regexp.Compile(`(?m)(?:^|[\s,;(\[])` + regexp.QuoteMeta(key) + `\s*[:=]\s*["'` + "`" + `]?([A-Za-z0-9_./:@+-]+)`)
	if err != nil {
		return "", false
	}
	for i := len(e.req.Messages) - 1; i >= 0; i-- {
		m := e.req.Messages[i]
		if !m.isPrompt() {
			continue
		}
		if sm := re.FindStringSubmatch(m.Text()); sm != nil {
			return sm[1], true
		}
	}
	if sm := re.FindStringSubmatch(e.req.SystemText()); sm != nil {
		return sm[1], true
	}
	return "", false
}

func (e expander) expand(s string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return placeholderRE.ReplaceAllStringFunc(s, func(ph string) string {
		key := placeholderRE.FindStringSubmatch(ph)[1]
		if v, ok := e.lookup(key); ok {
			return v
		}
		return ph
	})
}

// expandJSON expands placeholders in every string of a JSON value.
func (e expander) expandJSON(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage(`{}`), nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("tool input: %w", err)
	}
	out, err := marshal(e.walk(v))
	if err != nil {
		return nil, fmt.Errorf("tool input: %w", err)
	}
	return out, nil
}

func (e expander) walk(v any) any {
	switch x := v.(type) {
	case string:
		return e.expand(x)
	case []any:
		for i := range x {
			x[i] = e.walk(x[i])
		}
		return x
	case map[string]any:
		for k, val := range x {
			x[k] = e.walk(val)
		}
		return x
	default:
		return v
	}
}

// splitText cuts text into chunks of a few words, keeping whitespace, so it
// streams as several deltas.
func splitText(text string, wordsPerChunk int) []string {
	if text == "" {
		return nil
	}
	parts := strings.SplitAfter(text, " ")
	var chunks []string
	for i := 0; i < len(parts); i += wordsPerChunk {
		end := min(i+wordsPerChunk, len(parts))
		if c := strings.Join(parts[i:end], ""); c != "" {
			chunks = append(chunks, c)
		}
	}
	return chunks
}
