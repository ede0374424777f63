package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
)

// buildCLI builds the proliferate binary once per test binary (removed
// when the tests end): the agent runs it as `proliferate actions …`
// inside its sandbox.
var buildCLI = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "proliferate-cli-")
	if err != nil {
		return "", err
	}
	testenv.AtExit(func() { _ = os.RemoveAll(dir) }) // ~80 MB a run
	bin := filepath.Join(dir, "proliferate")
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build the CLI: %w", err)
	}
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/proliferate/proliferate/cmd/proliferate").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/proliferate: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "actions", "--help").CombinedOutput(); err != nil {
		return "", fmt.Errorf("proliferate actions --help: %v (is the actions command dispatched in main.go?)\n%s", err, out)
	}
	return dir, nil
})

// The headline of actions: the real agent, scripted to run
// `proliferate actions run … create_issue` with its bash tool, asks for a
// Linear write that needs approval; the CLI waits; the org's owner,
// connected over the WebSocket, receives action_approval_request and
// approves over HTTP; the action runs once against Linear (faked with its
// GraphQL wire format), the CLI prints the created issue, and the agent's
// turn ends with it.
func TestAgentActionApprovedByAPerson(t *testing.T) {
	binDir, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	// The agent inherits PATH from the gateway process: the CLI is found as
	// `proliferate` (the local provider's CLIPath link is tested in
	// internal/sandbox/local; here the test binary is not named proliferate).
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))

	linear := apptest.NewLinearViaNango(t, "lin_tok_e2e")
	lin := linear.Linear

	dir := t.TempDir()
	cfg := devConfig(t, filepath.Join(dir, "kafka"), append([]string{"RUN_SESSIONS", "gateway"}, linear.Overrides()...)...)
	dev := startDev(t, cfg)
	testenv.Eventually(t, 30*time.Second, "the gateway to listen", func() bool { return dev.app.GatewayAddr() != "" })
	base := "http://" + dev.app.APIAddr()
	gwBase := "http://" + dev.app.GatewayAddr()
	ctx := context.Background()

	var signup struct {
		AccessToken string `json:"access_token"`
		User        struct {
			ID          string `json:"id"`
			ActiveOrgID string `json:"active_org_id"`
		} `json:"user"`
	}
	if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": fmt.Sprintf("actions-%d@example.com", time.Now().UnixNano()),
		"password": "correct horse battery", "name": "Ada"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	token, orgID, userID := signup.AccessToken, signup.User.ActiveOrgID, signup.User.ID

	// The org's Linear integration, connected through Nango (whose fake
	// hands out the token Linear's fake accepts).
	linear.Connect(t, dev.app.Pool, orgID, userID)

	const command = `proliferate actions run --integration linear --action create_issue ` +
		`--params '{"teamId":"team-eng","title":"From the agent"}'`
	if dev.app.LLMSim == nil {
		t.Fatal("the gateway started no scripted LLM")
	}
	if err := dev.app.LLMSim.Register("linear-action", llmsim.Script{Turns: []llmsim.Turn{
		{Text: "I will file the issue.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: mustJSON(t, map[string]any{
			"command": command, "description": "Create the Linear issue", "timeout": 300000})}}},
		{Text: "Filed: {{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}

	var sess struct {
		ID string `json:"id"`
	}
	if code := apiCall(t, base, "POST", "/sessions", token, map[string]any{"title": "File an issue"}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	gw := client.New(gwBase, token)
	var got frames
	wsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := gw.Connect(wsCtx, sess.ID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 60*time.Second, "init", func() bool { return got.count(protocol.MsgInit) > 0 })
	if err := conn.Prompt("File a Linear issue. [[script:linear-action]]"); err != nil {
		t.Fatal(err)
	}

	// The person's client hears the request; nothing ran yet.
	testenv.Eventually(t, 120*time.Second, "action_approval_request", func() bool { return got.count(protocol.MsgActionApprovalRequest) > 0 })
	var req protocol.ActionApprovalRequestMessage
	if err := got.first(protocol.MsgActionApprovalRequest).Decode(&req); err != nil {
		t.Fatal(err)
	}
	inv := req.Invocation
	var params map[string]any
	_ = json.Unmarshal(inv.Params, &params)
	if inv.Integration != "linear" || inv.Action != "create_issue" || inv.Status != "pending" || inv.SessionID != sess.ID ||
		params["title"] != "From the agent" || params["teamId"] != "team-eng" {
		t.Fatalf("approval request %+v params %v", inv, params)
	}
	if n := lin.MutationCount(); n != 0 {
		t.Fatalf("%d Linear mutations before the approval", n)
	}
	if got.count(protocol.MsgMessageComplete) != 0 {
		t.Fatal("the agent's turn ended while its action awaited approval")
	}

	// The owner approves over HTTP; the action runs and the CLI, polling,
	// prints its result to the agent.
	status, body := gatewayCall(t, gwBase, "POST", "/proliferate/"+sess.ID+"/actions/invocations/"+inv.ID+"/approve", token,
		map[string]any{"mode": "once"})
	if status != http.StatusOK {
		t.Fatalf("approve: %d %s", status, body)
	}
	testenv.Eventually(t, 120*time.Second, "the agent's turn to end", func() bool { return got.count(protocol.MsgMessageComplete) > 0 })

	if n := lin.MutationCount(); n != 1 {
		t.Fatalf("%d Linear mutations, want exactly 1", n)
	}
	muts := lin.Mutations()
	if muts[0].Root != "issueCreate" || muts[0].Authorization == "" {
		t.Fatalf("mutation %+v", muts[0])
	}
	issues := lin.Issues()
	if len(issues) != 1 || issues[0].Title != "From the agent" || issues[0].TeamID != "team-eng" {
		t.Fatalf("Linear issues %+v", issues)
	}
	// The bash tool's output is the CLI's: the created issue, exit 0.
	var end protocol.ToolEndMessage
	for _, m := range got.all(protocol.MsgToolEnd) {
		var e protocol.ToolEndMessage
		if m.Decode(&e) == nil && e.Tool == "bash" {
			end = e
		}
	}
	if end.Status != "completed" || !strings.Contains(end.Result, issues[0].Identifier) || strings.Contains(end.Result, "lin_tok_e2e") {
		t.Fatalf("bash tool end %+v (issue %s)", end, issues[0].Identifier)
	}
	testenv.Eventually(t, 30*time.Second, "action_completed", func() bool { return got.count(protocol.MsgActionCompleted) > 0 })

	var dbStatus, approvedBy string
	if err := dev.app.Pool.QueryRow(ctx, `SELECT status, coalesce(approved_by::text, '') FROM action_invocations WHERE id = $1`,
		inv.ID).Scan(&dbStatus, &approvedBy); err != nil {
		t.Fatal(err)
	}
	if dbStatus != "completed" || approvedBy != userID {
		t.Fatalf("invocation %s approved by %q", dbStatus, approvedBy)
	}
	// A second approval changes nothing.
	if status, body := gatewayCall(t, gwBase, "POST", "/proliferate/"+sess.ID+"/actions/invocations/"+inv.ID+"/approve", token, nil); status != http.StatusConflict {
		t.Fatalf("second approve: %d %s", status, body)
	}
	if n := lin.MutationCount(); n != 1 {
		t.Fatalf("%d Linear mutations after a second approval", n)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gatewayCall sends one request to the gateway and returns the status and
// body.
func gatewayCall(t *testing.T, base, method, path, token string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(mustJSON(t, body))
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// first returns the first frame of a type (the zero Message when none).
func (f *frames) first(typ string) client.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.list {
		if m.Type == typ {
			return m
		}
	}
	return client.Message{}
}

// all returns the frames of a type.
func (f *frames) all(typ string) []client.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []client.Message
	for _, m := range f.list {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}
