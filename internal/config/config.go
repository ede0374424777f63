// Package config is the one place where Proliferate reads its settings.
//
// Every setting is an environment variable with a development default, declared
// once as a tagged field of Config. Load parses and validates all of them and
// reports every problem at once, naming the variable and what is wrong with it,
// so a misconfigured deployment fails at start with a message an operator can act
// on instead of a panic deep inside a role.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/mail"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/internal/sandbox/egress"
	"github.com/proliferate/proliferate/topics"
)

// Config holds every setting of every role. Field tags:
//
//	env:"NAME"       the environment variable
//	default:"value"  the value used when the variable is unset or empty
//	check:"…"        extra validation (see validators below), comma separated
//	secret:"true"    redacted by Redacted and never logged
//	doc:"…"          one line for `proliferate config` and the README
type Config struct {
	Env       string `env:"PROLIFERATE_ENV" default:"development" check:"oneof=development|test|production" doc:"deployment environment; production refuses development-only defaults"`
	LogLevel  string `env:"LOG_LEVEL" default:"info" check:"oneof=debug|info|warn|error" doc:"minimum log level"`
	LogFormat string `env:"LOG_FORMAT" default:"text" check:"oneof=text|json" doc:"log encoding on stderr"`

	DatabaseURL      string `env:"DATABASE_URL" default:"postgres://proliferate@127.0.0.1:15432/proliferate?sslmode=disable" check:"url=postgres|postgresql" secret:"true" doc:"PostgreSQL connection URL (the password part is a secret)"`
	DatabaseMaxConns int    `env:"DATABASE_MAX_CONNS" default:"20" check:"min=1,max=1000" doc:"maximum connections in each role's pool"`
	RedisURL         string `env:"REDIS_URL" default:"redis://127.0.0.1:16379/0" check:"url=redis|rediss" secret:"true" doc:"Redis connection URL (the password part is a secret)"`

	KafkaBrokers           []string `env:"KAFKA_BROKERS" check:"hostports" doc:"comma-separated seed brokers; empty: dev runs the embedded broker on BROKER_ADDR and every other role connects to BROKER_ADDR (a proliferate broker beside it)"`
	KafkaClientID          string   `env:"KAFKA_CLIENT_ID" default:"proliferate" check:"nonempty" doc:"client.id sent to the brokers"`
	KafkaReplicationFactor int      `env:"KAFKA_REPLICATION_FACTOR" default:"-1" check:"min=-1,max=32" doc:"replication factor for topics ensure; -1 uses the broker default"`
	SchemaRegistryURL      string   `env:"SCHEMA_REGISTRY_URL" check:"url=http|https" doc:"Confluent-compatible schema registry; empty uses Avro single-object encoding"`

	BrokerAddr              string        `env:"BROKER_ADDR" default:"127.0.0.1:9092" check:"hostport" doc:"listen address of the embedded broker (dev, broker)"`
	BrokerDataDir           string        `env:"BROKER_DATA_DIR" default:"/var/tmp/proliferate/data/kafka" check:"nonempty" doc:"data directory of the embedded broker; locked against a second process"`
	BrokerRetentionInterval time.Duration `env:"BROKER_RETENTION_INTERVAL" default:"1m" check:"positive" doc:"how often the embedded broker applies topic retention"`

	OpsAddr      string        `env:"OPS_ADDR" check:"opthostport" doc:"listen address of /healthz, /readyz and /metrics; empty: 127.0.0.1 and the port of the role (dev 9464; every role subcommand its own, see the table below), so split roles on one machine never collide"`
	ReadyTimeout time.Duration `env:"READY_TIMEOUT" default:"2s" check:"positive" doc:"bound of each /readyz check (they run concurrently); a check without an answer by then fails"`

	ConsumerMaxAttempts    int           `env:"CONSUMER_MAX_ATTEMPTS" default:"5" check:"min=1,max=100" doc:"attempts per record before it goes to the group's dead-letter topic"`
	ConsumerBackoffInitial time.Duration `env:"CONSUMER_BACKOFF_INITIAL" default:"100ms" check:"positive" doc:"first retry delay; doubles per attempt"`
	ConsumerBackoffMax     time.Duration `env:"CONSUMER_BACKOFF_MAX" default:"10s" check:"positive" doc:"retry delay cap"`
	ConsumerReadyGrace     time.Duration `env:"CONSUMER_READY_GRACE" default:"30s" check:"positive" doc:"how long a consumer group that had joined may be out of its group (rebalance, rejoin after a lost session) before /readyz fails; before its first join a group is not ready"`

	OutboxBatchSize     int           `env:"OUTBOX_BATCH_SIZE" default:"500" check:"min=1,max=10000" doc:"events the relay publishes per transaction"`
	OutboxLanes         int           `env:"OUTBOX_LANES" default:"16" check:"min=1,max=1024" doc:"ordering lanes (hash of key); each lane is relayed by one replica at a time"`
	OutboxPollInterval  time.Duration `env:"OUTBOX_POLL_INTERVAL" default:"1s" check:"positive" doc:"fallback poll when no NOTIFY arrives"`
	OutboxRetention     time.Duration `env:"OUTBOX_RETENTION" default:"24h" check:"positive" doc:"how long published outbox rows are kept for inspection"`
	OutboxMaxPendingAge time.Duration `env:"OUTBOX_MAX_PENDING_AGE" default:"30s" check:"positive" doc:"the relay's /readyz fails while the oldest unpublished outbox row is older than this (rows set aside as dead letters do not count)"`

	APIAddr             string        `env:"API_ADDR" default:"127.0.0.1:8080" check:"hostport" doc:"listen address of the REST API (/api/v1)"`
	APICORSOrigins      []string      `env:"API_CORS_ORIGINS" doc:"comma-separated browser origins allowed by CORS; empty allows none"`
	DashboardGatewayURL string        `env:"DASHBOARD_GATEWAY_URL" check:"url=http|https" doc:"where the API role forwards the dashboard's session traffic (/proliferate/…: the gateway's HTTP routes and WebSocket) so the dashboard needs one origin; empty uses GATEWAY_PUBLIC_URL. Previews are not forwarded: they stay on the gateway's own origin"`
	APIMaxBodyBytes     int           `env:"API_MAX_BODY_BYTES" default:"1048576" check:"min=1024,max=67108864" doc:"largest accepted request body; larger ones get 413"`
	AuthSigningKeys     []string      `env:"AUTH_SIGNING_KEYS" default:"dev:ZGV2LW9ubHktc2lnbmluZy1rZXktZG8tbm90LXVzZS1pbi1wcm9kdWN0aW9u" check:"keys=32" secret:"true" doc:"access-token HMAC keys as kid:base64 (≥32 bytes), comma-separated; the first signs, all verify (rotation)"`
	AccessTokenTTL      time.Duration `env:"ACCESS_TOKEN_TTL" default:"1h" check:"positive" doc:"lifetime of an access token"`
	SessionTTL          time.Duration `env:"SESSION_TTL" default:"168h" check:"positive" doc:"lifetime of a login session (refresh)"`
	EncryptionKeys      []string      `env:"ENCRYPTION_KEYS" default:"dev:ZGV2LW9ubHktMzItYnl0ZS1lbmNyeXB0aW9uLWtleSE=" check:"keys=32exact" secret:"true" doc:"AES-256-GCM keys for secrets at rest as kid:base64 (32 bytes), comma-separated; the first encrypts, all decrypt (rotation)"`
	ServiceToken        string        `env:"SERVICE_TOKEN" default:"dev-service-token-change-me-in-production" check:"min_len=16" secret:"true" doc:"shared secret for the platform's own roles (signs their service tokens); sandboxes never see it and nothing of theirs derives from it"`
	SuperAdminEmails    []string      `env:"SUPER_ADMIN_EMAILS" doc:"comma-separated emails of super-admins (list all users/orgs, impersonate)"`
	PublicURL           string        `env:"PUBLIC_URL" default:"http://127.0.0.1:8080" check:"url=http|https" doc:"base URL users reach the platform at (links in emails)"`
	Mailer              string        `env:"MAILER" default:"log" check:"oneof=log|smtp" doc:"email delivery: smtp (SMTP_HOST…; required with PROLIFERATE_ENV=production) or log (development: writes each message, one-time links included, to the log; refused in production, where emails must arrive)"`
	SMTPHost            string        `env:"SMTP_HOST" doc:"SMTP server for MAILER=smtp (your provider's submission host)"`
	SMTPPort            int           `env:"SMTP_PORT" default:"587" check:"min=1,max=65535" doc:"SMTP port: 587 (submission with STARTTLS) or 465 (SMTP_TLS=tls)"`
	SMTPUsername        string        `env:"SMTP_USERNAME" doc:"SMTP AUTH user; empty sends without authenticating"`
	SMTPPassword        string        `env:"SMTP_PASSWORD" secret:"true" doc:"SMTP AUTH password (sent only over TLS)"`
	SMTPFrom            string        `env:"SMTP_FROM" doc:"sender of the platform's emails, e.g. Proliferate <noreply@example.com>; required with MAILER=smtp"`
	SMTPTLS             string        `env:"SMTP_TLS" default:"starttls" check:"oneof=starttls|tls|none" doc:"starttls: upgrade with STARTTLS when the server offers it, and refuse to authenticate or send without it unless the server is on loopback; tls: implicit TLS from the first byte (port 465); none: plain text (development only; refused in production)"`
	SMTPTimeout         time.Duration `env:"SMTP_TIMEOUT" default:"15s" check:"positive" doc:"bound of one email's whole SMTP exchange (connect, TLS, AUTH, DATA)"`
	MailMaxAttempts     int           `env:"MAIL_MAX_ATTEMPTS" default:"12" check:"min=1,max=1000" doc:"tries of one queued email (mail_queue) before it is set aside as failed; a permanent refusal (5xx to RCPT TO or DATA, e.g. 550 no such user) sets it aside at once"`
	MailBackoffInitial  time.Duration `env:"MAIL_BACKOFF_INITIAL" default:"30s" check:"positive" doc:"wait before retrying an email the mail server did not take (connection refused, 421, 451…); doubled after each failure up to MAIL_BACKOFF_MAX, with jitter (a random 50–100 % of it)"`
	MailBackoffMax      time.Duration `env:"MAIL_BACKOFF_MAX" default:"1h" check:"positive" doc:"longest wait between two tries of one email (12 tries at the defaults span about 5 hours of outage)"`
	MailPollInterval    time.Duration `env:"MAIL_POLL_INTERVAL" default:"5s" check:"positive" doc:"how often the mail sender (in the api role) looks for emails whose retry came due; new emails wake it at once (LISTEN/NOTIFY)"`
	APITrustedProxies   []string      `env:"API_TRUSTED_PROXIES" doc:"comma-separated IPs/CIDRs of reverse proxies whose X-Forwarded-For is believed; empty trusts none (client IP = TCP peer)"`
	RateLimitNamespace  string        `env:"RATE_LIMIT_NAMESPACE" doc:"separates the sign-in, sign-up and reset rate-limit counters in Redis of deployments that share one Redis (e.g. two staging environments); empty: one shared set"`
	SignupRateLimit     int           `env:"SIGNUP_RATE_LIMIT" default:"20" check:"min=1,max=1000000" doc:"accounts one IP address may create per hour (POST /auth/signup); more are refused with 429 until the hour has passed"`

	// Sign-in with GitHub and Google (api/identity/oauth.go). A provider is
	// offered when its client id and secret are both set. GitHub's endpoints
	// are GITHUB_URL (authorize, token) and GITHUB_API_URL (user, emails);
	// Google's come from GOOGLE_OIDC_ISSUER's discovery document. The
	// redirect URI to register at the provider is
	// <PUBLIC_URL>/api/v1/auth/oauth/<github|google>/callback.
	GitHubOAuthClientID     string `env:"GITHUB_OAUTH_CLIENT_ID" doc:"client id of the GitHub OAuth app (or GitHub App) for \"Continue with GitHub\"; empty (or no secret): GitHub sign-in is off"`
	GitHubOAuthClientSecret string `env:"GITHUB_OAUTH_CLIENT_SECRET" secret:"true" doc:"client secret of that GitHub OAuth app"`
	GoogleOAuthClientID     string `env:"GOOGLE_OAUTH_CLIENT_ID" doc:"OAuth client id (web application) for \"Continue with Google\"; empty (or no secret): Google sign-in is off"`
	GoogleOAuthClientSecret string `env:"GOOGLE_OAUTH_CLIENT_SECRET" secret:"true" doc:"client secret of that Google OAuth client"`
	GoogleOIDCIssuer        string `env:"GOOGLE_OIDC_ISSUER" default:"https://accounts.google.com" check:"url=http|https" doc:"Google's OpenID Connect issuer: its /.well-known/openid-configuration names the authorize, token and JWKS endpoints, and ID tokens must carry it as iss"`

	GitHubAppID         string `env:"GITHUB_APP_ID" doc:"GitHub App id (integrations); empty disables GitHub App tokens"`
	GitHubAppPrivateKey string `env:"GITHUB_APP_PRIVATE_KEY" secret:"true" doc:"GitHub App private key, PEM (RS256)"`
	GitHubAPIURL        string `env:"GITHUB_API_URL" default:"https://api.github.com" check:"url=http|https" doc:"GitHub REST API base URL"`
	GitHubAppSlug       string `env:"GITHUB_APP_SLUG" doc:"the GitHub App's URL name (GITHUB_URL/apps/<slug>): the dashboard's Install button opens its install page, whose Setup URL must be <PUBLIC_URL>/settings/integrations; empty: the dashboard shows the install state to use by hand"`
	GitHubURL           string `env:"GITHUB_URL" default:"https://github.com" check:"url=http|https" doc:"GitHub's web base URL (the App's install page); GitHub Enterprise Server: its own host"`
	NangoConnectURL     string `env:"NANGO_CONNECT_URL" default:"https://connect.nango.dev" check:"url=http|https" doc:"Nango's Connect UI, which the dashboard opens in a frame to connect Linear, Sentry … (self-hosted Nango: its connect UI's URL)"`
	NangoURL            string `env:"NANGO_URL" default:"https://api.nango.dev" check:"url=http|https" doc:"Nango API base URL"`
	NangoSecretKey      string `env:"NANGO_SECRET_KEY" secret:"true" doc:"Nango secret key; empty disables Nango connections"`
	SentryAPIURL        string `env:"SENTRY_API_URL" default:"https://sentry.io/api/0" check:"url=http|https" doc:"Sentry API base URL"`
	LinearAPIURL        string `env:"LINEAR_API_URL" default:"https://api.linear.app/graphql" check:"url=http|https" doc:"Linear GraphQL endpoint"`
	SlackAPIURL         string `env:"SLACK_API_URL" default:"https://slack.com/api" check:"url=http|https" doc:"Slack Web API base URL"`
	SlackClientID       string `env:"SLACK_CLIENT_ID" doc:"Slack app client id (oauth.v2.access); empty disables Slack installs"`
	SlackClientSecret   string `env:"SLACK_CLIENT_SECRET" secret:"true" doc:"Slack app client secret"`

	ActionsPendingTTL           time.Duration `env:"ACTIONS_PENDING_TTL" default:"5m" check:"positive" doc:"how long an action invocation of an interactive session waits for a person's approval before it expires"`
	ActionsPendingTTLAutomation time.Duration `env:"ACTIONS_PENDING_TTL_AUTOMATION" default:"24h" check:"positive" doc:"the same for an invocation of an automation run (its run waits paused meanwhile)"`
	ActionsSweepInterval        time.Duration `env:"ACTIONS_SWEEP_INTERVAL" default:"30s" check:"positive" doc:"how often the gateway expires overdue pending invocations and fails those left executing by a dead gateway"`

	IngestAddr              string        `env:"INGEST_ADDR" default:"127.0.0.1:8090" check:"hostport" doc:"listen address of the webhook ingest role (/webhooks/…)"`
	IngestPublicURL         string        `env:"INGEST_PUBLIC_URL" default:"http://127.0.0.1:8090" check:"url=http|https" doc:"base URL providers reach the ingest role at (custom webhook URLs shown to users)"`
	IngestMaxBodyBytes      int           `env:"INGEST_MAX_BODY_BYTES" default:"1048576" check:"min=1024,max=67108864" doc:"largest accepted webhook body; larger ones get 413"`
	IngestInlineBodyBytes   int           `env:"INGEST_INLINE_BODY_BYTES" default:"65536" check:"min=0" doc:"webhook bodies up to this size travel inside the webhooks.raw record; larger ones are stored in the blob store (S3_BUCKET or BLOB_DIR) and the record carries a reference; at most the topic's record limit less 64 KiB for headers"`
	GitHubWebhookSecret     string        `env:"GITHUB_WEBHOOK_SECRET" secret:"true" doc:"GitHub App webhook secret (X-Hub-Signature-256); empty rejects GitHub webhooks"`
	TriggerLLMModel         string        `env:"TRIGGER_LLM_MODEL" default:"claude-haiku-4-5" doc:"model the trigger processor asks an automation's LLM filter and analysis prompts (through the agent's model: LLM_BASE_URL / ANTHROPIC_API_KEY, else the scripted LLM outside production); billed to the org as llm.spend"`
	TriggerLLMTimeout       time.Duration `env:"TRIGGER_LLM_TIMEOUT" default:"20s" check:"positive" doc:"how long the trigger processor waits for one LLM filter or analysis answer"`
	TriggerLLMFailOpen      bool          `env:"TRIGGER_LLM_FAIL_OPEN" doc:"when the LLM filter has no usable answer (timeout, error, malformed answer): true queues the run anyway; false (default) skips the event with reason llm_filter_failed"`
	TriggerLLMMaxEventBytes int           `env:"TRIGGER_LLM_MAX_EVENT_BYTES" default:"16384" check:"min=1024,max=1048576" doc:"the event JSON shown to the model is cut to this many bytes"`
	SchedulerTick           time.Duration `env:"SCHEDULER_TICK" default:"1s" check:"positive" doc:"how often the cron scheduler and the poller look for due schedules and poll groups"`
	OrgDeletionGrace        time.Duration `env:"ORG_DELETION_GRACE" default:"168h" check:"positive" doc:"how long an organization its owner deleted stays restorable (POST /api/v1/orgs/{id}/restore) before the scheduler deletes it for good"`
	OrgDeletionSweep        time.Duration `env:"ORG_DELETION_SWEEP_INTERVAL" default:"15s" check:"positive" doc:"how often the scheduler pauses the sessions of organizations scheduled for deletion and deletes those whose grace period is over"`
	WebAppURL               string        `env:"WEB_APP_URL" check:"url=http|https" doc:"base URL of the web app, for links in Slack notifications; empty uses PUBLIC_URL"`
	S3Bucket                string        `env:"S3_BUCKET" doc:"bucket for run artifacts and webhook bodies over INGEST_INLINE_BODY_BYTES; empty stores them on the filesystem under BLOB_DIR (which every ingest and trigger-processor replica must then share)"`
	S3Region                string        `env:"S3_REGION" default:"us-east-1" doc:"S3 region (request signing)"`
	S3EndpointURL           string        `env:"S3_ENDPOINT_URL" check:"url=http|https" doc:"S3-compatible endpoint (MinIO, R2, …), addressed path-style; empty uses AWS"`
	S3AccessKey             string        `env:"S3_ACCESS_KEY" doc:"S3 access key id"`
	S3SecretKey             string        `env:"S3_SECRET_KEY" secret:"true" doc:"S3 secret access key"`
	BlobDir                 string        `env:"BLOB_DIR" default:"/var/tmp/proliferate/data/blobs" check:"nonempty" doc:"directory of the filesystem blob store (when S3_BUCKET is empty)"`
	RunSessions             string        `env:"RUN_SESSIONS" default:"gateway" check:"oneof=gateway|record" doc:"how the run executor starts sessions: gateway (real sessions through GATEWAY_PUBLIC_URL) or record (logged in memory, nothing runs: for tests of the pipeline alone)"`
	GatewayAddr             string        `env:"GATEWAY_ADDR" default:"127.0.0.1:8070" check:"hostport" doc:"listen address of the session gateway (/proliferate/…, WebSocket streaming, sandbox tool callbacks)"`
	GatewayPublicURL        string        `env:"GATEWAY_PUBLIC_URL" default:"http://127.0.0.1:8070" check:"url=http|https" doc:"base URL clients, the run executor and sandboxes reach the gateway at"`
	GatewayAdvertiseURL     string        `env:"GATEWAY_ADVERTISE_URL" check:"url=http|https" doc:"internal base URL other gateway replicas reach this one at, to forward a session's commands to the replica that owns it; empty derives it from the listen address (GATEWAY_ADDR; a wildcard host becomes this machine's hostname)"`
	SandboxProvider         string        `env:"SANDBOX_PROVIDER" default:"local" check:"oneof=local|e2b" doc:"sandbox provider: local (a workspace and an opencode process per session on this machine, isolated per SANDBOX_ISOLATION) or e2b (an E2B cloud sandbox per session: E2B_API_KEY, E2B_TEMPLATE; SANDBOX_TIMEOUT is its E2B timeout)"`
	E2BAPIKey               string        `env:"E2B_API_KEY" secret:"true" doc:"E2B API key (X-API-Key); required with SANDBOX_PROVIDER=e2b"`
	E2BDomain               string        `env:"E2B_DOMAIN" default:"e2b.app" check:"nonempty" doc:"E2B's domain: the API is https://api.<domain> and a sandbox's port N is https://N-<sandbox id>.<domain> (the agent's AgentURL is its port 4096)"`
	E2BAPIURL               string        `env:"E2B_API_URL" check:"url=http|https" doc:"E2B control plane URL; empty: https://api.<E2B_DOMAIN>"`
	E2BTemplate             string        `env:"E2B_TEMPLATE" default:"proliferate" check:"nonempty" doc:"E2B template (id or alias) of new sandboxes: user \"user\" with git and bash, the pinned OpenCode at /opt/proliferate/bin/opencode and its plugin SDK at /opt/proliferate/opencode-plugin"`
	SandboxDataDir          string        `env:"SANDBOX_DATA_DIR" default:"/var/tmp/proliferate/data/sandboxes" check:"nonempty" doc:"where the local provider keeps session workspaces and snapshots; keep it outside any git checkout (git commands of a session never walk up out of its workspace, but the default is outside the working tree anyway)"`
	SandboxIsolation        string        `env:"SANDBOX_ISOLATION" default:"bwrap" check:"oneof=bwrap|none" doc:"how the local provider contains agents: bwrap runs the agent, terminals and git commands of each session in a bubblewrap sandbox (own namespaces, no capabilities, a read-only host view with only its workspace and home writable, no network but its own session's gateway routes and the LLM API; needs bubblewrap and socat, which make tools installs); none runs them as plain host processes (development only; refused in production)"`
	OrphanSweepInterval     time.Duration `env:"ORPHAN_SWEEP_INTERVAL" default:"30s" check:"positive" doc:"how often the gateway looks for running sessions whose gateway died (no runtime or owner lease)"`
	SandboxEgress           string        `env:"SANDBOX_EGRESS" default:"allowlist" check:"oneof=none|allowlist|open" doc:"internet egress of isolated sandboxes, through a per-sandbox HTTP(S) proxy the agent, terminals and git commands are configured to use (HTTP_PROXY, HTTPS_PROXY): none refuses everything; allowlist permits only the hosts of SANDBOX_EGRESS_ALLOW; open permits any host. In every mode a destination resolving to a loopback, private, link-local or other non-public address, or to one of the platform's own addresses, is refused unless a SANDBOX_EGRESS_ALLOW entry names that exact host:port. Every refusal is logged with the session id and counted (proliferate_sandbox_egress_refused_total). Not enforced with SANDBOX_ISOLATION=none"`
	SandboxEgressAllow      []string      `env:"SANDBOX_EGRESS_ALLOW" default:"github.com,*.github.com,*.githubusercontent.com,registry.npmjs.org,registry.yarnpkg.com,pypi.org,files.pythonhosted.org,proxy.golang.org,sum.golang.org,crates.io,*.crates.io,rubygems.org,repo.maven.apache.org,repo1.maven.org,deb.debian.org,security.debian.org" check:"egressallow" doc:"comma-separated hosts sandboxes may reach with SANDBOX_EGRESS=allowlist: host names, *.suffix wildcards (names under suffix, not suffix itself) or IP addresses, each with an optional :port (without one, any port); an entry with a host and a port also lets that exact host:port resolve to an internal address (a registry mirror on the private network)"`
	OrphanSweepGrace        time.Duration `env:"ORPHAN_SWEEP_GRACE" default:"60s" check:"positive" doc:"a session must be without activity this long before it can be swept as orphaned"`
	OpenCodeBin             string        `env:"OPENCODE_BIN" doc:"the opencode binary (a path, or a name on PATH); empty: the pinned version in the shared tools cache scripts/opencode.sh installs into (PROLIFERATE_TOOLS_DIR, default /var/tmp/proliferate/tools), else opencode on PATH when OPENCODE_PLUGIN_DIR is set, else the pinned version is installed into the cache (npm); found the same from any working directory"`
	SandboxTimeout          time.Duration `env:"SANDBOX_TIMEOUT" default:"1h" check:"positive" doc:"a sandbox's lifetime; the provider ends it after this (the gateway migrates active sessions and pauses idle ones EXPIRY_LEAD before)"`
	SandboxMemoryMB         int           `env:"SANDBOX_MEMORY_MB" default:"2048" check:"min=0,max=4194304" doc:"memory of each isolated sandbox (the agent, its terminals and commands together; swap included where the kernel accounts it), in MiB; at the limit the kernel kills the sandbox's largest process (terminals and commands before the agent) and the session's clients get an error frame; 0 is unlimited"`
	SandboxPidsLimit        int           `env:"SANDBOX_PIDS_LIMIT" default:"512" check:"min=0,max=4194304" doc:"processes and threads of each isolated sandbox (the agent alone runs ~15); at the limit fork fails and the session's clients get an error frame; 0 is unlimited"`
	SandboxCPUPercent       int           `env:"SANDBOX_CPU_PERCENT" default:"200" check:"min=0,max=100000" doc:"CPU time of each isolated sandbox in percent of one CPU (100 = one CPU, 250 = two and a half; the default, two CPUs, keeps the agent's start-up unthrottled: one CPU adds about 0.9 s to a cold start), enforced as a CFS quota: a busy sandbox is throttled, others keep their share; 0 is unlimited. The limits need cgroups (v1 memory, pids and cpu controllers or v2) writable by the gateway, e.g. as root; without them the gateway starts without limits and warns loudly, except with PROLIFERATE_ENV=production, where it refuses to start"`
	IdleSnapshotDelay       time.Duration `env:"IDLE_SNAPSHOT_DELAY" default:"5m" check:"positive" doc:"a web/api/cli session with no clients, proxy connections or agent work is snapshotted and its sandbox stopped after this long without activity"`
	HeadlessIdleDelay       time.Duration `env:"HEADLESS_IDLE_DELAY" default:"30s" check:"positive" doc:"the same grace for automation and Slack sessions (nobody refreshes their tab)"`
	EnvRequestTimeout       time.Duration `env:"ENV_REQUEST_TIMEOUT" default:"5m" check:"positive" doc:"how long the agent's request_env_variables waits for a session member to submit the values (at most 9m: the sandbox's tool call gives up after 10 minutes); then the tool returns that nobody answered"`
	PreviewPortMin          int           `env:"PREVIEW_PORT_MIN" default:"1024" check:"min=1,max=65535" doc:"lowest sandbox port a session's previews (/proliferate/{session}/preview/{port}/…) and share links may reach; ports below it answer 400 port_not_allowed (the sandbox's own ports, e.g. the agent's 4096 and the channel ports 4100-4102 of isolated sandboxes, are never reachable)"`
	PreviewPortMax          int           `env:"PREVIEW_PORT_MAX" default:"65535" check:"min=1,max=65535" doc:"highest sandbox port previews may reach (at least PREVIEW_PORT_MIN)"`
	PreviewPollInterval     time.Duration `env:"PREVIEW_POLL_INTERVAL" default:"2s" check:"positive" doc:"how often the gateway lists the ports listening in a session's sandbox while clients watch the session, to announce new ones (preview_url frames)"`
	PreviewLinkTTL          time.Duration `env:"PREVIEW_LINK_TTL" default:"10m" check:"positive" doc:"lifetime of the member's preview link (open_url: a one-person token in the URL, exchanged at the first visit for a preview cookie)"`
	PreviewCookieTTL        time.Duration `env:"PREVIEW_COOKIE_TTL" default:"8h" check:"positive" doc:"lifetime of a member's preview cookie (scoped to one session's port; the person must still be a member of the organization at every request)"`
	PreviewShareTTL         time.Duration `env:"PREVIEW_SHARE_TTL" default:"24h" check:"positive" doc:"lifetime of a preview share link when the member does not ask for one (ttl_seconds)"`
	PreviewShareMaxTTL      time.Duration `env:"PREVIEW_SHARE_MAX_TTL" default:"168h" check:"positive" doc:"longest lifetime a preview share link may be given (at least PREVIEW_SHARE_TTL); longer requests answer 400"`
	IdleCheckInterval       time.Duration `env:"IDLE_CHECK_INTERVAL" default:"30s" check:"positive" doc:"how often the gateway checks its sessions for idleness"`
	ExpiryLead              time.Duration `env:"EXPIRY_LEAD" default:"5m" check:"positive" doc:"how long before a sandbox expires the gateway migrates (active) or pauses (idle) its session"`
	HubIdleTTL              time.Duration `env:"HUB_IDLE_TTL" default:"10m" check:"positive" doc:"a gateway forgets a session it serves without a sandbox (paused) after this long unused, releasing its ownership"`
	SnapshotMaxPerOrg       int           `env:"SNAPSHOT_MAX_PER_ORG" default:"0" check:"min=0,max=100000" doc:"live snapshots kept per organization; at the limit the oldest are evicted (superseded first, then those of paused/stopped sessions); 0 is unlimited"`
	SnapshotRetentionDays   int           `env:"SNAPSHOT_RETENTION_DAYS" default:"14" check:"min=1,max=3650" doc:"days a snapshot is kept at most (a session's auto_delete_days can be shorter)"`
	SnapshotCleanupInterval time.Duration `env:"SNAPSHOT_CLEANUP_INTERVAL" default:"1h" check:"positive" doc:"how often the gateway deletes superseded, expired and orphaned snapshots and retries failed provider deletions"`
	SandboxGitPullOnRestore bool          `env:"SANDBOX_GIT_PULL_ON_RESTORE" default:"true" doc:"when a session resumes from a snapshot (or boots from a configuration's snapshot), fetch each of its repositories inside the sandbox and fast-forward the checked-out branch to its upstream when the tree has no uncommitted changes and the branch has not diverged; a dirty or diverged tree is left alone and the agent is told in front of its next prompt; false never pulls"`
	SandboxGitPullCadence   int           `env:"SANDBOX_GIT_PULL_CADENCE_SECONDS" default:"0" check:"min=0,max=31536000" doc:"least seconds between two git freshness passes of a session (SANDBOX_GIT_PULL_ON_RESTORE); 0 pulls at every restore. The clock only advances when every repository could be fetched, so a failed pass is retried at the next restore"`
	SandboxImageVersion     string        `env:"SANDBOX_IMAGE_VERSION" default:"v1" check:"nonempty" doc:"the sandbox toolchain version (image, pinned OpenCode); part of every configuration snapshot's version key with the sandbox provider and each repo's commit, so bumping it (or upgrading the pinned OpenCode) makes sessions clone fresh instead of restoring snapshots made with the old toolchain"`
	ConfigBuildTimeout      time.Duration `env:"CONFIGURATION_BUILD_TIMEOUT" default:"15m" check:"positive" doc:"how long a configuration rebuild (POST /api/v1/configurations/{id}/rebuild: a headless setup session clones the repos, runs the service commands and is snapshotted) may take; a build still running then (its gateway died, or it hung) is marked failed and the configuration keeps its previous snapshot"`
	ConfigBuildInterval     time.Duration `env:"CONFIGURATION_BUILD_INTERVAL" default:"30s" check:"positive" doc:"how often each gateway fails configuration builds past CONFIGURATION_BUILD_TIMEOUT and claims builds that no gateway took up for this long (the API's request to run them was lost)"`
	MaxConcurrentSessions   int           `env:"MAX_CONCURRENT_SESSIONS" default:"10" check:"min=0,max=10000" doc:"live (starting or running) sessions allowed per organization; 0 is unlimited"`
	AnthropicAPIKey         string        `env:"ANTHROPIC_API_KEY" secret:"true" doc:"model key for the agent; empty runs the agent against the scripted LLM (llm-sim) in development"`
	LLMBaseURL              string        `env:"LLM_BASE_URL" check:"url=http|https" doc:"Anthropic-compatible base URL the agent calls (e.g. a LiteLLM proxy); empty: api.anthropic.com with a key, the in-process scripted LLM without"`
	LLMSimAddr              string        `env:"LLMSIM_ADDR" default:"127.0.0.1:8787" check:"hostport" doc:"listen address of the scripted LLM (proliferate llm-sim): the Anthropic Messages API at /v1/messages"`
	LLMSimAPIKey            string        `env:"LLMSIM_API_KEY" secret:"true" doc:"API key the scripted LLM requires (x-api-key); empty accepts any"`
	LLMSimScriptsDir        string        `env:"LLMSIM_SCRIPTS_DIR" doc:"directory of extra *.json scripts for the scripted LLM"`
	RunFinalizerInterval    time.Duration `env:"RUN_FINALIZER_INTERVAL" default:"1m" check:"positive" doc:"how often the run finalizer looks for runs past their deadline, inactive or stalled"`
	RunInactivityTimeout    time.Duration `env:"RUN_INACTIVITY_TIMEOUT" default:"30m" check:"positive" doc:"a running run with no session activity for this long fails (inactivity_timeout)"`
	BillingEnabled          bool          `env:"BILLING_ENABLED" default:"true" doc:"meter, bill and gate sessions against organization credits; false allows every session and only records usage"`
	MeterInterval           time.Duration `env:"METER_INTERVAL" default:"30s" check:"positive" doc:"how often the compute meter bills running sessions (one meter is active across replicas)"`
	GracePeriod             time.Duration `env:"BILLING_GRACE_PERIOD" default:"5m" check:"positive" doc:"how long an active organization at zero credits keeps running before it is exhausted (at most 1h)"`
	AutumnURL               string        `env:"AUTUMN_URL" default:"https://api.useautumn.com" check:"url=http|https" doc:"Autumn billing API base URL"`
	AutumnSecretKey         string        `env:"AUTUMN_SECRET_KEY" secret:"true" doc:"Autumn secret key; empty keeps billing local (usage is not posted, checkout is unavailable)"`
	BillingOutboxInterval   time.Duration `env:"BILLING_OUTBOX_INTERVAL" default:"1m" check:"positive" doc:"how often pending billing events are posted to Autumn"`
	ReconcileAt             string        `env:"BILLING_RECONCILE_AT" default:"00:00" doc:"UTC time of day (HH:MM) of the nightly reconciliation of shadow balances with Autumn"`
	LLMProxyAddr            string        `env:"LLM_PROXY_ADDR" default:"127.0.0.1:8060" check:"hostport" doc:"listen address of the LLM proxy role (Anthropic Messages API at /v1/messages)"`
	LLMProxyURL             string        `env:"LLM_PROXY_URL" check:"url=http|https" doc:"base URL of the LLM proxy sandboxes call (ours or LiteLLM); set: every session gets its own virtual key"`
	LLMProxyAdminURL        string        `env:"LLM_PROXY_ADMIN_URL" check:"url=http|https" doc:"LiteLLM admin API base URL (key and team management, spend logs); empty uses LLM_PROXY_URL"`
	LLMProxyPublicURL       string        `env:"LLM_PROXY_PUBLIC_URL" check:"url=http|https" doc:"base URL sandboxes use to reach the LLM proxy; empty uses LLM_PROXY_URL"`
	LLMProxyMasterKey       string        `env:"LLM_PROXY_MASTER_KEY" secret:"true" doc:"LiteLLM master key (admin API only; never given to sandboxes)"`
	LLMProxyKind            string        `env:"LLM_PROXY_KIND" default:"builtin" check:"oneof=builtin|litellm" doc:"which proxy LLM_PROXY_URL is: builtin (proliferate llm-proxy) or litellm"`
	LLMProxyKeyDuration     time.Duration `env:"LLM_PROXY_KEY_DURATION" default:"24h" check:"positive" doc:"lifetime of a session's virtual LLM key"`
	LLMProxyRequired        bool          `env:"LLM_PROXY_REQUIRED" doc:"refuse to start sandboxes when no LLM proxy is configured"`
	LLMUpstreamURL          string        `env:"LLM_UPSTREAM_URL" check:"url=http|https" doc:"where the built-in LLM proxy forwards (Anthropic API base); empty: api.anthropic.com with ANTHROPIC_API_KEY, the scripted LLM without"`
	LLMSpendSyncInterval    time.Duration `env:"LLM_SPEND_SYNC_INTERVAL" default:"30s" check:"positive" doc:"how often LiteLLM spend logs are collected into llm.spend (LLM_PROXY_KIND=litellm)"`
	ShutdownTimeout         time.Duration `env:"SHUTDOWN_TIMEOUT" default:"20s" check:"positive" doc:"grace period for in-flight work on SIGINT/SIGTERM"`
}

