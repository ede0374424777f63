// Package builds runs configuration rebuilds in the gateway: a build recorded by the API
// (POST /configurations/{id}/rebuild, internal/prebuilds.Builds) becomes a
// headless setup session of the configuration whose sandbox is a fresh
// clone of the repos at their current revisions; the configuration's
// service commands run under the sandbox's supervisor (the hub's boot
// auto-start); once they started (each one exited 0 or still runs when the
// hub's auto-start watch ends) the sandbox is snapshotted and the snapshot
// becomes the configuration's ready snapshot with the version key of the
// repos now, exactly like finalizing a setup session. The session is then
// stopped. A service that exits non-zero, a boot or snapshot error, or the
// deadline fails the build with the error; the configuration keeps its
// previous snapshot.
//
// Delivery: the API asks a gateway to run a build over the gateway's HTTP
// API (POST /proliferate/configuration-builds/{id}, service credential),
// the way it asks for starts, pauses and snapshots. Runs are at least once
// and never twice: the gateway claims the build row with a compare-and-set
// before doing anything (a duplicate request does nothing); each gateway's
// periodic pass (Run) claims builds whose request was lost, and fails
// builds past their deadline (the gateway running them died), so none
// stays building forever.
package builds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/sessions"
)

// StopReason is the stop reason of a build's setup session.
const StopReason = "configuration_build"

// Deps configure a Builder. Zero durations take the defaults in brackets.
type Deps struct {
	Builds   *prebuilds.Builds
	Sessions *sessions.Store
	Hubs     *hub.Manager
	// Services gives the configuration's service commands (the hub's).
	Services hub.ServiceSource
	// Prebuilt computes the version key of the session's repos.
	Prebuilt *prebuilds.Resolver
	// Redactors redact the organization's secret values (and token
	// formats) from a failed service's log tail before it is stored in the
	// build's error; nil or an error: the tail is left out.
	Redactors Redactors
	// InstanceID names this gateway in claimed_by.
	InstanceID string
	Log        *slog.Logger
	// Every is the period of Run's passes [30s]; a build nobody claimed
	// for that long is claimed by the pass.
	Every time.Duration
}

// Redactors gives an organization's redactor (redaction.Cache).
type Redactors interface {
	Redactor(ctx context.Context, orgID string) (*actions.Redactor, error)
}

// Builder runs configuration builds.
type Builder struct {
	d    Deps
	log  *slog.Logger
	life context.Context
	stop context.CancelFunc
	// mu orders starting a build's goroutine before Close's wait.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// New returns a Builder; Close waits for its builds.
func New(d Deps) *Builder {
	if d.Every <= 0 {
		d.Every = 30 * time.Second
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	life, stop := context.WithCancel(context.Background())
	return &Builder{d: d, log: d.Log, life: life, stop: stop}
}

// Close cancels the builds in progress (their sessions are stopped) and
// waits for them; unfinished ones fail at their deadline.
func (b *Builder) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.stop()
	b.wg.Wait()
}

// Dispatch claims build id and runs it in the background: false when it
// was claimed already or has ended (a duplicate request).
func (b *Builder) Dispatch(ctx context.Context, id string) (bool, error) {
	if b.life.Err() != nil {
		return false, errors.New("builds: the gateway is shutting down")
	}
	ok, err := b.d.Builds.Claim(ctx, id, b.d.InstanceID)
	if err != nil || !ok {
		return false, err
	}
	build, err := b.d.Builds.Get(ctx, "", id)
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		// Claimed but not run.
		_, _ = b.d.Builds.Fail(context.WithoutCancel(ctx), id, "the gateway shut down before the build started")
		return false, errors.New("builds: the gateway is shutting down")
	}
	b.wg.Go(func() { b.run(build) })
	return true, nil
}

