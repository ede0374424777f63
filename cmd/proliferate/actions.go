package main

// `proliferate actions` is the command the agent runs inside its sandbox
// to act on the services connected to its organization. It is a thin client of the gateway's action routes,
// authenticated with the sandbox token:
//
//	GET  /proliferate/{session}/actions/available
//	GET  /proliferate/{session}/actions/guide/{integration}
//	POST /proliferate/{session}/actions/invoke
//	GET  /proliferate/{session}/actions/invocations/{id}
//
// The gateway URL, session id and token come from the environment the
// sandbox provider gives the agent (PROLIFERATE_GATEWAY_URL,
// PROLIFERATE_SESSION_ID, PROLIFERATE_SANDBOX_TOKEN), or a terminal a
// person opened in the session (PROLIFERATE_TERMINAL_TOKEN instead of the
// sandbox token: the command then acts as that person); flags override
// them.
// It needs no platform configuration, no database and no broker, so it is
// dispatched before the platform's configuration is loaded.
//
// `run` blocks while an invocation waits for a person's approval, polling
// its state, so the agent's shell command ends with the action's result or
// a distinct exit status it can act on:
//
//	0  completed (the result JSON is on stdout)
//	1  failed, or any other error (the message is on stderr)
//	2  bad usage
//	3  denied (by policy or by a person)
//	4  the approval request expired
//	5  rate limited (too many invocations or pending approvals)
//
// The token is never printed, in output or in errors.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/agent/capabilities"
)

// Exit statuses of `proliferate actions`.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitDenied      = 3
	exitExpired     = 4
	exitRateLimited = 5
)

const actionsUsage = `Usage: proliferate actions <command> [flags]

Act on the services connected to your organization (Linear, Sentry, Slack,
MCP connectors…). Tokens are resolved by the platform; you never need them.

Commands:
  list [--json]                          integrations and their actions
  guide NAME | guide --integration NAME  how to use one integration (markdown)
  run --integration NAME --action ACTION [--params '{"key":"value"}'] [--timeout 10m]
                                         run an action; waits while it needs a
                                         person's approval, then prints the result

Every command takes --gateway URL, --session ID and --token T, which default to
$PROLIFERATE_GATEWAY_URL, $PROLIFERATE_SESSION_ID and $PROLIFERATE_SANDBOX_TOKEN
(the agent's) or, in a terminal you opened in a session, $PROLIFERATE_TERMINAL_TOKEN
(yours: what you run is recorded as yours; approvals are never made from here).

Exit status of run: 0 completed (result JSON on stdout), 1 failed or error,
2 bad usage, 3 denied, 4 approval expired, 5 rate limited (retry later).
`

// actionsMain runs `proliferate actions ARGS` as a process: it returns the
// exit status. main dispatches to it before loading the platform's
// configuration.
func actionsMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &actionsCLI{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	return c.run(ctx, args)
}

// actionsCLI is one invocation of the command; the zero durations and nil
// client take defaults.
type actionsCLI struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	client         *http.Client
	// pollMin is the first wait between two polls of a pending
	// invocation; each wait grows by a quarter up to pollMax.
	pollMin, pollMax time.Duration
}

// actionsTarget is where and as whom the command talks to the gateway.
type actionsTarget struct {
	gateway, session, token string
}