// Error lists every invalid variable found by Load.
type Error struct {
	Problems []Problem
}

// Problem is one invalid variable.
type Problem struct {
	Var     string
	Value   string // already redacted for secrets
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid configuration:")
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %s=%q: %s", p.Var, p.Value, p.Message)
	}
	return b.String()
}

// Load reads the process environment.
func Load() (*Config, error) { return LoadFrom(os.LookupEnv) }

// LoadFrom reads settings through lookup (tests pass a map).
func LoadFrom(lookup func(string) (string, bool)) (*Config, error) {
	cfg := &Config{}
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	var problems []Problem
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("env")
		raw, ok := lookup(name)
		raw = strings.TrimSpace(raw)
		if !ok || raw == "" {
			raw = f.Tag.Get("default")
		}
		shown := obs.RedactURLSecrets(raw)
		if f.Tag.Get("secret") == "true" {
			shown = redactValue(raw)
		}
		if err := set(v.Field(i), raw); err != nil {
			problems = append(problems, Problem{name, shown, err.Error()})
			continue
		}
		if err := check(v.Field(i), raw, f.Tag.Get("check")); err != nil {
			problems = append(problems, Problem{name, shown, err.Error()})
		}
	}
	problems = append(problems, cfg.crossChecks()...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return cfg, nil
}

