package main

// `proliferate git-credential` and `proliferate pr create` are how the
// agent pushes and opens pull requests from inside its sandbox, with the
// organization's GitHub integration and no credential of its own:
//
//   - git-credential is git's credential helper (the sandbox configures
//     credential.helper = "!proliferate git-credential" and
//     credential.useHttpPath = true in the agent's environment). For `get`
//     it asks the gateway (POST /proliferate/{session}/git/credential, with
//     the sandbox token) for a short-lived token narrowed to the repository
//     git is about to use, and prints it in git's credential format; the
//     gateway refuses repositories that are not the session's. `store` and
//     `erase` do nothing: nothing is ever written to disk.
//   - pr create opens a pull request from the current branch (or --head) of
//     the repository in the working directory through the gateway
//     (POST /proliferate/{session}/git/pull-requests), which records its URL
//     on the session; it prints the URL.
//
// Like `proliferate actions` they need no platform configuration and are
// dispatched before it is loaded; the token is never printed except to
// git, on stdout of the credential helper.

import (
	"bufio"
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
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
)

const gitCredentialUsage = `Usage: proliferate git-credential get|store|erase

Git's credential helper inside a Proliferate sandbox (configured for you:
credential.helper = "!proliferate git-credential"). For "get" it reads git's
request on stdin (protocol, host, path) and answers with a short-lived token
for that one repository, issued by the platform through the organization's
GitHub integration; repositories that are not the session's are refused.
"store" and "erase" do nothing: no credential is ever written to disk.

Reads $PROLIFERATE_GATEWAY_URL, $PROLIFERATE_SESSION_ID and
$PROLIFERATE_SANDBOX_TOKEN.
`

const prUsage = `Usage: proliferate pr create --title TITLE [--body TEXT] [--base BRANCH] [--head BRANCH] [--draft] [--remote origin] [--json]

Opens a pull request on GitHub from the repository in the working directory,
through the platform (the organization's GitHub integration; you need no
token). Push your branch first (git push -u origin HEAD). The URL of the
pull request is printed and recorded on the session (and its run).

  --title   the title (required)
  --body    the description (markdown)
  --base    the branch to merge into (default: the repository's default branch)
  --head    the branch with the changes (default: the current branch)
  --draft   open it as a draft
  --remote  the git remote of the repository (default origin)
  --json    print {url, number, repo, head, base} as JSON

Exit status: 0 opened (the URL is on stdout), 1 failed, 2 bad usage.
`

// gitCLI runs the two commands; zero fields take the process's.
type gitCLI struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	client         *http.Client
	// dir is where git runs ("" = the working directory).
	dir string
}

func newGitCLI() *gitCLI {
	return &gitCLI{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
}

func gitCredentialMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return newGitCLI().credential(ctx, args)
}

func prMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return newGitCLI().pr(ctx, args)
}

// target reads the gateway, session and token from the environment.
func (c *gitCLI) target() (actionsTarget, error) {
	t := actionsTarget{gateway: c.getenv(capabilities.EnvGatewayURL), session: c.getenv(capabilities.EnvSessionID),
		token: c.getenv(capabilities.EnvSandboxToken)}
	if t.token == "" {
		t.token = c.getenv(capabilities.EnvTerminalToken) // a terminal a person opened: acts as that person
	}
	switch {
	case t.gateway == "" || t.session == "" || t.token == "":
		return t, fmt.Errorf("not inside a sandbox's environment (%s, %s and %s or %s are needed)",
			capabilities.EnvGatewayURL, capabilities.EnvSessionID, capabilities.EnvSandboxToken, capabilities.EnvTerminalToken)
	}
	if u, err := url.Parse(t.gateway); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return t, errors.New("the gateway URL must be http(s)://host[:port]")
	}
	return t, nil
}

// post sends body to a session route and reads the answer.
func (c *gitCLI) post(ctx context.Context, t actionsTarget, route string, body any) (response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return response{}, err
	}
	u := strings.TrimRight(t.gateway, "/") + "/proliferate/" + url.PathEscape(t.session) + "/" + route
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+t.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	client := c.client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Minute}
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("the gateway could not be reached: %w", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return response{}, fmt.Errorf("read the gateway's answer: %w", err)
	}
	return response{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: data}, nil
}

