// Command proliferate is the single binary of the platform. Each role is a
// subcommand; `dev` runs them all in one process with an embedded broker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/migrations"
	"github.com/proliferate/proliferate/topics"
)

// command is one subcommand: its synopsis (name and arguments), one line
// for the command list and the text of `proliferate help COMMAND`.
type command struct {
	synopsis, summary, help string
}

func (c command) name() string { name, _, _ := strings.Cut(c.synopsis, " "); return name }

// commands lists every subcommand, in the order `proliferate help` shows
// them; run's switch handles each (a test holds the two together).
var commands = []command{
	{"dev", "run the whole platform in one process (embedded broker\nunless KAFKA_BROKERS is set, migrations, topics, every role)",
		`Runs the whole platform in one process: the embedded Kafka broker on
BROKER_ADDR (unless KAFKA_BROKERS is set), the migrations, the topics and
every role. Ops endpoints on OPS_ADDR (empty: 127.0.0.1:9464). Ctrl-C stops
it cleanly.`},
	{"broker", "run the embedded Kafka broker alone on BROKER_ADDR",
		`Runs the embedded Kafka broker (kfake) alone on BROKER_ADDR with its data in
BROKER_DATA_DIR (locked against a second process), for roles started as
separate processes and for any Kafka client such as kcat.`},
	{"migrate up|status", "apply or list database migrations",
		`up      applies the pending embedded SQL migrations (advisory-locked,
        checksummed) to DATABASE_URL
status  lists every migration and when it was applied`},
	{"topics ensure|list|describe [topic…]|docs|tail TOPIC", "create missing topics and report drift; list the catalog;\nshow topics on the cluster; print docs/topics.md; print a topic's records",
		`ensure    creates missing topics and reports drift (never alters existing
          topics; exits 1 on drift)
list      lists the topic catalog (no cluster needed)
describe  shows topics on the cluster: partitions and end offsets
docs      prints docs/topics.md (no cluster needed)
tail      prints TOPIC's records decoded, with their headers, until interrupted:
          new ones, or all with --from-beginning; --json prints one JSON object
          per line ({topic, partition, offset, timestamp, key, headers, event});
          no consumer group, nothing committed`},
	{"api", "serve the REST API (/api/v1) on API_ADDR",
		`Serves the REST API (/api/v1, OpenAPI at /api/v1/openapi.json) on API_ADDR.
Any number of replicas.`},
	{"ingest", "accept webhooks on INGEST_ADDR (/webhooks/…) into webhooks.raw",
		`Accepts webhooks on INGEST_ADDR (/webhooks/…), verifies their signatures and
writes each to webhooks.raw before answering. Any number of replicas.`},
	{"scheduler", "run the cron scheduler and the integration pollers",
		`Runs the cron scheduler and the integration pollers; each tick and poll
happens once across replicas.`},
	{"relay", "run the transactional outbox relay",
		`Publishes the events committed to the transactional outbox, in order per
key. Any number of replicas.`},
	{"outbox status|list|show ID|retry ID…|--all|discard ID…|--all", "the relay's backlog and the rows it set aside as\nunpublishable: inspect, retry or discard them",
		afterFirstLine(outboxUsage)},
	{"mail status|failed|retry ID…", "the mail queue: emails waiting, the ones set aside as\nundeliverable with their errors, and putting them back",
		afterFirstLine(mailUsage)},
	{"finalizer", "run the run finalizer (deadlines, inactivity, dead sessions)",
		`Runs the run finalizer every RUN_FINALIZER_INTERVAL: deadlines, inactivity
and dead sessions (one pass at a time across replicas).`},
	{"gateway", "serve the session gateway on GATEWAY_ADDR (WebSocket streaming,\nsession routes, sandbox tool callbacks; a sandbox per session)",
		`Serves the session gateway on GATEWAY_ADDR: WebSocket streaming, session
routes, sandbox tool callbacks; a sandbox and an OpenCode agent per session.
Replicas share Redis; one owns each session.`},
	{"chat [--gateway URL] [--token T] SESSION", "talk to a session's agent over the gateway's WebSocket: each\nstdin line is a prompt (/cancel, /status, /snapshot)",
		`Talks to a session's agent over the gateway's WebSocket: each stdin line is a
prompt; /cancel, /status and /snapshot send those messages. When the
session is paused (or the stream ends and the client gave up reconnecting),
the next line reconnects, which resumes the session, and is sent then.

  --gateway URL  gateway base URL (default GATEWAY_PUBLIC_URL)
  --token T      access token or API key (default $PROLIFERATE_TOKEN)`},
	{"terminal [--gateway URL] [--token T] SESSION", "a shell in the session's sandbox workspace (the gateway's\nterminal WebSocket; starts or resumes the sandbox)",
		`Opens a shell in the session's sandbox workspace through the gateway's
terminal WebSocket (starts or resumes the sandbox).

  --gateway URL  gateway base URL (default GATEWAY_PUBLIC_URL)
  --token T      access token or API key (default $PROLIFERATE_TOKEN)`},
	{"actions list|guide|run", "(inside a sandbox) act on connected integrations through the\ngateway: proliferate actions --help", actionsUsage},
	{"git-credential get", "(inside a sandbox) git's credential helper: a short-lived token\nfor one of the session's repositories", gitCredentialUsage},
	{"pr create --title T", "(inside a sandbox) open a pull request from the current branch\nthrough the organization's GitHub integration", prUsage},
	{"services list|start|stop|restart|logs", "(inside a sandbox) manage the sandbox's long-running services\n(the configuration's service commands start on their own)", servicesUsage},
	{"billing-jobs", "grace clock, enforcement retries, ledger partitions, LiteLLM spend\ncollection, Autumn posting, auto-top-up, trial activation and\nthe nightly reconciliation (each once at a time across replicas)",
		`Runs the grace clock, enforcement retries, ledger partitions, LiteLLM spend
collection, Autumn posting, auto-top-up, trial activation and the nightly
reconciliation (each once at a time across replicas).`},
	{"llm-proxy", "the LLM proxy on LLM_PROXY_ADDR: per-session virtual keys, streamed\nthrough unbuffered, every request priced into llm.spend",
		`Serves the LLM proxy on LLM_PROXY_ADDR: per-session virtual keys, streamed
through unbuffered, every request priced into llm.spend.`},
	{"llm-sim", "serve the scripted LLM (Anthropic Messages API) on LLMSIM_ADDR",
		`Serves the scripted LLM (Anthropic Messages API with streaming and usage) on
LLMSIM_ADDR, for running the real agent offline.`},
	{"dev-fakes [--linear-port N …]", "run local fakes of Linear, Sentry, Slack, Nango and an MCP\nserver to try actions under make run (not in production)", devFakesUsage},
	{"service-token NAME [--ttl=1h]", "mint a service token (svc_…) for an operator or a role,\nsigned with SERVICE_TOKEN",
		`Mints a service token (svc_…) named NAME for an operator or a role, signed
with SERVICE_TOKEN.

  --ttl D  lifetime of the token (default 1h)`},
	{"worker [--groups=a,b]", "run consumer groups (all of this build's by default)",
		`Runs consumer groups: all of this build's by default.

  --groups a,b  comma-separated consumer groups to run`},
	{"replay --group NAME --from-beginning", "rebuild a materializer's tables from its topics\n(the group must be stopped)",
		`Rebuilds the tables consumer group NAME owns (docs/topics.md, "Consumer
groups") from its topics: refuses while the group has members, truncates
only those tables, reads every partition of its topics from the beginning to
the end offsets of the moment it started, without joining the group, applies
the records with the group's own handler, then commits those end offsets for
the group, so the group continues from there once started again. Groups
that own no tables are refused.

  --group NAME            the consumer group (session-materializer)
  --from-beginning        confirms the rebuild from the topics' first records
                          (required: the only mode)
  --allow-retention-loss  replay although retention has deleted the topics'
                          oldest records (the rows built from them are lost)`},
	{"secrets reseal", "re-encrypt stored secrets with the first ENCRYPTION_KEYS key",
		`Re-encrypts every stored secret with the first ENCRYPTION_KEYS key (after a
new key was added in front).`},
	{"config [--markdown]", "print the effective configuration, secrets redacted",
		`Prints every setting with its effective value, secrets redacted.

  --markdown  print docs/config.md instead`},
	{"help [COMMAND]", "this list, or the usage of one command",
		`Prints the list of commands, or the usage of COMMAND (as COMMAND --help
does).`},
}