// MaxEnvRequestTimeout bounds ENV_REQUEST_TIMEOUT: below the sandbox's
// call timeout of request_env_variables (capabilities.EnvCallTimeoutMS)
// and the tool-call takeover age (sessions.DefaultToolStaleAfter).
const MaxEnvRequestTimeout = 9 * time.Minute

func (c *Config) crossChecks() []Problem {
	var ps []Problem
	if c.ConsumerBackoffMax < c.ConsumerBackoffInitial {
		ps = append(ps, Problem{"CONSUMER_BACKOFF_MAX", c.ConsumerBackoffMax.String(),
			fmt.Sprintf("must be at least CONSUMER_BACKOFF_INITIAL (%s)", c.ConsumerBackoffInitial)})
	}
	if c.Env == "production" {
		ps = append(ps, c.developmentSecrets()...)
	}
	if max := MaxIngestInlineBodyBytes(); c.IngestInlineBodyBytes > max {
		ps = append(ps, Problem{"INGEST_INLINE_BODY_BYTES", strconv.Itoa(c.IngestInlineBodyBytes),
			fmt.Sprintf("must be at most %d: a webhooks.raw record is at most %d bytes and needs %d for the request's headers and metadata",
				max, topics.MaxRecordBytes(topics.WebhooksRaw), IngestRecordHeadroom)})
	}
	if c.Env == "production" && c.SandboxIsolation == "none" {
		ps = append(ps, Problem{"SANDBOX_ISOLATION", c.SandboxIsolation, "must not be none when PROLIFERATE_ENV=production (agents would run unconfined on the host)"})
	}
	if c.EnvRequestTimeout > MaxEnvRequestTimeout {
		ps = append(ps, Problem{"ENV_REQUEST_TIMEOUT", c.EnvRequestTimeout.String(),
			fmt.Sprintf("must be at most %s (the sandbox's tool call gives up after 10 minutes)", MaxEnvRequestTimeout)})
	}
	if c.PreviewPortMax < c.PreviewPortMin {
		ps = append(ps, Problem{"PREVIEW_PORT_MAX", strconv.Itoa(c.PreviewPortMax), fmt.Sprintf("must be at least PREVIEW_PORT_MIN (%d)", c.PreviewPortMin)})
	}
	if c.PreviewShareMaxTTL < c.PreviewShareTTL {
		ps = append(ps, Problem{"PREVIEW_SHARE_MAX_TTL", c.PreviewShareMaxTTL.String(), fmt.Sprintf("must be at least PREVIEW_SHARE_TTL (%s)", c.PreviewShareTTL)})
	}
	if c.SandboxProvider == "e2b" && c.E2BAPIKey == "" {
		ps = append(ps, Problem{"E2B_API_KEY", "", "must be set when SANDBOX_PROVIDER=e2b"})
	}
	if c.Mailer == "smtp" {
		if c.SMTPHost == "" {
			ps = append(ps, Problem{"SMTP_HOST", "", "must be set when MAILER=smtp"})
		}
		if _, err := mail.ParseAddress(c.SMTPFrom); err != nil {
			ps = append(ps, Problem{"SMTP_FROM", c.SMTPFrom, "must be an email address (Name <addr@host> or addr@host) when MAILER=smtp"})
		}
	}
	if c.Env == "production" && c.Mailer == "log" {
		ps = append(ps, Problem{"MAILER", c.Mailer, "must be smtp when PROLIFERATE_ENV=production (the log mailer delivers nothing: verification, invitation and password reset emails would never arrive)"})
	}
	if c.Env == "production" && c.Mailer == "smtp" && c.SMTPTLS == "none" {
		ps = append(ps, Problem{"SMTP_TLS", c.SMTPTLS, "must not be none when PROLIFERATE_ENV=production (emails carry one-time links)"})
	}
	ps = append(ps, c.oauthChecks()...)
	if c.Env == "production" && len(c.KafkaBrokers) == 0 {
		ps = append(ps, Problem{"KAFKA_BROKERS", "", "must be set when PROLIFERATE_ENV=production (the embedded broker is for development)"})
	}
	return ps
}

