// Package hub owns live sessions inside one gateway instance: a Manager is the
// registry of per-session Hubs; a Hub holds the session's Redis owner lease,
// prepares the runtime (sandbox + OpenCode session) single-flight, bridges the
// OpenCode SSE stream (reconnecting with backoff) into WebSocket protocol
// messages (package gateway/protocol) fanned out to attached clients, and counts telemetry
// that it flushes to the sessions store differentially.
//
// Ownership: only the instance holding lease:owner:{session} (SET NX PX,
// renewed by a Lua check-and-extend every RenewEvery) may attach clients,
// provision the runtime, stream SSE or run tools. If a renewal fails, or the
// time since the last successful renewal exceeds OwnerTTL (the process was
// stalled long enough that another instance may have taken over), the hub
// terminates itself: clients are closed with protocol.CloseOwnershipLost, SSE stops,
// the hub leaves the manager. lease:runtime:{session} (RuntimeTTL) is a
// liveness heartbeat for orphan detection, written only by the owner;
// alive:sandbox:{sandbox} (RuntimeTTL) is renewed by the owner only while
// its provider says the sandbox is alive, so any replica can tell whether
// a session's sandbox lives (leases.go Liveness, used by the compute meter).
//
// Backpressure: each client has a bounded outbound queue (MaxBufferedBytes);
// a client whose queue overflows is disconnected with protocol.CloseSlowClient rather
// than slowing the session down. Text deltas are coalesced per part and sent
// as one token message per TokenBatch interval.
//
// Billing (billing.go): a boot that resumes a paused session, or boots a
// CLI session, passes the billing gate first (Deps.Gate, fail closed); a
// boot issues the sandbox its own virtual LLM key (Deps.LLMKeys), and every
// path that pauses or stops the session or terminates its sandbox revokes
// the session's keys.
package hub

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/transcript"
)

// Errors.
var (
	// ErrNotOwner: another gateway instance holds the session's owner lease.
	ErrNotOwner = errors.New("hub: session is owned by another gateway instance")
	// ErrForbidden: the principal may not mutate the session.
	ErrForbidden = errors.New("hub: not allowed to act on this session")
	// ErrClosed: the hub was terminated (lease lost, session ended, shutdown).
	ErrClosed = errors.New("hub: hub closed")
	// ErrSessionEnded: the session is stopped or failed; it cannot run again.
	ErrSessionEnded = errors.New("hub: session has ended")
	// ErrEmptyPrompt: a prompt without text.
	ErrEmptyPrompt = errors.New("hub: empty prompt")
	// ErrSessionPaused: an automatic reconnect found the session paused
	// (an idle snapshot got there first) and did not resume it.
	ErrSessionPaused = errors.New("hub: session is paused")
	// ErrSnapshotLost: the session's snapshot could not be restored; its
	// reference was cleared and the next start is fresh.
	ErrSnapshotLost = errors.New("hub: snapshot could not be restored; the next start is fresh")
)

// CodeSnapshotLost is the error code clients get when a resume found the
// snapshot unrestorable (their conversation was reset).
const CodeSnapshotLost = "snapshot_lost"

// RepoResolver returns the repositories to clone into a session's sandbox
// (from its configuration; none for scratch sessions).
type RepoResolver interface {
	ResolveRepos(ctx context.Context, s sessions.Session) ([]sandbox.Repo, error)
}

// RepoResolverFunc adapts a function to RepoResolver.
type RepoResolverFunc func(ctx context.Context, s sessions.Session) ([]sandbox.Repo, error)

// ResolveRepos calls f.
func (f RepoResolverFunc) ResolveRepos(ctx context.Context, s sessions.Session) ([]sandbox.Repo, error) {
	return f(ctx, s)
}