// Run passes every Deps.Every until ctx ends: builds past their deadline
// fail, builds nobody claimed are claimed and run here.
func (b *Builder) Run(ctx context.Context) error {
	t := time.NewTicker(b.d.Every)
	defer t.Stop()
	for {
		b.Pass(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Pass is one pass of Run.
func (b *Builder) Pass(ctx context.Context) {
	expired, err := b.d.Builds.Expire(ctx)
	if err != nil {
		b.log.Warn("builds: expire", "err", err)
	}
	for _, x := range expired {
		b.log.Warn("configuration build failed at its deadline", "build_id", x.ID, "configuration_id", x.ConfigurationID)
	}
	ids, err := b.d.Builds.Unclaimed(ctx, b.d.Every)
	if err != nil {
		b.log.Warn("builds: unclaimed", "err", err)
		return
	}
	for _, id := range ids {
		if ok, err := b.Dispatch(ctx, id); err != nil {
			b.log.Warn("builds: claim", "build_id", id, "err", err)
		} else if ok {
			b.log.Info("configuration build claimed by the periodic pass (its request was lost)", "build_id", id)
		}
	}
}

// run builds and records the outcome.
func (b *Builder) run(build prebuilds.Build) {
	log := b.log.With("build_id", build.ID, "configuration_id", build.ConfigurationID)
	ctx, cancel := context.WithDeadline(b.life, build.DeadlineAt)
	defer cancel()
	start := time.Now()
	log.Info("configuration build started")
	snap, key, provider, err := b.build(ctx, build, log)
	// Recording outlives the build's deadline by a little.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	if err == nil {
		if _, err = b.d.Builds.Finish(rctx, build.ID, snap, provider, key); err == nil {
			log.Info("configuration build ready", "snapshot_id", snap, "ms", time.Since(start).Milliseconds())
			return
		}
		if errors.Is(err, prebuilds.ErrBuildEnded) {
			log.Warn("configuration build ended meanwhile (deadline); its snapshot is not used", "snapshot_id", snap)
			return
		}
	}
	switch {
	case b.life.Err() != nil:
		err = fmt.Errorf("the gateway shut down during the build: %w", err)
	case ctx.Err() != nil:
		err = fmt.Errorf("%s: %w", prebuilds.ExpiredError, err)
	}
	if _, ferr := b.d.Builds.Fail(rctx, build.ID, err.Error()); ferr != nil && !errors.Is(ferr, prebuilds.ErrBuildEnded) {
		log.Error("configuration build: record failure", "err", ferr)
	}
	log.Warn("configuration build failed", "err", err, "ms", time.Since(start).Milliseconds())
}

// build runs the setup session and returns its snapshot, the version key
// and the provider.
func (b *Builder) build(ctx context.Context, build prebuilds.Build, log *slog.Logger) (snap, key, provider string, err error) {
	cfg := build.ConfigurationID
	idem := "configuration-build:" + build.ID
	sess, _, err := b.d.Sessions.Create(ctx, sessions.CreateInput{OrgID: build.OrgID, CreatedBy: build.RequestedBy,
		ConfigurationID: &cfg, SessionType: sessions.TypeSetup, ClientType: sessions.ClientAPI,
		SandboxMode: sessions.ModeImmediate, Title: "Configuration build", IdempotencyKey: &idem})
	if err != nil {
		return "", "", "", fmt.Errorf("create the build's setup session: %w", err)
	}
	log = log.With("session_id", sess.ID)
	// Recorded before the boot: the boot then clones fresh (Resolver).
	err = b.d.Builds.SetSession(ctx, build.ID, sess.ID)
	var h *hub.Hub
	if err == nil {
		if h, err = b.d.Hubs.Hub(ctx, sess.ID); err != nil {
			err = fmt.Errorf("session hub: %w", err)
		}
	}
	if err != nil {
		// Never booted: only the row changes (it no longer counts as live).
		if _, serr := b.d.Sessions.MarkStopped(context.WithoutCancel(ctx), sess.ID, StopReason, "failed", ""); serr != nil {
			log.Warn("configuration build: stop the setup session", "err", serr)
		}
		return "", "", "", err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		outcome, summary := "succeeded", "configuration build "+build.ID
		if err != nil {
			outcome = "failed"
		}
		if terr := h.Terminate(tctx, StopReason, outcome, summary); terr != nil {
			log.Warn("configuration build: stop the setup session", "err", terr)
		}
	}()
	w := &watcher{wake: make(chan struct{}, 1)}
	detach, err := h.Attach(ctx, w, &auth.Principal{Kind: auth.KindService, Service: "configuration-builder", OrgID: build.OrgID})
	if err != nil {
		return "", "", "", fmt.Errorf("attach to the setup session: %w", err)
	}
	defer detach()
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return "", "", "", fmt.Errorf("boot the setup session: %w", err)
	}
	sess = h.Session()
	cmds, err := b.d.Services.ServiceCommands(ctx, sess)
	if err != nil {
		return "", "", "", fmt.Errorf("service commands: %w", err)
	}
	if len(cmds) > 0 {
		if err := w.waitServices(ctx, b.redactor(ctx, build.OrgID)); err != nil {
			return "", "", "", err
		}
	}
	if snap, err = h.SaveSnapshot(ctx); err != nil {
		return "", "", "", fmt.Errorf("snapshot: %w", err)
	}
	sess = h.Session()
	repos, err := b.d.Prebuilt.Repos(ctx, sess)
	if err != nil {
		return "", "", "", fmt.Errorf("repos: %w", err)
	}
	if key, err = b.d.Prebuilt.Key(ctx, repos); err != nil {
		return "", "", "", fmt.Errorf("version key: %w", err)
	}
	return snap, key, sess.SandboxProvider, nil
}

// redactor is the organization's redactor, nil when unknown.
func (b *Builder) redactor(ctx context.Context, orgID string) *actions.Redactor {
	if b.d.Redactors == nil {
		return nil
	}
	red, err := b.d.Redactors.Redactor(ctx, orgID)
	if err != nil {
		b.log.Warn("builds: redactor", "org_id", orgID, "err", err)
		return nil
	}
	return red
}

// watcher is the build's client of the session hub: it keeps the latest
// auto_start_output frame.
type watcher struct {
	mu     sync.Mutex
	last   *protocol.AutoStartOutputMessage
	closed string
	wake   chan struct{}
}

// Send implements hub.Client.
func (w *watcher) Send(msg []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(msg, &head) != nil || head.Type != protocol.MsgAutoStartOutput {
		return nil
	}
	var m protocol.AutoStartOutputMessage
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil
	}
	w.mu.Lock()
	w.last = &m
	w.mu.Unlock()
	w.signal()
	return nil
}

