package llmsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
)

type sseEvent struct {
	name string
	data map[string]any
}

// post sends a Messages request and returns the response.
func post(t *testing.T, url string, body any, hdr map[string]string) *http.Response {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readSSE parses a whole event stream the way a raw client would.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data line %q: %v", line, err)
			}
			if d["type"] != name {
				t.Fatalf("event %q carries data type %v", name, d["type"])
			}
			out = append(out, sseEvent{name, d})
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func userMsg(text string) map[string]any {
	return map[string]any{"role": "user", "content": text}
}

func msgsReq(stream bool, msgs ...map[string]any) map[string]any {
	return map[string]any{"model": "claude-sim", "max_tokens": 1024, "stream": stream, "messages": msgs}
}

// streamed is what a stream carried, assembled.
type streamed struct {
	names      []string
	text       string
	textDeltas int
	tools      []map[string]any // {id, name, input(parsed)}
	stopReason string
	startUsage map[string]any
	endUsage   map[string]any
}

func assemble(t *testing.T, evs []sseEvent) streamed {
	t.Helper()
	var s streamed
	partial := map[int]*strings.Builder{}
	for _, ev := range evs {
		s.names = append(s.names, ev.name)
		switch ev.name {
		case "message_start":
			s.startUsage = ev.data["message"].(map[string]any)["usage"].(map[string]any)
		case "content_block_start":
			cb := ev.data["content_block"].(map[string]any)
			if cb["type"] == "tool_use" {
				idx := int(ev.data["index"].(float64))
				partial[idx] = &strings.Builder{}
				s.tools = append(s.tools, map[string]any{"id": cb["id"], "name": cb["name"], "index": idx})
			}
		case "content_block_delta":
			d := ev.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				s.text += d["text"].(string)
				s.textDeltas++
			case "input_json_delta":
				partial[int(ev.data["index"].(float64))].WriteString(d["partial_json"].(string))
			}
		case "message_delta":
			s.stopReason = ev.data["delta"].(map[string]any)["stop_reason"].(string)
			s.endUsage = ev.data["usage"].(map[string]any)
		}
	}
	for _, tool := range s.tools {
		var in map[string]any
		if err := json.Unmarshal([]byte(partial[tool["index"].(int)].String()), &in); err != nil {
			t.Fatalf("tool input JSON %q: %v", partial[tool["index"].(int)].String(), err)
		}
		tool["input"] = in
	}
	return s
}

func TestStreamingWireFormat(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()

	resp := post(t, srv.URL+"/v1/messages", msgsReq(true, userMsg("[[script:hello]] hi")), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := assemble(t, readSSE(t, resp.Body))
	want := []string{"message_start", "ping", "content_block_start"}
	if strings.Join(s.names[:3], ",") != strings.Join(want, ",") {
		t.Fatalf("events start %v", s.names)
	}
	n := len(s.names)
	if strings.Join(s.names[n-3:], ",") != "content_block_stop,message_delta,message_stop" {
		t.Fatalf("events end %v", s.names)
	}
	if s.text != llmsim.BuiltinScripts()[0].Turns[0].Text || s.textDeltas < 5 {
		t.Fatalf("text %q in %d deltas", s.text, s.textDeltas)
	}
	if s.stopReason != "end_turn" {
		t.Fatalf("stop_reason %q", s.stopReason)
	}
	for _, k := range []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		if _, ok := s.startUsage[k]; !ok {
			t.Fatalf("message_start usage lacks %s: %v", k, s.startUsage)
		}
	}
	if s.startUsage["input_tokens"].(float64) < 1 || s.endUsage["output_tokens"].(float64) < float64(len(s.text)/8) {
		t.Fatalf("usage start %v end %v", s.startUsage, s.endUsage)
	}
	recs := sim.Records()
	if len(recs) != 1 || recs[0].Script != "hello" || recs[0].Usage.OutputTokens != int(s.endUsage["output_tokens"].(float64)) {
		t.Fatalf("records %+v", recs)
	}
}

