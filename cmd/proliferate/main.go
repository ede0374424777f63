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

	"github.com/proliferate/proliferate/internal/app"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/migrations"
	"github.com/proliferate/proliferate/topics"
)

const usage = `proliferate — cloud coding agents for teams, on Kafka

Usage: proliferate <command> [arguments]

Commands:
  dev                     run the whole platform in one process (embedded broker
                          unless KAFKA_BROKERS is set, migrations, topics, every role)
  broker                  run the embedded Kafka broker alone on BROKER_ADDR
  migrate up|status       apply or list database migrations
  topics ensure|list|describe [topic]|docs
                          create missing topics and report drift; list the catalog;
                          show a topic on the cluster; print docs/topics.md
  api                     serve the REST API (/api/v1) on API_ADDR
  ingest                  accept webhooks on INGEST_ADDR (/webhooks/…) into webhooks.raw
  scheduler               run the cron scheduler and the integration pollers
  relay                   run the transactional outbox relay
  outbox status|list|show ID|retry ID…|--all|discard ID…|--all
                          the relay's backlog and the rows it set aside as
                          unpublishable: inspect, retry or discard them
  finalizer               run the run finalizer (deadlines, inactivity, dead sessions)
  gateway                 serve the session gateway on GATEWAY_ADDR (WebSocket streaming,
                          session routes, sandbox tool callbacks; a sandbox per session)
  chat --token T SESSION  talk to a session's agent over the gateway's WebSocket: each
                          stdin line is a prompt (/cancel, /status, /snapshot)
  terminal --token T SESSION
                          a shell in the session's sandbox workspace (the gateway's
                          terminal WebSocket; starts or resumes the sandbox)
  actions list|guide|run  (inside a sandbox) act on connected integrations through the
                          gateway: proliferate actions --help
  billing-jobs            grace clock, enforcement retries, ledger partitions, LiteLLM spend
                          collection, Autumn posting, auto-top-up, trial activation and
                          the nightly reconciliation (each once at a time across replicas)
  llm-proxy               the LLM proxy on LLM_PROXY_ADDR: per-session virtual keys, streamed
                          through unbuffered, every request priced into llm.spend
  llm-sim                 serve the scripted LLM (Anthropic Messages API) on LLMSIM_ADDR
  service-token NAME [--ttl=1h]
                          mint a service token (svc_…) for an operator or a role,
                          signed with SERVICE_TOKEN
  worker [--groups=a,b]   run consumer groups (all of this build's by default)
  secrets reseal          re-encrypt stored secrets with the first ENCRYPTION_KEYS key
  config                  print the effective configuration, secrets redacted

Every setting is an environment variable; see 'proliferate config'.
`

func main() {
	// Inside a sandbox: no platform config, database or broker needed.
	if len(os.Args) > 1 && os.Args[1] == "actions" {
		os.Exit(actionsMain(os.Args[2:]))
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

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg + " (see 'proliferate help')" }

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return nil
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
	case "api":
		return a.Serve(ctx, cmd, nil, a.APIRole)
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
		return usageError{"usage: proliferate topics ensure|list|describe [topic]|docs"}
	}
	switch args[0] {
	case "list":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCLEANUP\tRETENTION\tKEY")
		for _, t := range topics.All() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", t.Name, t.Partitions, t.Cleanup, topics.FormatRetention(t.Retention), t.Key)
		}
		return tw.Flush()
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