// credential speaks git's credential-helper protocol.
func (c *gitCLI) credential(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, gitCredentialUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, gitCredentialUsage)
		return exitOK
	case "store", "erase":
		_, _ = io.Copy(io.Discard, c.stdin)
		return exitOK // nothing is kept anywhere
	case "get":
	default:
		// git may grow new operations; a helper ignores the ones it does not know.
		return exitOK
	}
	in := map[string]string{}
	sc := bufio.NewScanner(c.stdin)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			in[k] = v
		}
	}
	if in["protocol"] != "https" && in["protocol"] != "http" {
		return exitOK // not ours to answer (ssh, …)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(c.stderr, "proliferate git-credential: "+format+"\n", a...)
		return exitFailed
	}
	if in["path"] == "" {
		return fail("git sent no repository path; set credential.useHttpPath=true")
	}
	t, err := c.target()
	if err != nil {
		return fail("%v", err)
	}
	resp, err := c.post(ctx, t, "git/credential", map[string]string{"protocol": in["protocol"], "host": in["host"], "path": in["path"]})
	if err != nil {
		return fail("%v", err)
	}
	if resp.status != http.StatusOK {
		return fail("no token for %s/%s: %s (HTTP %d)", in["host"], strings.Trim(in["path"], "/"), apiMessage(resp), resp.status)
	}
	var cred struct {
		Username  string    `json:"username"`
		Password  string    `json:"password"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(resp.body, &cred); err != nil || cred.Password == "" {
		return fail("the gateway's answer has no token")
	}
	out := "username=" + cred.Username + "\npassword=" + cred.Password + "\n"
	if !cred.ExpiresAt.IsZero() {
		out += fmt.Sprintf("password_expiry_utc=%d\n", cred.ExpiresAt.Unix())
	}
	if _, err := io.WriteString(c.stdout, out); err != nil {
		return exitFailed
	}
	return exitOK
}

// git runs git in c.dir and returns its trimmed stdout.
func (c *gitCLI) git(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = c.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
	}
	return strings.TrimSpace(out.String()), nil
}

func (c *gitCLI) pr(ctx context.Context, args []string) int {
	usage := func(msg string) int {
		fmt.Fprintf(c.stderr, "proliferate pr: %s (see 'proliferate pr --help')\n", msg)
		return exitUsage
	}
	if len(args) == 0 {
		fmt.Fprint(c.stderr, prUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, prUsage)
		return exitOK
	case "create":
	default:
		return usage(fmt.Sprintf("unknown pr command %q", args[0]))
	}
	fs := flag.NewFlagSet("pr create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	title := fs.String("title", "", "")
	body := fs.String("body", "", "")
	base := fs.String("base", "", "")
	head := fs.String("head", "", "")
	remote := fs.String("remote", "origin", "")
	draft := fs.Bool("draft", false, "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, prUsage)
			return exitOK
		}
		return usage(err.Error())
	}
	if fs.NArg() > 0 {
		return usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if strings.TrimSpace(*title) == "" {
		return usage("--title is required")
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(c.stderr, "proliferate pr: "+format+"\n", a...)
		return exitFailed
	}
	t, err := c.target()
	if err != nil {
		return fail("%v", err)
	}
	remoteURL, err := c.git(ctx, "remote", "get-url", "--", *remote)
	if err != nil {
		return fail("%v", err)
	}
	if *head == "" {
		b, err := c.git(ctx, "symbolic-ref", "--quiet", "--short", "HEAD")
		if err != nil {
			return fail("HEAD is not on a branch: create one (git switch -c NAME), commit, push it, or pass --head")
		}
		*head = b
	}
	resp, err := c.post(ctx, t, "git/pull-requests", map[string]any{"remote_url": remoteURL, "head": *head, "base": *base,
		"title": *title, "body": *body, "draft": *draft})
	if err != nil {
		return fail("%v", err)
	}
	if resp.status != http.StatusCreated {
		hint := ""
		if resp.status == http.StatusUnprocessableEntity {
			hint = " (is the branch pushed? git push -u " + *remote + " " + *head + ")"
		}
		return fail("%s (HTTP %d)%s", apiMessage(resp), resp.status, hint)
	}
	if *asJSON {
		_, _ = c.stdout.Write(resp.body)
		return exitOK
	}
	var pr struct {
		URL string `json:"url"`
	}
	_ = json.Unmarshal(resp.body, &pr)
	fmt.Fprintln(c.stdout, pr.URL)
	return exitOK
}
