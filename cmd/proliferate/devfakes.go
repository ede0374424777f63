package main

// `proliferate dev-fakes` runs, on fixed loopback ports, the local fakes of
// the services actions act on, so a person can try actions end to end
// under `make run` without any SaaS account: Linear (GraphQL), Sentry
// (REST /api/0), Slack (Web API, with oauth.v2.access for installs),
// Nango (the broker the platform connects Linear and Sentry through), an
// MCP server (streamable HTTP) and GitHub (the App API, git smart HTTP and
// the pulls API, with an installation of account acme holding acme/app, so
// sessions clone, push and open pull requests). Each fake is the one the tests use
// (they speak the services' real wire formats), seeded with a workspace to
// act on; it prints the settings that point the platform at them and the
// API calls that connect them. It refuses to run with
// PROLIFERATE_ENV=production.
//
// The fakes keep their state in memory: it is gone when the command stops.
//
// Two routes of the command itself stand in for the browser steps of a
// real OAuth flow (they exist only here, on the fakes' ports):
//
//	GET {nango}/dev/connect?session_token=T   completes the Nango connect
//	    session T the platform started (POST /integrations/nango/sessions)
//	    and answers {"connection_id", "provider_config_key"} to register
//	    (POST /integrations/nango)
//	GET {slack}/dev/code                      a single-use OAuth code of the
//	    fake Slack app for POST /slack/installations

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/actions/mcp/mcptest"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/actions/providers/sentryfake"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/fakekit"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
)

// Seeds of the fakes: the credentials they accept and what they hold.
const (
	devNangoSecret   = "dev-nango-secret"
	devLinearToken   = "lin_oauth_dev_token"
	devSentryToken   = "sntrys_dev_token"
	devSlackClientID = "dev-slack-client-id"
	devSlackSecret   = "dev-slack-client-secret"
	devSlackTeam     = "T0DEV"
	devMCPKey        = "dev-mcp-key"
	devSentryOrg     = "dev-org"
	devGitHubAppID   = "4242"
	// devGitHubInstallation is the fake App's installation (account acme).
	devGitHubInstallation = 4242001
)

const devFakesUsage = `Usage: proliferate dev-fakes [flags]

Runs local fakes of Linear, Sentry, Slack, Nango and an MCP server on fixed
loopback ports, seeded with a workspace to act on, and prints the settings
that point the platform at them and the calls that connect them. For trying
actions under 'make run'; refused with PROLIFERATE_ENV=production. Ctrl-C
stops them (their state is in memory).

Flags:
  --host H          address to listen on (default 127.0.0.1)
  --linear-port N   Linear GraphQL API (default 8101)
  --sentry-port N   Sentry REST API (default 8102)
  --slack-port N    Slack Web API (default 8103)
  --nango-port N    Nango API (default 8104)
  --mcp-port N      MCP server, streamable HTTP (default 8105)
  --github-host H   GitHub's address (default 127.0.0.2: a sandbox reaches it
                    through its egress proxy, as it would github.com)
  --github-port N   GitHub: App API, git smart HTTP, pulls (default 8106)
  (0 picks a free port)`

// devFakesOptions are the command's flags.
type devFakesOptions struct {
	host, githubHost                            string
	linear, sentry, slack, nango, mcpPt, github int
}