// Close implements hub.Client.
func (w *watcher) Close(_ int, reason string) {
	w.mu.Lock()
	w.closed = reason
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// waitServices waits until the boot's auto-start reports every service
// started: nil once its watch ended with no service failed, the failure
// (with the service's exit code and log tail) as soon as one failed.
// A failed service's log tail is quoted redacted, or left out without red.
func (w *watcher) waitServices(ctx context.Context, red *actions.Redactor) error {
	for {
		w.mu.Lock()
		m, closed := w.last, w.closed
		w.mu.Unlock()
		if m != nil {
			if err := failedService(*m, red); err != nil {
				return err
			}
			if m.Error != "" && m.Done {
				return errors.New("service commands: " + m.Error)
			}
			if m.Done {
				return nil
			}
		}
		if closed != "" {
			return errors.New("the setup session closed: " + closed)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the service commands: %w", ctx.Err())
		case <-w.wake:
		}
	}
}

// tailBytes bounds the log tail quoted in a build's error.
const tailBytes = 1000

func failedService(m protocol.AutoStartOutputMessage, red *actions.Redactor) error {
	for _, s := range m.Services {
		if s.Status != "failed" {
			continue
		}
		code := "?"
		if s.ExitCode != nil {
			code = fmt.Sprint(*s.ExitCode)
		}
		if red == nil {
			return fmt.Errorf("service command %q exited with code %s", s.Name, code)
		}
		tail := strings.TrimSpace(s.Output)
		if len(tail) > tailBytes {
			tail = "…" + strings.ToValidUTF8(tail[len(tail)-tailBytes:], "")
		}
		return fmt.Errorf("service command %q exited with code %s: %s", s.Name, code, red.String(tail))
	}
	return nil
}
