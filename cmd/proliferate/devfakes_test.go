package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/mcp"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/testenv"
)

// firstWrite records what is written and signals the first write (the
// command prints its whole usage in one).
type firstWrite struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
	ch   chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	w.once.Do(func() { close(w.ch) })
	return n, err
}

func (w *firstWrite) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.buf.String() }

// devReq sends one request and decodes a JSON answer.
func devReq(t *testing.T, method, u string, hdr map[string]string, body string, out any) int {
	t.Helper()
	resp, b := testenv.Request(t, method, u, body, hdr)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, u, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// `proliferate dev-fakes` starts every fake, prints the settings that
// point the platform at them, each printed URL answers its service's wire
// protocol (the calls the platform makes), and cancelling stops them all.
func TestDevFakes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &firstWrite{ch: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- devFakesCmd(ctx, "development", []string{"--linear-port=0", "--sentry-port=0", "--slack-port=0",
			"--nango-port=0", "--mcp-port=0", "--github-port=0"}, out, slog.New(slog.DiscardHandler))
	}()
	select {
	case <-out.ch:
	case err := <-done:
		t.Fatalf("dev-fakes ended before printing: %v", err)
	}
	text := out.String()
	setting := func(name string) string {
		m := regexp.MustCompile(`export ` + name + `=(\S+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in:\n%s", name, text)
		}
		return m[1]
	}
	linearURL, sentryURL, slackURL, nangoURL := setting("LINEAR_API_URL"), setting("SENTRY_API_URL"), setting("SLACK_API_URL"), setting("NANGO_URL")
	mcpM := regexp.MustCompile(`MCP\s+(http://\S+)`).FindStringSubmatch(text)
	if mcpM == nil {
		t.Fatalf("no MCP URL in:\n%s", text)
	}
	mcpURL := mcpM[1]
	githubURL := setting("GITHUB_API_URL")
	keyM := regexp.MustCompile(`GITHUB_APP_PRIVATE_KEY="\$\(cat (\S+)\)"`).FindStringSubmatch(text)
	if keyM == nil || !strings.Contains(text, "SANDBOX_EGRESS_ALLOW=github.com,") || !strings.Contains(text, strings.TrimPrefix(githubURL, "http://")) {
		t.Fatalf("no GitHub App key file or egress allowance in:\n%s", text)
	}

	// GitHub: the printed key is the App's (an installation token is
	// minted through the front), and the token clones acme/app over git
	// smart HTTP from the printed host.
	pemBytes, err := os.ReadFile(keyM[1])
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		t.Fatalf("the key file holds no PEM block")
	}
	key, err := x509.ParsePKCS1PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ghTok, err := integrations.NewGitHubApp(devGitHubAppID, key, githubURL, nil, nil).InstallationToken(ctx, devGitHubInstallation)
	if err != nil {
		t.Fatalf("installation token through the front: %v", err)
	}
	// The installation's listing (what installing the app imports) clones
	// from the front too.
	ghRepos, err := integrations.NewGitHubApp(devGitHubAppID, key, githubURL, nil, nil).InstallationRepositories(ctx, devGitHubInstallation, 1, 100)
	if err != nil || len(ghRepos.Repositories) != 1 || ghRepos.Repositories[0].FullName != "acme/app" ||
		ghRepos.Repositories[0].CloneURL != githubURL+"/acme/app.git" {
		t.Fatalf("installation repositories through the front: %v %+v", err, ghRepos)
	}
	gu, _ := url.Parse(githubURL)
	lsOut, err := exec.Command("git", "ls-remote", "http://x-access-token:"+ghTok.Value+"@"+gu.Host+"/acme/app.git", "main").CombinedOutput()
	if err != nil || !strings.Contains(string(lsOut), "refs/heads/main") {
		t.Fatalf("git ls-remote acme/app through the front: %v %s", err, lsOut)
	}

	// Linear: a GraphQL query with the seeded OAuth token.
	var lin struct {
		Data struct {
			Issues struct {
				Nodes []struct{ Title string } `json:"nodes"`
			} `json:"issues"`
		} `json:"data"`
	}
	if st := devReq(t, "POST", linearURL, map[string]string{"Authorization": "Bearer " + devLinearToken, "Content-Type": "application/json"},
		`{"query":"query { issues(first: 10) { nodes { id title } } }"}`, &lin); st != 200 || len(lin.Data.Issues.Nodes) != 2 {
		t.Fatalf("linear: %d %+v", st, lin)
	}

	// Sentry: the project's issues with the seeded token.
	var issues []struct{ Title string }
	if st := devReq(t, "GET", sentryURL+"/projects/"+devSentryOrg+"/web/issues/?query=is:unresolved",
		map[string]string{"Authorization": "Bearer " + devSentryToken}, "", &issues); st != 200 || len(issues) != 1 {
		t.Fatalf("sentry: %d %+v", st, issues)
	}

	// Slack: an install (code from the dev route, oauth.v2.access), then
	// chat.postMessage with the bot token it yielded.
	var code struct{ Code string }
	devReq(t, "GET", strings.TrimSuffix(slackURL, "/api")+"/dev/code", nil, "", &code)
	var install struct {
		OK          bool   `json:"ok"`
		AccessToken string `json:"access_token"`
	}
	form := url.Values{"client_id": {devSlackClientID}, "client_secret": {devSlackSecret}, "code": {code.Code}}.Encode()
	if st := devReq(t, "POST", slackURL+"/oauth.v2.access", map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		form, &install); st != 200 || !install.OK || install.AccessToken == "" {
		t.Fatalf("slack install: %d %+v", st, install)
	}
	var posted struct {
		OK bool `json:"ok"`
	}
	if st := devReq(t, "POST", slackURL+"/chat.postMessage", map[string]string{"Authorization": "Bearer " + install.AccessToken,
		"Content-Type": "application/json"}, `{"channel":"C0GENERAL","text":"hello"}`, &posted); st != 200 || !posted.OK {
		t.Fatalf("slack post: %d %+v", st, posted)
	}

	// Nango: a connect session as the platform starts it, completed by the
	// dev route, then the connection as the platform reads it.
	auth := map[string]string{"Authorization": "Bearer " + devNangoSecret, "Content-Type": "application/json"}
	var sess struct {
		Data struct{ Token string } `json:"data"`
	}
	if st := devReq(t, "POST", nangoURL+"/connect/sessions", auth,
		`{"end_user":{"id":"user-1"},"organization":{"id":"org-1"},"allowed_integrations":["linear"]}`, &sess); st != 201 {
		t.Fatalf("nango session: %d", st)
	}
	var conn struct {
		ConnectionID      string `json:"connection_id"`
		ProviderConfigKey string `json:"provider_config_key"`
	}
	if st := devReq(t, "GET", nangoURL+"/dev/connect?session_token="+url.QueryEscape(sess.Data.Token), nil, "", &conn); st != 200 || conn.ProviderConfigKey != "linear" {
		t.Fatalf("nango connect: %d %+v", st, conn)
	}
	var got struct {
		Credentials struct {
			AccessToken string `json:"access_token"`
		} `json:"credentials"`
		EndUser struct {
			Organization struct{ ID string } `json:"organization"`
		} `json:"end_user"`
	}
	if st := devReq(t, "GET", nangoURL+"/connection/"+conn.ConnectionID+"?provider_config_key=linear", auth, "", &got); st != 200 ||
		got.Credentials.AccessToken != devLinearToken || got.EndUser.Organization.ID != "org-1" {
		t.Fatalf("nango connection: %d %+v", st, got)
	}

	// MCP: the platform's own client lists the tools.
	src, err := mcp.New(mcp.Config{ID: "dev", Name: "docs", URL: mcpURL,
		Auth: mcp.Auth{Header: "X-Api-Key", Secret: func(context.Context) (string, error) { return devMCPKey, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	defs, err := src.ListActions(ctx, actions.ExecContext{OrgID: "org-1"})
	if err != nil || len(defs) != 2 {
		t.Fatalf("mcp tools: %+v %v", defs, err)
	}

	// Cancelling stops the command and every listener.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev-fakes: %v", err)
	}
	for _, u := range []string{linearURL, sentryURL, slackURL, nangoURL, mcpURL, githubURL} {
		pu, _ := url.Parse(u)
		if c, err := net.Dial("tcp", pu.Host); err == nil {
			c.Close()
			t.Errorf("%s still listening after the command stopped", pu.Host)
		}
	}
}

// dev-fakes refuses production, and a busy port is an error naming the
// flags (nothing is left running).
func TestDevFakesRefuses(t *testing.T) {
	err := devFakesCmd(t.Context(), "production", nil, io.Discard, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "PROLIFERATE_ENV=production") {
		t.Fatalf("production: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	err = devFakesCmd(t.Context(), "development", []string{"--linear-port=0", "--sentry-port=0", "--slack-port=0",
		"--nango-port=0", "--mcp-port=" + itoa(port), "--github-port=0"}, io.Discard, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--*-port") {
		t.Fatalf("busy port: %v", err)
	}
	if err := devFakesCmd(t.Context(), "development", []string{"--linear-port=70000"}, io.Discard, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a port out of range was accepted")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