// oauthChecks: a sign-in provider needs both its client id and secret, and
// in production its endpoints must be https (the client secret, codes and
// tokens travel to them).
func (c *Config) oauthChecks() []Problem {
	var ps []Problem
	for _, p := range []struct {
		idVar, secretVar, id, secret string
		urls                         map[string]string
	}{
		{"GITHUB_OAUTH_CLIENT_ID", "GITHUB_OAUTH_CLIENT_SECRET", c.GitHubOAuthClientID, c.GitHubOAuthClientSecret,
			map[string]string{"GITHUB_URL": c.GitHubURL, "GITHUB_API_URL": c.GitHubAPIURL}},
		{"GOOGLE_OAUTH_CLIENT_ID", "GOOGLE_OAUTH_CLIENT_SECRET", c.GoogleOAuthClientID, c.GoogleOAuthClientSecret,
			map[string]string{"GOOGLE_OIDC_ISSUER": c.GoogleOIDCIssuer}},
	} {
		if p.id == "" && p.secret == "" {
			continue
		}
		if p.id == "" {
			ps = append(ps, Problem{p.idVar, "", "must be set when " + p.secretVar + " is"})
			continue
		}
		if p.secret == "" {
			ps = append(ps, Problem{p.secretVar, "", "must be set when " + p.idVar + " is"})
			continue
		}
		if c.Env != "production" {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(p.urls)) {
			if u := p.urls[name]; !strings.HasPrefix(strings.ToLower(u), "https://") {
				ps = append(ps, Problem{name, obs.RedactURLSecrets(u), "must be https when PROLIFERATE_ENV=production and " + p.idVar + " is set (the client secret, codes and tokens travel there)"})
			}
		}
	}
	return ps
}