func (c *actionsCLI) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, actionsUsage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(c.stdout, actionsUsage)
		return exitOK
	case "list", "guide", "run":
	default:
		return c.usage(fmt.Sprintf("unknown actions command %q", cmd))
	}
	fs := flag.NewFlagSet("actions "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var tgt actionsTarget
	fs.StringVar(&tgt.gateway, "gateway", c.getenv(capabilities.EnvGatewayURL), "gateway base URL")
	fs.StringVar(&tgt.session, "session", c.getenv(capabilities.EnvSessionID), "session id")
	defToken := c.getenv(capabilities.EnvSandboxToken)
	if defToken == "" {
		defToken = c.getenv(capabilities.EnvTerminalToken)
	}
	fs.StringVar(&tgt.token, "token", defToken, "sandbox or terminal token")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	integration := fs.String("integration", "", "integration (source) id, e.g. linear")
	action := fs.String("action", "", "action id, e.g. create_issue")
	params := fs.String("params", "{}", "parameters as a JSON object")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long run waits for an approval")
	// Flags may come before and after positional arguments
	// (`guide linear --json`), so parse again after each positional.
	var positional []string
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(c.stdout, actionsUsage)
				return exitOK
			}
			return c.usage(err.Error())
		}
		if fs.NArg() == 0 {
			break
		}
		positional, rest = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if cmd == "guide" && len(positional) > 0 {
		// `guide NAME` is the same as `guide --integration NAME`.
		if *integration != "" && *integration != positional[0] {
			return c.usage(fmt.Sprintf("guide got two integrations: %q and --integration %q", positional[0], *integration))
		}
		*integration, positional = positional[0], positional[1:]
	}
	if len(positional) > 0 {
		return c.usage(fmt.Sprintf("unexpected argument %q", positional[0]))
	}
	switch {
	case tgt.gateway == "":
		return c.usage("no gateway: set " + capabilities.EnvGatewayURL + " or pass --gateway")
	case tgt.session == "":
		return c.usage("no session: set " + capabilities.EnvSessionID + " or pass --session")
	case tgt.token == "":
		return c.usage("no token: set " + capabilities.EnvSandboxToken + " or " + capabilities.EnvTerminalToken + " or pass --token")
	}
	if u, err := url.Parse(tgt.gateway); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c.usage("the gateway URL must be http(s)://host[:port]")
	}
	switch cmd {
	case "list":
		return c.list(ctx, tgt, *asJSON)
	case "guide":
		if *integration == "" {
			return c.usage("guide needs an integration: 'proliferate actions guide NAME' or 'guide --integration NAME' (see 'proliferate actions list')")
		}
		return c.guide(ctx, tgt, *integration)
	default:
		if *integration == "" || *action == "" {
			return c.usage("run needs --integration NAME and --action ACTION (see 'proliferate actions list')")
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(*params), &obj); err != nil || obj == nil {
			return c.usage("--params must be a JSON object, e.g. '{\"title\":\"…\"}'")
		}
		if *timeout <= 0 {
			return c.usage("--timeout must be positive")
		}
		return c.invoke(ctx, tgt, invocations.InvokeInput{Integration: *integration, Action: *action,
			Params: json.RawMessage(*params)}, *timeout)
	}
}

func (c *actionsCLI) usage(msg string) int {
	fmt.Fprintf(c.stderr, "proliferate actions: %s (see 'proliferate actions --help')\n", msg)
	return exitUsage
}

func (c *actionsCLI) fail(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "proliferate actions: "+format+"\n", args...)
	return exitFailed
}

// response is a gateway answer read whole.
type response struct {
	status      int
	contentType string
	retryAfter  string
	body        []byte
}

// do sends one request to a session's action route.
func (c *actionsCLI) do(ctx context.Context, tgt actionsTarget, method, route string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimRight(tgt.gateway, "/") + "/proliferate/" + url.PathEscape(tgt.session) + "/actions/" + route
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return response{}, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+tgt.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := c.client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Minute}
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, route, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read answer: %w", method, route, err)
	}
	return response{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"),
		retryAfter: resp.Header.Get("Retry-After"), body: b}, nil
}

// apiMessage is the error of a gateway answer: the message (and details)
// of its {"error":{…}} envelope, an {"error":"…"} string, or the status.
func apiMessage(r response) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(r.body, &env) == nil {
		var e struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		}
		var s string
		switch {
		case json.Unmarshal(env.Error, &e) == nil && e.Message != "":
			msg := e.Message
			if len(e.Details) > 0 && string(e.Details) != "null" {
				msg += " " + string(e.Details)
			}
			return msg
		case json.Unmarshal(env.Error, &s) == nil && s != "":
			return s
		case env.Message != "":
			return env.Message
		}
	}
	text := strings.TrimSpace(string(r.body))
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	if text == "" {
		return fmt.Sprintf("HTTP %d %s", r.status, http.StatusText(r.status))
	}
	return fmt.Sprintf("HTTP %d: %s", r.status, text)
}

// routeError is the message of a non-2xx answer of list, guide and poll.
func routeError(r response) string {
	if r.status == http.StatusUnauthorized {
		return "the gateway rejected the token (" + apiMessage(r) + ")"
	}
	return apiMessage(r)
}