// devFakesCmd parses the flags, starts the fakes, prints how to use them
// and serves until ctx ends.
func devFakesCmd(ctx context.Context, env string, args []string, stdout io.Writer, log *slog.Logger) error {
	if env == "production" {
		return errors.New("dev-fakes runs fake SaaS services for development; it refuses to run with PROLIFERATE_ENV=production")
	}
	fs := flag.NewFlagSet("dev-fakes", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := devFakesOptions{}
	fs.StringVar(&o.host, "host", "127.0.0.1", "")
	fs.IntVar(&o.linear, "linear-port", 8101, "")
	fs.IntVar(&o.sentry, "sentry-port", 8102, "")
	fs.IntVar(&o.slack, "slack-port", 8103, "")
	fs.IntVar(&o.nango, "nango-port", 8104, "")
	fs.IntVar(&o.mcpPt, "mcp-port", 8105, "")
	fs.StringVar(&o.githubHost, "github-host", "127.0.0.2", "")
	fs.IntVar(&o.github, "github-port", 8106, "")
	if err := fs.Parse(args); err != nil {
		return usageError{"dev-fakes: " + err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("dev-fakes: unexpected argument %q", fs.Arg(0))}
	}
	for _, p := range []int{o.linear, o.sentry, o.slack, o.nango, o.mcpPt, o.github} {
		if p < 0 || p > 65535 {
			return usageError{fmt.Sprintf("dev-fakes: port %d out of range", p)}
		}
	}
	f, err := startDevFakes(o, log)
	if err != nil {
		return err
	}
	defer f.close()
	f.printUsage(stdout)
	<-ctx.Done()
	log.Info("dev-fakes stopping")
	return nil
}

// devFakes are the running fakes and their fixed-port fronts.
type devFakes struct {
	LinearURL, SentryURL, SlackURL, NangoURL, MCPURL string
	// GitHubURL is the GitHub fake's front (API base and git host);
	// GitHubKeyFile holds its App's private key (PEM, 0600).
	GitHubURL, GitHubKeyFile string

	tb      *fakekit.Standalone
	servers []*http.Server
	wg      sync.WaitGroup

	nango  *fakes.Nango
	github *fakes.GitHub
	lin    *linearfake.Server
	sentry *sentryfake.Server
	slackA *fakes.Slack
	slackW *slackfake.Server

	mu    sync.Mutex
	seq   int
	conns map[string]map[string]string // session token → integration → connection id
}

// startDevFakes starts every fake and its front on the options' ports; on
// error nothing is left running.
func startDevFakes(o devFakesOptions, log *slog.Logger) (f *devFakes, err error) {
	self := &devFakes{tb: &fakekit.Standalone{}, conns: map[string]map[string]string{}}
	f = self
	defer func() {
		if r := recover(); r != nil { // a fake failing to start calls Fatal
			err = fmt.Errorf("dev-fakes: %v", r)
		}
		if err != nil {
			self.close()
			f = nil
		}
	}()

	f.lin = linearfake.New(f.tb)
	f.lin.AddToken(devLinearToken, "user-dev")
	f.lin.AddUser(linearfake.User{ID: "user-dev", Name: "Dev User", Email: "dev@example.com"})
	f.lin.AddTeam(linearfake.Team{ID: "team-eng", Key: "ENG", Name: "Engineering"})
	f.lin.AddIssue(linearfake.Issue{TeamID: "team-eng", Title: "Checkout button does nothing on Safari", Priority: 2})
	f.lin.AddIssue(linearfake.Issue{TeamID: "team-eng", Title: "Flaky test: payments webhook retry", Priority: 3})

	f.sentry = sentryfake.New(f.tb)
	f.sentry.AddToken(devSentryToken)
	f.sentry.AddProject(devSentryOrg, "web")
	f.sentry.AddIssue(sentryfake.Issue{Org: devSentryOrg, Project: "web", Title: "TypeError: cannot read properties of undefined (reading 'total')"})

	f.slackW = slackfake.New(f.tb)
	f.slackW.AddChannel(devSlackTeam, "C0GENERAL")
	f.slackA = fakes.NewSlack(f.tb, devSlackClientID, devSlackSecret)

	// GitHub: an App whose key is generated here (written to a file for
	// GITHUB_APP_PRIVATE_KEY), one installation, one repository. The fake
	// listens on a free port of the GitHub host; its front below has the
	// fixed port, so the clone URL printed is the front's.
	key, kerr := rsa.GenerateKey(rand.Reader, 2048)
	if kerr != nil {
		return nil, fmt.Errorf("dev-fakes: GitHub App key: %w", kerr)
	}
	f.GitHubKeyFile = filepath.Join(f.tb.TempDir(), "github-app.pem")
	if err := os.WriteFile(f.GitHubKeyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, fmt.Errorf("dev-fakes: GitHub App key: %w", err)
	}
	f.github = fakes.NewGitHubOn(f.tb, o.githubHost, devGitHubAppID, &key.PublicKey, nil)
	f.github.AddInstallation(fakes.GitHubInstallation{ID: devGitHubInstallation, Login: "acme"})
	f.github.AddRepo(f.tb, devGitHubInstallation, "acme", "app")

	f.nango = fakes.NewNango(f.tb, devNangoSecret, map[string]string{"linear": "linear", "sentry": "sentry", "github": "github"}, nil)

	mcpSrv := mcptest.New(f.tb, devMCPKey, nil)
	addDevMCPTools(mcpSrv.MCP)

	// mux answers routes itself and proxies everything else to upstream
	// (without strip, a path prefix upstream does not have).
	mux := func(routes map[string]http.HandlerFunc, upstream, strip string) http.Handler {
		u, perr := url.Parse(upstream)
		if perr != nil {
			panic(perr)
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(&url.URL{Scheme: u.Scheme, Host: u.Host})
				pr.Out.Host = u.Host
				if strip != "" {
					pr.Out.URL.Path = strings.TrimPrefix(pr.Out.URL.Path, strip)
					pr.Out.URL.RawPath = ""
				}
			},
			FlushInterval: -1, // MCP answers stream (SSE)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := routes[r.URL.Path]; h != nil {
				h(w, r)
				return
			}
			proxy.ServeHTTP(w, r)
		})
	}
	slackOAuth := mux(nil, f.slackA.URL, "/api") // the app's OAuth methods, at the Web API's paths
	type front struct {
		url  *string
		host string // "" = o.host
		port int
		path string
		h    http.Handler
	}
	fronts := []front{
		{&f.LinearURL, "", o.linear, "/graphql", mux(nil, strings.TrimSuffix(f.lin.URL(), "/graphql"), "")},
		{&f.SentryURL, "", o.sentry, "/api/0", mux(nil, strings.TrimSuffix(f.sentry.URL(), "/api/0"), "")},
		{&f.SlackURL, "", o.slack, "/api", mux(map[string]http.HandlerFunc{
			"/dev/code":            f.slackCode,
			"/api/oauth.v2.access": slackOAuth.ServeHTTP,
			"/api/auth.revoke":     slackOAuth.ServeHTTP,
		}, strings.TrimSuffix(f.slackW.URL(), "/api"), "")},
		{&f.NangoURL, "", o.nango, "", mux(map[string]http.HandlerFunc{"/dev/connect": f.nangoConnect}, f.nango.URL, "")},
		{&f.MCPURL, "", o.mcpPt, "/mcp", mux(nil, mcpSrv.URL, "")},
		{&f.GitHubURL, o.githubHost, o.github, "", mux(nil, f.github.URL, "")},
	}
	for _, fr := range fronts {
		host := fr.host
		if host == "" {
			host = o.host
		}
		ln, lerr := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(fr.port)))
		if lerr != nil {
			return nil, fmt.Errorf("dev-fakes: listen on %s:%d (use the --*-port flags to pick other ports): %w", host, fr.port, lerr)
		}
		srv := &http.Server{Handler: fr.h, ReadHeaderTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		f.servers = append(f.servers, srv)
		f.wg.Go(func() { _ = srv.Serve(ln) })
		*fr.url = "http://" + ln.Addr().String() + fr.path
	}
	// Imported repos clone from the front (the port the egress allowance names).
	f.github.SetPublicURL(f.GitHubURL)
	return f, nil
}