// developmentSecrets refuses, in production, every secret setting (tagged
// secret:"true") that holds its default or part of it: a default secret is
// public (it is in this file), so a signing key, encryption key, service
// token or connection URL left at it is a known credential. Every secret
// field with a default is covered, including ones added later. List
// settings are compared item by item, so a rotation list that still carries
// the development key among new ones is refused too.
func (c *Config) developmentSecrets() []Problem {
	var ps []Problem
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		def := f.Tag.Get("default")
		if f.Tag.Get("secret") != "true" || def == "" {
			continue
		}
		defaults := map[string]bool{def: true}
		values := []string{format(v.Field(i))}
		if list, ok := v.Field(i).Interface().([]string); ok {
			defaults = map[string]bool{}
			for _, d := range strings.Split(def, ",") {
				defaults[strings.TrimSpace(d)] = true
			}
			values = list
		}
		for _, val := range values {
			if defaults[val] {
				ps = append(ps, Problem{f.Tag.Get("env"), "REDACTED",
					"must be set in production (the default is a public development value; keep none of it)"})
				break
			}
		}
	}
	return ps
}

// IngestRecordHeadroom is the part of a webhooks.raw record kept for what
// travels beside an inline body: the envelope, routing fields and the
// request headers ingest keeps (at most 16 KiB of them).
const IngestRecordHeadroom = 64 << 10