func TestNonStreamingJSONOnBothPaths(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	for _, path := range []string{"/v1/messages", "/messages"} {
		resp := post(t, srv.URL+path, msgsReq(false, userMsg("[[script:bash]] go")), nil)
		var m struct {
			ID         string `json:"id"`
			Type       string `json:"type"`
			Role       string `json:"role"`
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Type  string          `json:"type"`
				Text  string          `json:"text"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"content"`
			Usage llmsim.Usage `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") ||
			m.StopReason != "tool_use" || len(m.Content) != 2 || m.Content[1].Name != "bash" ||
			!strings.Contains(string(m.Content[1].Input), "echo hi > hello.txt") || m.Usage.OutputTokens == 0 {
			t.Fatalf("%s: %d %+v", path, resp.StatusCode, m)
		}
	}
}

func TestToolTurnsFollowTheConversation(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	prompt := userMsg("please [[script:bash]]")

	first := assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", msgsReq(true, prompt), nil).Body))
	if first.stopReason != "tool_use" || len(first.tools) != 1 || first.tools[0]["name"] != "bash" ||
		first.tools[0]["input"].(map[string]any)["command"] != "echo hi > hello.txt" {
		t.Fatalf("turn 0: %+v", first)
	}
	// A retry of the same request replays the same turn with the same id.
	retry := assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", msgsReq(true, prompt), nil).Body))
	if len(retry.tools) != 1 || retry.tools[0]["id"] != first.tools[0]["id"] {
		t.Fatalf("retry gave %+v, want the same tool_use id %v", retry.tools, first.tools[0]["id"])
	}
	id := first.tools[0]["id"]
	assistant := map[string]any{"role": "assistant", "content": []any{
		map[string]any{"type": "text", "text": first.text},
		map[string]any{"type": "tool_use", "id": id, "name": "bash", "input": first.tools[0]["input"]},
	}}
	result := map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": id, "content": "(no output)"},
	}}
	second := assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", msgsReq(true, prompt, assistant, result), nil).Body))
	if second.stopReason != "end_turn" || len(second.tools) != 0 || !strings.Contains(second.text, "Created hello.txt") {
		t.Fatalf("turn 1: %+v", second)
	}
	// Past the script's end the model closes politely instead of looping.
	third := assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", msgsReq(true, prompt, assistant, result,
		map[string]any{"role": "assistant", "content": "x"}, result), nil).Body))
	if third.text != "Done." || third.stopReason != "end_turn" {
		t.Fatalf("turn 2: %+v", third)
	}
	// A new prompt restarts the script at turn 0.
	again := assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", msgsReq(true, prompt, assistant, result,
		map[string]any{"role": "assistant", "content": "ok"}, userMsg("again [[script:bash]]")), nil).Body))
	if len(again.tools) != 1 || again.tools[0]["id"] == id {
		t.Fatalf("new prompt: %+v", again.tools)
	}
}

func toolInput(t *testing.T, url string, body map[string]any, hdr map[string]string) (string, map[string]any) {
	t.Helper()
	s := assemble(t, readSSE(t, post(t, url, body, hdr).Body))
	if len(s.tools) != 1 {
		t.Fatalf("want one tool call, got %+v (text %q)", s.tools, s.text)
	}
	return s.tools[0]["name"].(string), s.tools[0]["input"].(map[string]any)
}

func TestPlaceholdersFromPromptAndSystem(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	url := srv.URL + "/v1/messages"

	name, in := toolInput(t, url, msgsReq(true, userMsg("Fix the bug.\nrun_id: run_8f2\ncompletion_id: cmp-77 [[script:complete]]")), nil)
	if name != "automation_complete" || in["run_id"] != "run_8f2" || in["completion_id"] != "cmp-77" || in["outcome"] != "succeeded" {
		t.Fatalf("complete: %s %v", name, in)
	}

	body := msgsReq(true, userMsg("[[script:edit]]"))
	body["system"] = []any{map[string]any{"type": "text", "text": "You are an agent.\n<env>\n  Working directory: /work/ws1\n</env>"}}
	name, in = toolInput(t, url, body, nil)
	if name != "write" || in["filePath"] != "/work/ws1/notes.md" {
		t.Fatalf("edit: %s %v", name, in)
	}

	name, in = toolInput(t, url, msgsReq(true, userMsg("[[script:snapshot]]")), nil)
	if name != "save_snapshot" || in["message"] == "" {
		t.Fatalf("snapshot: %s %v", name, in)
	}
}

func TestScriptSelection(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	url := srv.URL + "/messages"
	text := func(body map[string]any, session string) string {
		hdr := map[string]string{}
		if session != "" {
			hdr["X-Session-Id"] = session
		}
		return assemble(t, readSSE(t, post(t, url, body, hdr).Body)).text
	}
	if got := text(msgsReq(true, userMsg("plain words")), ""); got != "You said: plain words" {
		t.Fatalf("default reply %q", got)
	}
	if err := sim.Register("greet", llmsim.Script{Turns: []llmsim.Turn{{Text: "greetings"}}}); err != nil {
		t.Fatal(err)
	}
	if err := sim.AssignNextSession("greet"); err != nil {
		t.Fatal(err)
	}
	// The session binding wins over a marker and over later prompts.
	if got := text(msgsReq(true, userMsg("[[script:hello]]")), "ses_A"); got != "greetings" {
		t.Fatalf("next-session binding: %q", got)
	}
	if got := text(msgsReq(true, userMsg("other")), "ses_A"); got != "greetings" {
		t.Fatalf("binding kept: %q", got)
	}
	// The queued binding was consumed by ses_A only.
	if got := text(msgsReq(true, userMsg("plain")), "ses_B"); got != "You said: plain" {
		t.Fatalf("ses_B: %q", got)
	}
	if err := sim.AssignSession("ses_B", "greet"); err != nil {
		t.Fatal(err)
	}
	if got := text(msgsReq(true, userMsg("plain")), "ses_B"); got != "greetings" {
		t.Fatalf("explicit binding: %q", got)
	}
	if err := sim.AssignSession("ses_C", "nope"); err == nil {
		t.Fatal("binding to an unknown script succeeded")
	}
	// Title requests get a short title, not the script.
	title := msgsReq(true, map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "Generate a title for this conversation:\n"},
		map[string]any{"type": "text", "text": "Refactor the billing ledger please [[script:hello]]"},
	}})
	title["system"] = "You are a title generator. You output ONLY a thread title. Nothing else."
	if got := text(title, "ses_A"); got != "Refactor the billing ledger please" {
		t.Fatalf("title %q", got)
	}
	var titles int
	for _, r := range sim.Records() {
		if r.Title {
			titles++
		}
	}
	if titles != 1 {
		t.Fatalf("%d title records", titles)
	}
}

func TestUsageSimulatesPromptCaching(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	long := strings.Repeat("You are a careful coding agent. ", 200)
	body := func(prompt string) map[string]any {
		b := msgsReq(true, userMsg(prompt))
		b["system"] = []any{map[string]any{"type": "text", "text": long, "cache_control": map[string]string{"type": "ephemeral"}}}
		return b
	}
	usage := func(prompt string) map[string]any {
		return assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", body(prompt), nil).Body)).endUsage
	}
	u1 := usage("first question")
	u2 := usage("a second, different question")
	if u1["cache_creation_input_tokens"].(float64) < float64(len(long)/5) || u1["cache_read_input_tokens"].(float64) != 0 {
		t.Fatalf("first request usage %v: want a cache write of the system prompt", u1)
	}
	if u2["cache_read_input_tokens"] != u1["cache_creation_input_tokens"] || u2["cache_creation_input_tokens"].(float64) != 0 {
		t.Fatalf("second request usage %v: want a cache read of %v", u2, u1["cache_creation_input_tokens"])
	}
	if u2["input_tokens"].(float64) <= u1["input_tokens"].(float64) || u1["input_tokens"].(float64) > 20 {
		t.Fatalf("uncached input tokens %v then %v: only the prompt should count", u1["input_tokens"], u2["input_tokens"])
	}
	// No breakpoint: everything is plain input.
	u3 := assemble(t, readSSE(t, post(t, srv.URL+"/v1/messages", msgsReq(true, userMsg(long)), nil).Body)).endUsage
	if u3["input_tokens"].(float64) < float64(len(long)/5) || u3["cache_read_input_tokens"].(float64) != 0 {
		t.Fatalf("uncached usage %v", u3)
	}
}

func anthropicError(t *testing.T, resp *http.Response) (string, string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body: %v", err)
	}
	if e.Type != "error" || e.Error.Message == "" {
		t.Fatalf("error shape %+v", e)
	}
	return e.Error.Type, e.Error.Message
}

func TestAuthAndErrorShapes(t *testing.T) {
	sim := llmsim.New(llmsim.Options{APIKey: "secret"})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	url := srv.URL + "/v1/messages"
	cases := []struct {
		name   string
		body   any
		hdr    map[string]string
		status int
		typ    string
	}{
		{"missing key", msgsReq(false, userMsg("hi")), nil, 401, "authentication_error"},
		{"wrong key", msgsReq(false, userMsg("hi")), map[string]string{"x-api-key": "nope"}, 401, "authentication_error"},
		{"no messages", map[string]any{"model": "m"}, map[string]string{"x-api-key": "secret"}, 400, "invalid_request_error"},
		{"bad role", msgsReq(false, map[string]any{"role": "system", "content": "x"}), map[string]string{"x-api-key": "secret"}, 400, "invalid_request_error"},
		{"unknown script", msgsReq(false, userMsg("[[script:nope]]")), map[string]string{"x-api-key": "secret"}, 400, "invalid_request_error"},
	}
	for _, c := range cases {
		resp := post(t, url, c.body, c.hdr)
		typ, msg := anthropicError(t, resp)
		if resp.StatusCode != c.status || typ != c.typ {
			t.Errorf("%s: %d %s (%s), want %d %s", c.name, resp.StatusCode, typ, msg, c.status, c.typ)
		}
	}
	resp := post(t, srv.URL+"/v1/nothing", map[string]any{}, nil)
	if typ, _ := anthropicError(t, resp); resp.StatusCode != 404 || typ != "not_found_error" {
		t.Errorf("unknown route: %d %s", resp.StatusCode, typ)
	}
	// Bearer works as well as x-api-key.
	if resp := post(t, url, msgsReq(false, userMsg("hi")), map[string]string{"Authorization": "Bearer secret"}); resp.StatusCode != 200 {
		t.Errorf("bearer auth: %d", resp.StatusCode)
	}
	// A scripted error turn.
	if err := sim.Register("overloaded", llmsim.Script{Turns: []llmsim.Turn{{Error: &llmsim.ErrorReply{Status: 400, Message: "scripted failure"}}}}); err != nil {
		t.Fatal(err)
	}
	resp = post(t, url, msgsReq(true, userMsg("[[script:overloaded]]")), map[string]string{"x-api-key": "secret"})
	if typ, msg := anthropicError(t, resp); resp.StatusCode != 400 || typ != "invalid_request_error" || msg != "scripted failure" {
		t.Errorf("error turn: %d %s %s", resp.StatusCode, typ, msg)
	}
}

func TestLoadScriptsFromDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("deploy.json", `{"turns":[{"tool_calls":[{"name":"bash","input":{"command":"make deploy ENV={{env}}"}}]},{"text":"Deployed to {{env}}.","delay_ms":1}]}`)
	sim := llmsim.New(llmsim.Options{})
	if err := sim.LoadScripts(dir); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	_, in := toolInput(t, srv.URL+"/v1/messages", msgsReq(true, userMsg("env: staging\n[[script:deploy]]")), nil)
	if in["command"] != "make deploy ENV=staging" {
		t.Fatalf("input %v", in)
	}
	write("broken.json", `{"turns":[{}]}`)
	if err := sim.LoadScripts(dir); err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("broken script dir: %v", err)
	}
	if err := sim.LoadScripts(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing dir loaded")
	}
}

func TestSlowStreamStopsWhenClientLeaves(t *testing.T) {
	sim := llmsim.New(llmsim.Options{})
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data, _ := json.Marshal(msgsReq(true, userMsg("[[script:slow]]")))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(string(data)))
	started := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	deltas := 0
	for deltas < 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "text_delta") {
			deltas++
		}
	}
	if time.Since(started) < 100*time.Millisecond {
		t.Fatalf("three slow deltas arrived in %s: no delay applied", time.Since(started))
	}
	cancel()
	testenv.Eventually(t, 5*time.Second, "the cancelled stream to be recorded", func() bool {
		r := sim.Records()
		return len(r) == 1 && r[0].Status == 499
	})
}

func TestMainServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ln := httptest.NewUnstartedServer(nil) // reserve a free port, then release it
	addr := ln.Listener.Addr().String()
	ln.Close()
	errc := make(chan error, 1)
	go func() { errc <- llmsim.Main(ctx, addr, llmsim.Options{}) }()
	testenv.Eventually(t, 5*time.Second, "llm-sim to answer", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Main: %v", err)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi [[script:bash]]"}],"stream":true}`))
	f.Add([]byte(`{"model":"m","system":[{"type":"text","text":"Working directory: /x","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"run_id: r1 [[script:complete]]"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"ok"}]}]}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":null}]}`))
	f.Add([]byte(`{"model":"m","messages":[]}`))
	f.Add([]byte(`[]`))
	sim := llmsim.New(llmsim.Options{})
	h := sim.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := llmsim.ParseRequest(body)
		if err != nil {
			return
		}
		if ti := req.TurnIndex(); ti < 0 || ti > len(req.Messages) {
			t.Fatalf("turn index %d of %d messages", ti, len(req.Messages))
		}
		_ = req.LatestPrompt()
		// Whatever parses must be answered without a server error.
		req.Stream = false
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(string(body))))
		if rec.Code != 200 && rec.Code != 400 {
			t.Fatalf("status %d for a parseable body: %s", rec.Code, rec.Body.String())
		}
		if !json.Valid(rec.Body.Bytes()) && !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			t.Fatalf("invalid JSON answer %q", rec.Body.String())
		}
	})
}