// usage is the text of 'proliferate help'.
func usage() string {
	var b strings.Builder
	b.WriteString("proliferate — cloud coding agents for teams, on Kafka\n\nUsage: proliferate <command> [arguments]\n\nCommands:\n")
	for _, c := range commands {
		summary := strings.ReplaceAll(c.summary, "\n", "\n"+strings.Repeat(" ", 26))
		if len(c.synopsis) > 22 {
			fmt.Fprintf(&b, "  %s\n  %-22s  %s\n", c.synopsis, "", summary)
		} else {
			fmt.Fprintf(&b, "  %-22s  %s\n", c.synopsis, summary)
		}
	}
	b.WriteString("\nEvery setting is an environment variable; see 'proliferate config'.\n'proliferate help COMMAND' or 'proliferate COMMAND --help' shows one command.\n")
	return b.String()
}

// commandHelp prints the usage of the command named name.
func commandHelp(name string, stdout io.Writer) error {
	for _, c := range commands {
		if c.name() != name {
			continue
		}
		if strings.HasPrefix(c.help, "Usage: proliferate "+name) { // the sandbox commands' own usage
			_, err := io.WriteString(stdout, c.help)
			return err
		}
		_, err := fmt.Fprintf(stdout, "Usage: proliferate %s\n\n%s\n", c.synopsis, c.help)
		return err
	}
	return usageError{fmt.Sprintf("unknown command %q", name)}
}