// MaxIngestInlineBodyBytes is the largest valid INGEST_INLINE_BODY_BYTES:
// webhooks.raw's record limit less IngestRecordHeadroom, so a record with an
// inline body always fits its topic.
func MaxIngestInlineBodyBytes() int {
	return topics.MaxRecordBytes(topics.WebhooksRaw) - IngestRecordHeadroom
}

// Embedded reports whether the roles use the in-process broker.
func (c *Config) Embedded() bool { return len(c.KafkaBrokers) == 0 }

// Setting is one variable as shown by `proliferate config`.
type Setting struct {
	Var, Value, Default, Doc string
	Secret                   bool
}

// Settings lists every variable with its effective value, secrets redacted.
func (c *Config) Settings() []Setting {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	out := make([]Setting, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		s := Setting{Var: f.Tag.Get("env"), Default: f.Tag.Get("default"), Doc: f.Tag.Get("doc"), Secret: f.Tag.Get("secret") == "true"}
		s.Value = format(v.Field(i))
		if s.Secret {
			s.Value = redactValue(s.Value)
			s.Default = redactValue(s.Default)
		} else {
			// A URL-valued setting that is not a secret may still carry a
			// password (https://user:pass@…, ?password=…).
			s.Value = obs.RedactURLSecrets(s.Value)
		}
		out = append(out, s)
	}
	return out
}