func (c *actionsCLI) list(ctx context.Context, tgt actionsTarget, asJSON bool) int {
	r, err := c.do(ctx, tgt, http.MethodGet, "available", nil)
	if err != nil {
		return c.fail("%v", err)
	}
	if r.status != http.StatusOK {
		return c.fail("list: %s", routeError(r))
	}
	var avail []invocations.Available
	var wrapped struct {
		Integrations []invocations.Available `json:"integrations"`
		Available    []invocations.Available `json:"available"`
	}
	if err := json.Unmarshal(r.body, &avail); err != nil {
		if err := json.Unmarshal(r.body, &wrapped); err != nil {
			return c.fail("list: unexpected answer: %v", err)
		}
		avail = append(wrapped.Integrations, wrapped.Available...)
	}
	if asJSON {
		if avail == nil {
			avail = []invocations.Available{}
		}
		b, _ := json.MarshalIndent(map[string]any{"integrations": avail}, "", "  ")
		fmt.Fprintln(c.stdout, string(b))
		return exitOK
	}
	if len(avail) == 0 {
		fmt.Fprintln(c.stdout, "No integrations are connected to this session.")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for i, a := range avail {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		name := a.Integration
		if a.DisplayName != "" && a.DisplayName != a.Integration {
			name += " (" + a.DisplayName + ")"
		}
		fmt.Fprintf(tw, "%s\n", name)
		for _, d := range a.Actions {
			desc, _, _ := strings.Cut(strings.TrimSpace(d.Description), "\n")
			fmt.Fprintf(tw, "  %s\t[%s]\t%s\n", d.ID, d.Risk, desc)
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(c.stdout, "\nParameters: proliferate actions guide --integration NAME (or list --json for the JSON schemas).")
	return exitOK
}

func (c *actionsCLI) guide(ctx context.Context, tgt actionsTarget, integration string) int {
	r, err := c.do(ctx, tgt, http.MethodGet, "guide/"+url.PathEscape(integration), nil)
	if err != nil {
		return c.fail("%v", err)
	}
	if r.status != http.StatusOK {
		return c.fail("guide %s: %s", integration, routeError(r))
	}
	text := string(r.body)
	if strings.HasPrefix(r.contentType, "application/json") {
		var s string
		var g struct {
			Guide    string `json:"guide"`
			Markdown string `json:"markdown"`
		}
		switch {
		case json.Unmarshal(r.body, &s) == nil:
			text = s
		case json.Unmarshal(r.body, &g) == nil:
			text = g.Guide + g.Markdown
		}
	}
	fmt.Fprintln(c.stdout, strings.TrimRight(text, "\n"))
	return exitOK
}

// invokeAnswer is the body of POST invoke: {invocation, result} (200),
// {invocation, message} (202), {invocation, error} (403, 502).
type invokeAnswer struct {
	Invocation *invocations.Invocation `json:"invocation"`
	Result     json.RawMessage         `json:"result"`
	// Message says why a 202 waits (its Reason: policy or
	// definition_changed).
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

func (c *actionsCLI) invoke(ctx context.Context, tgt actionsTarget, in invocations.InvokeInput, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The invocation is sent once: a retry could run a write twice.
	r, err := c.do(ctx, tgt, http.MethodPost, "invoke", in)
	if err != nil {
		return c.fail("%v (the action may or may not have run)", err)
	}
	var ans invokeAnswer
	_ = json.Unmarshal(r.body, &ans)
	switch r.status {
	case http.StatusOK:
		res := ans.Result
		if len(res) == 0 && ans.Invocation != nil {
			res = ans.Invocation.Result
		}
		return c.printResult(res)
	case http.StatusAccepted:
		if ans.Invocation == nil || ans.Invocation.ID == "" {
			return c.fail("run: the gateway accepted the invocation but named none")
		}
		why := ""
		if ans.Reason == "definition_changed" {
			why = "; the tool's definition changed since it was reviewed"
		}
		fmt.Fprintf(c.stderr, "waiting for approval (invocation %s, %s:%s%s); a person approves or denies it in Proliferate\n",
			ans.Invocation.ID, in.Integration, in.Action, why)
		return c.await(ctx, tgt, ans.Invocation.ID, timeout)
	case http.StatusForbidden:
		if ans.Invocation != nil && ans.Invocation.ID != "" {
			return c.finish(*ans.Invocation)
		}
		fmt.Fprintf(c.stderr, "proliferate actions: denied: %s\n", apiMessage(r))
		return exitDenied
	case http.StatusTooManyRequests:
		msg := apiMessage(r)
		if ra := strings.TrimSpace(r.retryAfter); ra != "" {
			msg += " (retry after " + ra + " s)"
		}
		fmt.Fprintf(c.stderr, "proliferate actions: rate limited: %s; wait, then retry\n", msg)
		return exitRateLimited
	case http.StatusBadGateway:
		if ans.Invocation != nil && ans.Invocation.Status == invocations.StatusFailed {
			return c.finish(*ans.Invocation)
		}
		return c.fail("run %s:%s failed: %s", in.Integration, in.Action, apiMessage(r))
	default:
		return c.fail("run %s:%s: %s", in.Integration, in.Action, routeError(r))
	}
}

// await polls a pending invocation until it is terminal or the timeout
// passes. Transient failures (network, 5xx) are retried: a gateway restart
// must not lose an approval the agent is waiting for.
func (c *actionsCLI) await(ctx context.Context, tgt actionsTarget, id string, timeout time.Duration) int {
	wait, maxWait := c.pollMin, c.pollMax
	if wait <= 0 {
		wait = 2 * time.Second
	}
	if maxWait <= 0 {
		maxWait = 5 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			why := "interrupted"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = fmt.Sprintf("gave up waiting after %s", timeout)
			}
			if lastErr != "" {
				why += " (last error: " + lastErr + ")"
			}
			return c.fail("%s; invocation %s is still pending approval", why, id)
		case <-timer.C:
		}
		r, err := c.do(ctx, tgt, http.MethodGet, "invocations/"+url.PathEscape(id), nil)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				lastErr = err.Error()
			}
		case r.status == http.StatusOK:
			var inv invocations.Invocation
			var wrapped struct {
				Invocation *invocations.Invocation `json:"invocation"`
			}
			if json.Unmarshal(r.body, &wrapped) == nil && wrapped.Invocation != nil {
				inv = *wrapped.Invocation
			} else if err := json.Unmarshal(r.body, &inv); err != nil {
				return c.fail("poll invocation %s: unexpected answer: %v", id, err)
			}
			if inv.Terminal() {
				return c.finish(inv)
			}
		case r.status >= 500 || r.status == http.StatusTooManyRequests:
			lastErr = apiMessage(r)
		default:
			return c.fail("poll invocation %s: %s", id, routeError(r))
		}
		wait = min(wait+wait/4, maxWait)
		timer.Reset(wait)
	}
}