// close stops the fronts and the fakes.
func (f *devFakes) close() {
	for _, s := range f.servers {
		_ = s.Close()
	}
	f.wg.Wait()
	f.tb.Close()
}

// nangoConnect completes a connect session the way a person authorizing
// in Nango's UI would: it creates a connection of the session's
// organization and user for the integration (?integration=, default the
// session's only allowed one) holding a token the matching fake accepts.
func (f *devFakes) nangoConnect(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("session_token")
	var sess *fakes.NangoSession
	for _, s := range f.nango.Sessions() {
		if s.Token == tok {
			sess = &s
			break
		}
	}
	if tok == "" || sess == nil {
		devJSON(w, http.StatusNotFound, map[string]any{"error": "unknown session_token: start one with POST /api/v1/integrations/nango/sessions"})
		return
	}
	integration := r.URL.Query().Get("integration")
	if integration == "" && len(sess.AllowedIntegrations) == 1 {
		integration = sess.AllowedIntegrations[0]
	}
	access := map[string]string{"linear": devLinearToken, "sentry": devSentryToken}[integration]
	if access == "" {
		devJSON(w, http.StatusBadRequest, map[string]any{"error": "integration must be linear or sentry"})
		return
	}
	f.mu.Lock()
	id := f.conns[tok][integration]
	if id == "" {
		f.seq++
		id = fmt.Sprintf("dev-%s-%d", integration, f.seq)
		if f.conns[tok] == nil {
			f.conns[tok] = map[string]string{}
		}
		f.conns[tok][integration] = id
		f.nango.AddConnection(fakes.NangoConnection{ConnectionID: id, ConfigKey: integration, Provider: integration,
			AccessToken: access, EndUserID: sess.EndUserID, EndUserOrgID: sess.OrganizationID})
	}
	f.mu.Unlock()
	devJSON(w, http.StatusOK, map[string]any{"connection_id": id, "provider_config_key": integration})
}