// Documented lists every variable of Config with its default and doc, sorted by
// name; used to generate documentation.
func Documented() []Setting {
	t := reflect.TypeFor[Config]()
	out := make([]Setting, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		out = append(out, Setting{Var: f.Tag.Get("env"), Default: f.Tag.Get("default"), Doc: f.Tag.Get("doc"), Secret: f.Tag.Get("secret") == "true"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Var < out[j].Var })
	return out
}

func format(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case []string:
		return strings.Join(x, ",")
	case time.Duration:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

// redactValue hides the secret part of a value: a URL keeps its scheme, host
// and path but loses its password and password-like query parameters;
// anything else is replaced entirely.
func redactValue(s string) string {
	if s == "" {
		return ""
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
		return obs.RedactQuerySecrets(u.String())
	}
	return "REDACTED"
}

func set(f reflect.Value, raw string) error {
	switch f.Interface().(type) {
	case string:
		f.SetString(raw)
	case int:
		if raw == "" {
			return nil
		}
		n, err := strconv.Atoi(raw)
		if err != nil {
			return errors.New("must be an integer")
		}
		f.SetInt(int64(n))
	case bool:
		if raw == "" {
			return nil
		}
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return errors.New("must be true or false")
		}
		f.SetBool(b)
	case time.Duration:
		if raw == "" {
			return nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			return errors.New(`must be a duration such as "500ms", "30s" or "5m"`)
		}
		f.SetInt(int64(d))
	case []string:
		var parts []string
		for p := range strings.SplitSeq(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		f.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported field type %s", f.Type())
	}
	return nil
}

func check(f reflect.Value, raw, spec string) error {
	if spec == "" {
		return nil
	}
	for rule := range strings.SplitSeq(spec, ",") {
		name, arg, _ := strings.Cut(rule, "=")
		if err := checkRule(f, raw, name, arg); err != nil {
			return err
		}
	}
	return nil
}

func checkRule(f reflect.Value, raw, name, arg string) error {
	switch name {
	case "nonempty":
		if raw == "" {
			return errors.New("must not be empty")
		}
	case "oneof":
		allowed := strings.Split(arg, "|")
		for _, a := range allowed {
			if raw == a {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
	case "min", "max":
		limit, _ := strconv.Atoi(arg)
		n := int(f.Int())
		if name == "min" && n < limit {
			return fmt.Errorf("must be at least %d", limit)
		}
		if name == "max" && n > limit {
			return fmt.Errorf("must be at most %d", limit)
		}
	case "positive":
		if f.Int() <= 0 {
			return errors.New("must be greater than zero")
		}
	case "hostport":
		return checkHostPort(raw)
	case "opthostport":
		if raw == "" {
			return nil
		}
		return checkHostPort(raw)
	case "hostports":
		for _, hp := range f.Interface().([]string) {
			if err := checkHostPort(hp); err != nil {
				return fmt.Errorf("%q: %w", hp, err)
			}
		}
	case "egressallow":
		if _, err := egress.ParseAllowlist(f.Interface().([]string)); err != nil {
			return err
		}
	case "url":
		if raw == "" {
			return nil // optional URLs are empty; required ones have defaults
		}
		u, err := url.Parse(raw)
		if err != nil {
			return errors.New("must be a URL")
		}
		schemes := strings.Split(arg, "|")
		ok := false
		for _, s := range schemes {
			ok = ok || u.Scheme == s
		}
		if !ok {
			return fmt.Errorf("must be a URL with scheme %s", strings.Join(schemes, " or "))
		}
		if u.Host == "" {
			return errors.New("must name a host")
		}
	case "min_len":
		n, _ := strconv.Atoi(arg)
		if len(raw) < n {
			return fmt.Errorf("must be at least %d characters", n)
		}
	case "keys":
		return checkKeys(f.Interface().([]string), arg)
	default:
		return fmt.Errorf("unknown check %q (a bug in config.go)", name)
	}
	return nil
}

// checkKeys validates kid:base64 key lists: "32" means at least 32 bytes,
// "32exact" exactly 32. Messages never include key material.
func checkKeys(keys []string, arg string) error {
	exact := strings.HasSuffix(arg, "exact")
	n, _ := strconv.Atoi(strings.TrimSuffix(arg, "exact"))
	if len(keys) == 0 {
		return errors.New("needs at least one kid:base64 key")
	}
	seen := map[string]bool{}
	for i, k := range keys {
		kid, b64, ok := strings.Cut(k, ":")
		if !ok || kid == "" {
			return fmt.Errorf("key %d must be kid:base64", i+1)
		}
		if seen[kid] {
			return fmt.Errorf("key id %q appears twice", kid)
		}
		seen[kid] = true
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return fmt.Errorf("key %q is not valid base64", kid)
		}
		if exact && len(raw) != n {
			return fmt.Errorf("key %q must be exactly %d bytes, is %d", kid, n, len(raw))
		}
		if !exact && len(raw) < n {
			return fmt.Errorf("key %q must be at least %d bytes, is %d", kid, n, len(raw))
		}
	}
	return nil
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New(`must be host:port, for example "127.0.0.1:9092"`)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return errors.New("port must be a number from 0 to 65535")
	}
	return nil
}

// RolePort is the ops port a role subcommand listens on when OPS_ADDR is
// empty.
type RolePort struct {
	Role string
	Port int
}

// OpsPorts lists the default ops port of every role that serves ops
// endpoints: dev keeps 9464, each role subcommand has its own, so roles
// started side by side on one machine with the defaults all serve them.
func OpsPorts() []RolePort {
	return []RolePort{
		{"dev", 9464}, {"api", 9465}, {"ingest", 9466}, {"scheduler", 9467}, {"relay", 9468},
		{"gateway", 9469}, {"finalizer", 9470}, {"worker", 9471}, {"billing-jobs", 9472}, {"llm-proxy", 9473},
	}
}

// OpsAddrFor is where role serves its ops endpoints: OPS_ADDR when set,
// else 127.0.0.1 and the role's port from OpsPorts (any free port for a
// role not listed there).
func (c *Config) OpsAddrFor(role string) string {
	if c.OpsAddr != "" {
		return c.OpsAddr
	}
	for _, rp := range OpsPorts() {
		if rp.Role == role {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(rp.Port))
		}
	}
	return "127.0.0.1:0"
}

// Markdown renders docs/config.md: every variable with its default and doc.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Configuration\n\n<!-- Generated from internal/config/config.go by 'proliferate config --markdown' (make docs). Do not edit. -->\n\n")
	b.WriteString("Every setting is an environment variable. Defaults suit `make run` on one machine; `proliferate config` prints the effective values with secrets redacted. Invalid values stop a role at start with one line per problem.\n\n")
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, s := range Documented() {
		def := s.Default
		if def == "" {
			def = "(empty)"
		}
		doc := s.Doc
		if s.Secret {
			doc += " **Secret:** never logged; redacted by `proliferate config`."
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", s.Var, def, doc)
	}
	b.WriteString("\n## Ops ports\n\nWith `OPS_ADDR` empty each role serves `/healthz`, `/readyz` and `/metrics` on 127.0.0.1 and its own port, so roles started side by side on one machine do not collide; a set `OPS_ADDR` wins (`127.0.0.1:0` picks a free port, e.g. for a second `worker`).\n\n")
	b.WriteString("| role | ops address |\n| --- | --- |\n")
	for _, rp := range OpsPorts() {
		fmt.Fprintf(&b, "| `proliferate %s` | `127.0.0.1:%d` |\n", rp.Role, rp.Port)
	}
	return b.String()
}