func afterFirstLine(s string) string {
	_, rest, _ := strings.Cut(s, "\n")
	return strings.Trim(rest, "\n")
}

func isHelpFlag(s string) bool { return s == "-h" || s == "--help" || s == "-help" }

// asksForHelp reports whether args (after the command) ask for its usage:
// -h, -help or --help anywhere before a "--".
func asksForHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpFlag(a) {
			return true
		}
	}
	return false
}

func main() {
	// Inside a sandbox: no platform config, database or broker needed.
	if len(os.Args) > 1 && os.Args[1] == "actions" {
		os.Exit(actionsMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && sandboxMains[os.Args[1]] != nil {
		os.Exit(sandboxMains[os.Args[1]](os.Args[2:]))
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "proliferate:", err)
		var uerr usageError
		if errors.As(err, &uerr) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// sandboxMains are the other commands the agent runs inside its sandbox,
// dispatched like actions before any platform configuration is loaded.
var sandboxMains = map[string]func([]string) int{"git-credential": gitCredentialMain, "pr": prMain, "services": servicesMain}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg + " (see 'proliferate help')" }

func run(args []string, stdout, stderr io.Writer) error {
	// Help is answered before anything is loaded, connected or started.
	if len(args) == 0 || isHelpFlag(args[0]) || (args[0] == "help" && len(args) == 1) {
		_, err := io.WriteString(stdout, usage())
		return err
	}
	if asksForHelp(args[1:]) {
		return commandHelp(args[0], stdout)
	}
	if args[0] == "help" {
		return commandHelp(args[1], stdout)
	}
	cmd, rest := args[0], args[1:]
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	log := obs.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := app.New(cfg, log)
	defer a.Close()

	switch cmd {
	case "dev":
		return a.Dev(ctx)
	case "broker":
		b, err := a.StartBroker()
		if err != nil {
			return err
		}
		defer b.Close()
		<-ctx.Done()
		log.Info("broker stopping; state persisted", "data_dir", cfg.BrokerDataDir)
		return nil
	case "migrate":
		return migrate(ctx, a, rest, stdout)
	case "topics":
		return topicsCmd(ctx, a, rest, stdout)
	case "outbox":
		return outboxCmd(ctx, a, rest, stdout)
	case "mail":
		return mailCmd(ctx, a, rest, stdout)
	case "api":
		return a.Serve(ctx, cmd, nil, a.APIRole, a.MailRole)
	case "ingest":
		return a.Serve(ctx, cmd, nil, a.IngestRole)
	case "scheduler":
		return a.Serve(ctx, cmd, nil, a.SchedulerRole)
	case "relay":
		return a.Serve(ctx, cmd, nil, a.RelayRole)
	case "gateway":
		return a.Serve(ctx, cmd, nil, a.GatewayRole)
	case "chat":
		return chat(ctx, cfg, rest, os.Stdin, stdout, stderr)
	case "terminal":
		return terminal(ctx, cfg, rest, os.Stdin, stdout, stderr)
	case "finalizer":
		return a.Serve(ctx, cmd, nil, a.FinalizerRole)
	case "service-token":
		fs := flag.NewFlagSet("service-token", flag.ContinueOnError)
		fs.SetOutput(stderr)
		ttl := fs.Duration("ttl", time.Hour, "lifetime of the token")
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return usageError{"service-token needs a NAME, e.g. proliferate service-token ops"}
		}
		if err := fs.Parse(rest[1:]); err != nil {
			return usageError{err.Error()}
		}
		tok, err := identity.IssueServiceToken(cfg.ServiceToken, rest[0], *ttl)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		return nil
	case "billing-jobs":
		return a.Serve(ctx, cmd, nil, a.BillingJobsRole)
	case "llm-proxy":
		return a.Serve(ctx, cmd, nil, a.LLMProxyRole)
	case "dev-fakes":
		return devFakesCmd(ctx, cfg.Env, rest, stdout, log)
	case "llm-sim":
		return llmsim.Main(ctx, cfg.LLMSimAddr, llmsim.Options{APIKey: cfg.LLMSimAPIKey, ScriptsDir: cfg.LLMSimScriptsDir, Logger: log})
	case "worker":
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(stderr)
		groups := fs.String("groups", "", "comma-separated consumer groups (default: all)")
		if err := fs.Parse(rest); err != nil {
			return usageError{err.Error()}
		}
		var names []string
		for g := range strings.SplitSeq(*groups, ",") {
			if g = strings.TrimSpace(g); g != "" {
				names = append(names, g)
			}
		}
		roles, err := a.WorkerRoles(ctx, names)
		if err != nil {
			return err
		}
		return a.Serve(ctx, cmd, roles)
	case "replay":
		fs := flag.NewFlagSet("replay", flag.ContinueOnError)
		fs.SetOutput(stderr)
		group := fs.String("group", "", "consumer group whose tables to rebuild")
		fromBeginning := fs.Bool("from-beginning", false, "rebuild from the topics' first records")
		allowLoss := fs.Bool("allow-retention-loss", false, "replay although retention deleted the oldest records")
		if err := fs.Parse(rest); err != nil {
			return usageError{err.Error()}
		}
		if *group == "" || fs.NArg() > 0 {
			return usageError{"usage: proliferate replay --group NAME --from-beginning [--allow-retention-loss]"}
		}
		if !*fromBeginning {
			return usageError{"replay truncates the tables of " + *group + " and rebuilds them from the topics' first records: pass --from-beginning to confirm"}
		}
		rep, err := a.Replay(ctx, *group, app.ReplayOptions{AllowRetentionLoss: *allowLoss})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replayed %s: truncated %s, applied %d records, skipped %d (dead-lettered before); the group continues after the replayed offsets\n",
			*group, strings.Join(rep.Truncated, ", "), rep.Applied, rep.Skipped)
		return nil
	case "secrets":
		if len(rest) != 1 || rest[0] != "reseal" {
			return usageError{"usage: proliferate secrets reseal"}
		}
		if err := a.OpenPostgres(ctx); err != nil {
			return err
		}
		box, err := secretbox.New(cfg.EncryptionKeys)
		if err != nil {
			return err
		}
		res, err := secrets.ResealAll(ctx, a.Pool, box)
		fmt.Fprintf(stdout, "resealed %d secrets with the active key, %d could not be opened\n", res.Resealed, res.Failed)
		return err
	case "config":
		if len(rest) == 1 && rest[0] == "--markdown" {
			_, err := io.WriteString(stdout, config.Markdown())
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, s := range cfg.Settings() {
			fmt.Fprintf(tw, "%s\t%s\t# %s\n", s.Var, s.Value, s.Doc)
		}
		return tw.Flush()
	default:
		return usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
}

func migrate(ctx context.Context, a *app.App, args []string, stdout io.Writer) error {
	if len(args) != 1 || (args[0] != "up" && args[0] != "status") {
		return usageError{"usage: proliferate migrate up|status"}
	}
	if err := a.OpenPostgres(ctx); err != nil {
		return err
	}
	if args[0] == "up" {
		applied, err := migrations.Up(ctx, a.Pool)
		for _, m := range applied {
			fmt.Fprintf(stdout, "applied %s_%s\n", m.Version, m.Name)
		}
		if err == nil && len(applied) == 0 {
			fmt.Fprintln(stdout, "database is up to date")
		}
		return err
	}
	states, err := migrations.Status(ctx, a.Pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
	for _, s := range states {
		at := "pending"
		if s.AppliedAt != nil {
			at = s.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
		}
		if s.Modified {
			at += " (file changed since!)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Version, s.Name, at)
	}
	return tw.Flush()
}

func topicsCmd(ctx context.Context, a *app.App, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"usage: proliferate topics ensure|list|describe [topic]|docs|tail TOPIC [--from-beginning] [--json]"}
	}
	switch args[0] {
	case "list":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCLEANUP\tRETENTION\tKEY")
		for _, t := range topics.All() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", t.Name, t.Partitions, t.Cleanup, topics.FormatRetention(t.Retention), t.Key)
		}
		return tw.Flush()
	case "tail":
		return topicsTail(ctx, a, args[1:], stdout)
	case "docs":
		doc, err := topics.Markdown()
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, doc)
		return err
	case "ensure":
		rep, err := a.EnsureTopics(ctx)
		if err != nil {
			return err
		}
		for _, n := range rep.Created {
			fmt.Fprintf(stdout, "created %s\n", n)
		}
		fmt.Fprintf(stdout, "%d created, %d already existed, %d drifted\n", len(rep.Created), len(rep.Existing), len(rep.Drift))
		for _, d := range rep.Drift {
			fmt.Fprintf(stdout, "drift: %s\n", d)
		}
		if len(rep.Drift) > 0 {
			return errors.New("topics differ from the catalog (ensure never alters existing topics; fix them deliberately)")
		}
		return nil
	case "describe":
		cl, err := a.NewKafkaClient("admin")
		if err != nil {
			return err
		}
		adm := kadm.NewClient(cl)
		names := args[1:]
		if len(names) == 0 {
			for _, t := range topics.All() {
				names = append(names, t.Name)
			}
		}
		details, err := adm.ListTopics(ctx, names...)
		if err != nil {
			return err
		}
		ends, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tRECORDS(END OFFSETS)\tSTATUS")
		for _, n := range names {
			d, ok := details[n]
			if !ok || d.Err != nil {
				fmt.Fprintf(tw, "%s\t-\t-\tmissing\n", n)
				continue
			}
			var total int64
			ends.Each(func(o kadm.ListedOffset) {
				if o.Topic == n {
					total += o.Offset
				}
			})
			fmt.Fprintf(tw, "%s\t%d\t%d\tok\n", n, len(d.Partitions), total)
		}
		return tw.Flush()
	default:
		return usageError{fmt.Sprintf("unknown topics command %q", args[0])}
	}
}