// finish reports a terminal invocation and returns its exit status.
func (c *actionsCLI) finish(inv invocations.Invocation) int {
	switch inv.Status {
	case invocations.StatusCompleted:
		return c.printResult(inv.Result)
	case invocations.StatusDenied:
		reason := "policy"
		if inv.DeniedReason != nil && *inv.DeniedReason != "" {
			reason = *inv.DeniedReason
		}
		by := ""
		if reason == "human" {
			by = " by a person"
		}
		fmt.Fprintf(c.stderr, "proliferate actions: %s:%s was denied%s (reason: %s; invocation %s); do not retry it unchanged\n",
			inv.Integration, inv.Action, by, reason, inv.ID)
		return exitDenied
	case invocations.StatusExpired:
		fmt.Fprintf(c.stderr, "proliferate actions: nobody approved %s:%s in time; invocation %s expired and did not run\n",
			inv.Integration, inv.Action, inv.ID)
		return exitExpired
	default: // failed
		msg := "unknown error"
		if inv.Error != nil && *inv.Error != "" {
			msg = *inv.Error
		}
		return c.fail("%s:%s failed: %s (invocation %s)", inv.Integration, inv.Action, msg, inv.ID)
	}
}

// printResult writes an action's result JSON to stdout, indented.
func (c *actionsCLI) printResult(res json.RawMessage) int {
	if len(bytes.TrimSpace(res)) == 0 {
		res = json.RawMessage("null")
	}
	var out bytes.Buffer
	if json.Indent(&out, res, "", "  ") != nil {
		out.Reset()
		out.Write(res)
	}
	fmt.Fprintln(c.stdout, out.String())
	return exitOK
}