// slackCode mints a single-use OAuth code of the fake Slack app; the bot
// token it yields is valid on the fake Web API.
func (f *devFakes) slackCode(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.seq++
	code := fmt.Sprintf("dev-slack-code-%d", f.seq)
	f.mu.Unlock()
	token := f.slackA.AddCode(code, fakes.SlackInstall{TeamID: devSlackTeam, TeamName: "Dev Workspace", BotUserID: "U0DEVBOT"})
	f.slackW.AddToken(token, devSlackTeam)
	devJSON(w, http.StatusOK, map[string]any{"code": code})
}

// egressAllowWith is SANDBOX_EGRESS_ALLOW's default plus hostPort (an
// exact host:port may be a loopback address).
func egressAllowWith(hostPort string) string {
	for _, s := range config.Documented() {
		if s.Var == "SANDBOX_EGRESS_ALLOW" && s.Default != "" {
			return s.Default + "," + hostPort
		}
	}
	return hostPort
}

func devJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// addDevMCPTools gives the MCP server a read tool and a write tool.
func addDevMCPTools(s *sdk.Server) {
	schema := func(props string, required ...string) map[string]any {
		var m map[string]any
		_ = json.Unmarshal([]byte(`{"type":"object","properties":{`+props+`}}`), &m)
		if len(required) > 0 {
			m["required"] = required
		}
		return m
	}
	readOnly, destructive := true, false
	s.AddTool(&sdk.Tool{Name: "search_docs", Description: "Search the team's docs.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: readOnly},
		InputSchema: schema(`"query":{"type":"string","description":"words to find"}`, "query")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Query string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "2 pages match " + args.Query}},
				StructuredContent: map[string]any{"hits": []string{"Runbook: deploys", "Onboarding"}, "query": args.Query}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "create_page", Description: "Create a docs page.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &destructive},
		InputSchema: schema(`"title":{"type":"string"}`, "title")},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Title string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "created " + args.Title}}}, nil
		})
}