// Deps configures a Manager. Zero durations take the defaults in brackets.
type Deps struct {
	Sessions   *sessions.Store
	Provider   sandbox.Provider
	Redis      *redis.Client
	InstanceID string // unique per gateway process; the owner lease value
	Log        *slog.Logger

	// GatewayURL is the base URL sandboxes call back (tool routes).
	GatewayURL string
	// LLM is written into the sandbox's opencode.json.
	LLM sandbox.LLM
	// Repos resolves a session's repositories; nil = none.
	Repos RepoResolver
	// SystemPrompt returns the system prompt of a session: its custom
	// system_prompt, if any, resolved with the mode-critical instructions
	// and naming its repositories, configuration and automation
	// (prompts.Resolve); nil = the session's system_prompt as is.
	SystemPrompt func(ctx context.Context, s sessions.Session) (string, error)
	// GitFreshness fetches and fast-forwards the repositories of a
	// restored sandbox (freshness.go); zero = off.
	GitFreshness GitFreshness
	// Services gives the session's service commands, started after each
	// boot that did not find the sandbox running (services.go); nil = none.
	Services ServiceSource
	// Prebuilt picks a configuration's snapshot for a session that has
	// none of its own, when made for the current repo revisions and
	// toolchain; nil = always clone.
	Prebuilt *prebuilds.Resolver

	OwnerTTL   time.Duration // [30s] owner lease TTL; also the lag-guard limit
	RenewEvery time.Duration // [10s] owner + runtime lease renewal period
	RuntimeTTL time.Duration // [20s] runtime lease TTL
	TokenBatch time.Duration // [50ms] token coalescing window; negative = no batching
	// MaxBufferedBytes bounds one client's outbound queue [1 MiB].
	MaxBufferedBytes int
	// TelemetryEvery is the periodic telemetry flush period [30s].
	TelemetryEvery time.Duration
	// SSEHeartbeatTimeout: an SSE stream silent this long is reconnected [30s].
	SSEHeartbeatTimeout time.Duration
	// ReconnectDelays is the SSE reconnect backoff schedule; the last entry
	// repeats [250ms, 500ms, 1s, 2s, 5s].
	ReconnectDelays []time.Duration
	// IdleTTL evicts a hub without a runtime (its session paused or never
	// started here) that nobody used for this long, releasing its owner
	// lease [10m]. Hubs with a runtime are never evicted: the idle snapshot
	// stops their sandbox first, and the hub stays through the resume
	// handoff (idle-snapshotting.md, constraint 1).
	IdleTTL time.Duration
	// IdleCheckEvery is the period of the idle-snapshot checks [30s].
	IdleCheckEvery time.Duration
	// IdleGrace is how long a web/api/cli session with no clients, proxy
	// connections or agent work must stay inactive before its sandbox is
	// snapshotted and stopped [5m, IDLE_SNAPSHOT_DELAY_SECONDS].
	IdleGrace time.Duration
	// HeadlessIdleGrace is that grace for automation and Slack sessions [30s].
	HeadlessIdleGrace time.Duration
	// MigrationLockTTL bounds the per-session migration lock [300s];
	// SnapshotTimeout bounds one snapshot [120s] and must stay well below it.
	MigrationLockTTL time.Duration
	SnapshotTimeout  time.Duration
	// MaxSnapshotFailures consecutive failed idle snapshots stop the
	// session with outcome failed (circuit breaker) [3].
	MaxSnapshotFailures int
	// ExpiryLead: a sandbox expiring within this is migrated (active
	// session) or paused (idle) [5m]; ExpiryWait bounds the wait for the
	// agent's turn before a migration [30s]; ExpiryScanEvery is the period
	// of the expiry scan [30s].
	ExpiryLead      time.Duration
	ExpiryWait      time.Duration
	ExpiryScanEvery time.Duration
	// MaxHubs is a hard cap: creating a hub beyond it evicts the least
	// recently used idle hub [10000].
	MaxHubs int
	// Now is the clock [time.Now].
	Now func() time.Time
	// Git configures git operations (git.go).
	Git GitDeps
	// Snapshots keeps the books of snapshots; nil = none.
	Snapshots SnapshotBook
	// Gate is the billing gate of resumes and CLI connects
	// (billing.Gate.Allow): a boot of a paused session is checked as
	// session_resume, any boot of a CLI session as cli_connect. A refusal
	// (a *billing.Denial) fails the boot, clients get an error frame with
	// the denial's code and the HTTP routes answer 402. nil = no gate.
	Gate func(ctx context.Context, orgID string, op billing.Operation) error
	// Env resolves the session's variables and env files at every boot
	// and stores the values people submit for request_env_variables
	// (env.go); nil = the sandbox gets none and submissions cannot be
	// saved as secrets.
	Env EnvSource
	// EnvRequestTimeout is how long request_env_variables waits for a
	// member's submission [5m, ENV_REQUEST_TIMEOUT].
	EnvRequestTimeout time.Duration
	// LLMKeys issues every sandbox boot its own virtual LLM key (the
	// sandbox's LLM then is the proxy at the key's base URL with LLM.Model)
	// and revokes the session's keys whenever the hub pauses or stops the
	// session or terminates its sandbox. nil = the sandbox gets LLM as is.
	LLMKeys llmkeys.Issuer
	// Previews announce the ports that start listening in the sandbox
	// (preview_url frames, preview.go); URL nil = no announcements.
	Previews PreviewDeps
	// Transcript publishes the sessions' conversations to
	// sessions.transcript (transcript.go); nil = not published.
	Transcript *transcript.Publisher
	// History reads the materialized history (session_messages) that init
	// and get_messages serve when no agent runs; nil = none.
	History transcript.DB
}

// Client is one attached WebSocket connection (or any frame sink). Send
// must not block: it enqueues and returns an error when the client cannot
// keep up (the hub then closes it with protocol.CloseSlowClient). Close must not
// block either (the hub may call it while streaming). NewSocketClient
// builds one with a bounded queue (Deps.MaxBufferedBytes) over any frame
// writer; the WebSocket handler should use it.
type Client interface {
	Send(msg []byte) error
	Close(code int, reason string)
}