// printUsage prints the settings and the calls that connect the fakes.
func (f *devFakes) printUsage(w io.Writer) {
	fmt.Fprintf(w, `Fakes running (state in memory; Ctrl-C stops them):
  Linear  %s   OAuth token %s; team ENG (id team-eng) with 2 issues
  Sentry  %s   token %s; org %s, project web, 1 issue
  Slack   %s   app %s; GET %s/dev/code mints an OAuth code
  Nango   %s   secret %s; GET %s/dev/connect?session_token=T completes a connect session
  MCP     %s   header %s: %s; tools search_docs (read), create_page (write)
  GitHub  %s   App %s, installation %d (account acme), repository acme/app

Start the platform pointed at them (e.g. in the shell of 'make run'):
  export LINEAR_API_URL=%s
  export SENTRY_API_URL=%s
  export SLACK_API_URL=%s
  export SLACK_CLIENT_ID=%s SLACK_CLIENT_SECRET=%s
  export NANGO_URL=%s
  export NANGO_SECRET_KEY=%s
  export GITHUB_APP_ID=%s
  export GITHUB_API_URL=%s
  export GITHUB_APP_PRIVATE_KEY="$(cat %s)"
  export SANDBOX_EGRESS_ALLOW=%s

Connect Linear as an org admin ($TOK: your access token):
  B=http://127.0.0.1:8080/api/v1
  T=$(curl -s -X POST $B/integrations/nango/sessions -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' -d '{"integration":"linear"}' | jq -r .token)
  C=$(curl -s "%s/dev/connect?session_token=$T" | jq -r .connection_id)
  curl -s -X POST $B/integrations/nango -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' -d "{\"connection_id\":\"$C\",\"provider_config_key\":\"linear\"}"
(Sentry the same with "sentry"; Slack: POST $B/slack/oauth/state, then POST $B/slack/installations with a code from %s/dev/code.)

Add the MCP server as a connector (its key as an org secret first):
  curl -s -X POST $B/secrets -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' -d '{"key":"DOCS_MCP_KEY","value":"%s"}'
  curl -s -X POST $B/connectors -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' -d '{"name":"docs","url":"%s","auth":{"type":"header","secret_key":"DOCS_MCP_KEY","header_name":"%s"}}'

Connect the GitHub App (its repositories, acme/app, are imported and bound), and make a configuration of acme/app:
  S=$(curl -s -X POST $B/integrations/github-app/state -H "Authorization: Bearer $TOK" | jq -r .state)
  curl -s -X POST $B/integrations/github-app -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' -d "{\"installation_id\":%d,\"state\":\"$S\"}" | jq '{id, repos_import}'
  R=$(curl -s "$B/repos?q=acme/app" -H "Authorization: Bearer $TOK" | jq -r '.items[0].id')
  CFG=$(curl -s -X POST $B/configurations -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' -d "{\"name\":\"app\",\"repos\":[{\"repo_id\":\"$R\",\"workspace_path\":\"app\"}]}" | jq -r .id)
`,
		f.LinearURL, devLinearToken, f.SentryURL, devSentryToken, devSentryOrg,
		f.SlackURL, devSlackClientID, strings.TrimSuffix(f.SlackURL, "/api"),
		f.NangoURL, devNangoSecret, f.NangoURL,
		f.MCPURL, mcptest.KeyHeader, devMCPKey,
		f.GitHubURL, devGitHubAppID, devGitHubInstallation,
		f.LinearURL, f.SentryURL, f.SlackURL, devSlackClientID, devSlackSecret, f.NangoURL, devNangoSecret,
		devGitHubAppID, f.GitHubURL, f.GitHubKeyFile, egressAllowWith(strings.TrimPrefix(f.GitHubURL, "http://")),
		f.NangoURL, strings.TrimSuffix(f.SlackURL, "/api"), devMCPKey, f.MCPURL, mcptest.KeyHeader,
		devGitHubInstallation)
}
