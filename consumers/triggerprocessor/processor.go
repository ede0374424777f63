// Package triggerprocessor is the trigger-processor consumer group: it turns
// each raw webhook (webhook.received on webhooks.raw) into trigger events and
// queued automation runs.
//
// For one record it finds the candidate triggers (the custom webhook's own
// trigger; the webhook triggers of the GitHub App installation's, the Nango
// connection's or the direct webhook's integration; else of the org and
// provider), parses the payload once with internal/triggers/providers and
// then, per event and trigger, runs ONE transaction through internal/runs:
// disabled trigger or automation → skipped (trigger_disabled,
// automation_disabled); filters not matching → skipped (filter_mismatch,
// with the reason in the event context); matching → a queued run (trigger
// event, run, run log, runs.lifecycle and triggers.events through the
// outbox). A payload that cannot be parsed is recorded as a failed event for
// each candidate and the record is done: parsing again cannot succeed. Only
// infrastructure errors are returned, so the runner retries them; each
// event's dedup key makes a replay change nothing.
//
// An automation's LLM filter prompt is asked (through Deps.LLM, an
// internal/triggers/llmgate.Gate) once the structural filters match, before
// a run is queued: "no" → skipped (llm_filter_rejected, with the model's
// reason); no usable answer (timeout, error, a malformed answer) → skipped
// (llm_filter_failed) unless the gate fails open. Its analysis prompt is
// asked for events that will queue a run, and the enricher copies the answer
// into the run's enrichment. Each answer is kept in trigger_llm_results per
// (trigger, dedup key), with its llm.spend event in the same transaction,
// and the model is not asked again for an event already recorded: a
// redelivery neither asks nor bills twice.
//
// GitHub App installation events (deleted, suspend, unsuspend) and Nango
// auth events change the integration's status instead of starting runs;
// installation_repositories events import the repositories added to the
// installation and unbind (is_orphaned when left unconnected) the removed
// ones (installationrepos.go).
//
// What the processor reads from a webhook.received record to route it, in
// order:
//
//   - Route "trigger", TriggerID or WebhookPath: that one webhook trigger,
//     whose provider says how the body is parsed (unknown providers: custom);
//   - IntegrationID: the webhook triggers of that integration for the
//     payload's provider (direct provider webhooks whose secret ingest
//     resolved from the integration);
//   - Route "nango": the body is Nango's envelope; the triggers of the
//     integrations holding ConnectionID (or the envelope's connectionId) for
//     the forwarded provider;
//   - Provider "github": the triggers of the integration of the payload's
//     installation.id (the GitHub App route);
//   - otherwise the envelope's OrgID: the org's webhook triggers of Provider.
//
// A non-empty envelope OrgID always restricts candidates to that org.
// Headers are lower-case; GitHub's event type comes from x-github-event, or
// ProviderEventType, or the payload's shape.
//
// A record whose body travelled by reference (body_ref, for bodies over
// ingest's INGEST_INLINE_BODY_BYTES) is parsed with the body fetched from
// the blob store, after checking its size and SHA-256 against the
// reference. A blob that is missing, or is not the body the reference
// describes, can never be fetched right: the record is dead-lettered at once
// (consumers.Permanent). A store that cannot answer is an infrastructure
// error, retried like a database outage.
package triggerprocessor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/llmgate"
	"github.com/proliferate/proliferate/internal/triggers/providers"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
)

// IntegrationStatus applies integration lifecycle changes;
// *integrations.Service implements it.
type IntegrationStatus interface {
	SetStatusByInstallation(ctx context.Context, installationID int64, to integrations.Status, reason string) (int, error)
	SetStatus(ctx context.Context, orgID, id string, to integrations.Status, reason string) error
}

// Deps are what the handler needs.
type Deps struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	Log   *slog.Logger
	// Blobs holds the bodies that travelled by reference. Without it such
	// records go to the dead-letter topic.
	Blobs blobstore.Store
	// Integrations applies installation and auth lifecycle webhooks. Without
	// it such records go to the dead-letter topic rather than being dropped.
	Integrations IntegrationStatus
	// LLM asks the model about events of automations with an LLM filter
	// or analysis prompt (nil: those prompts are not asked).
	LLM *llmgate.Gate
}

// Handler returns the trigger-processor handler for webhook.received records
// (run it with a consumers.Runner whose Codec decodes them).
func Handler(d Deps) consumers.Handler {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	p := &processor{d: d}
	return p.handle
}

type processor struct{ d Deps }

// candidate is a trigger an inbound webhook may concern.
type candidate struct {
	id, orgID, automationID, integrationID string
	// provider the trigger's config is matched as.
	provider          string
	config            map[string]any
	enabled           bool
	automationEnabled bool
	// The automation's LLM prompts ("" when unset).
	filterPrompt, analysisPrompt string
}

func (p *processor) handle(ctx context.Context, m *consumers.Message) error {
	if m.Event == nil {
		return consumers.Permanent(errors.New("trigger-processor: record was not decoded"))
	}
	wr, ok := m.Event.Payload.(*schemas.WebhookReceived)
	if !ok {
		return consumers.Permanent(fmt.Errorf("trigger-processor: unexpected %s event", m.Event.EventType))
	}
	log := p.d.Log.With("webhook_event_id", m.Event.EventID, "provider", wr.Provider, "route", wr.Route)
	if wr.BodyRef != nil {
		body, err := p.fetchBody(ctx, wr.BodyRef)
		if err != nil {
			if consumers.IsPermanent(err) {
				log.Warn("webhook body by reference unusable", "ref", wr.BodyRef.Ref, "error", err)
			}
			return err
		}
		cp := *wr
		cp.Body, cp.BodyRef = body, nil
		wr = &cp
	}
	w := webhookOf(wr)

	if done, err := p.installationRepos(ctx, log, w); done {
		return err
	}
	lc, err := providers.LifecycleOf(w)
	if err != nil {
		log.Warn("unparseable lifecycle webhook dropped", "error", err)
		return nil
	}
	if lc != nil {
		return p.applyLifecycle(ctx, log, lc)
	}

	cands, parseAs, err := p.candidates(ctx, m.Event.OrgID, wr, w)
	if err != nil {
		return fmt.Errorf("find triggers for webhook %s: %w", m.Event.EventID, err)
	}
	if len(cands) == 0 {
		log.Debug("webhook concerns no trigger")
		return nil
	}
	w.Provider = parseAs
	evs, perr := providers.Parse(w)
	if perr != nil {
		ev := runs.Event{
			Provider: first(providers.RoutingOf(w).Provider, w.Provider), EventType: "parse_failed",
			ProviderEventType: deref(wr.ProviderEventType), OccurredAt: wr.ReceivedAt,
			DedupKey: "failed:" + providers.FallbackDedupKey(w), Title: "Unparseable " + w.Provider + " webhook",
			Context: map[string]any{},
		}
		log.Warn("webhook payload could not be parsed", "error", perr, "triggers", len(cands))
		for _, c := range cands {
			err := p.inTx(ctx, func(tx pgx.Tx) (runs.Outcome, error) {
				return runs.RecordFailed(ctx, tx, p.d.Codec, c.source(m.Event.EventID), ev, perr)
			})
			if err != nil {
				return fmt.Errorf("record failed event for trigger %s: %w", c.id, err)
			}
		}
		return nil
	}
	for _, ev := range evs {
		for _, c := range cands {
			if err := p.apply(ctx, log, c, ev, m.Event.EventID); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetchBody returns the body a reference names, checked against its size
// and SHA-256. Missing or different blobs, and references this store cannot
// read, are permanent errors; the store's failures are not.
func (p *processor) fetchBody(ctx context.Context, ref *schemas.WebhookBodyRef) ([]byte, error) {
	if p.d.Blobs == nil {
		return nil, consumers.Permanent(errors.New("trigger-processor: webhook body by reference, but no blob store"))
	}
	body, err := p.d.Blobs.Get(ctx, ref.Ref)
	switch {
	case errors.Is(err, blobstore.ErrNotFound), errors.Is(err, blobstore.ErrInvalidKey):
		return nil, consumers.Permanent(fmt.Errorf("webhook body %s: %w", ref.Ref, err))
	case err != nil:
		return nil, fmt.Errorf("fetch webhook body %s: %w", ref.Ref, err)
	}
	if int64(len(body)) != ref.Size {
		return nil, consumers.Permanent(fmt.Errorf("webhook body %s is %d bytes, the reference says %d", ref.Ref, len(body), ref.Size))
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, ref.SHA256) {
		return nil, consumers.Permanent(fmt.Errorf("webhook body %s has SHA-256 %s, the reference says %s", ref.Ref, got, ref.SHA256))
	}
	return body, nil
}

// webhookOf is the provider-facing view of the record. Nango-routed records
// carry Nango's envelope whatever provider ingest named.
func webhookOf(wr *schemas.WebhookReceived) providers.Webhook {
	w := providers.Webhook{Provider: wr.Provider, Headers: wr.Headers, Body: wr.Body, ReceivedAt: wr.ReceivedAt, DeliveryID: deref(wr.DeliveryID)}
	if wr.Route == schemas.WebhookRouteNango {
		w.Provider = providers.Nango
	}
	// Ingest may keep the event type in the record rather than the headers.
	if w.Provider == providers.GitHub && w.Headers["x-github-event"] == "" && deref(wr.ProviderEventType) != "" {
		w.Headers = maps.Clone(w.Headers)
		if w.Headers == nil {
			w.Headers = map[string]string{}
		}
		w.Headers["x-github-event"] = *wr.ProviderEventType
	}
	return w
}

// apply records one event for one trigger in one transaction.
func (p *processor) apply(ctx context.Context, log *slog.Logger, c candidate, ev runs.Event, webhookEventID string) error {
	// The model is asked outside the transaction (it may take seconds).
	var llmSkip *llmgate.Skip
	if c.enabled && c.automationEnabled {
		if ok, _ := providers.Matches(c.provider, c.config, ev); ok {
			var err error
			llmSkip, err = p.d.LLM.Ask(ctx, llmgate.Trigger{ID: c.id, OrgID: c.orgID, FilterPrompt: c.filterPrompt, AnalysisPrompt: c.analysisPrompt}, ev)
			if err != nil {
				return fmt.Errorf("ask the model about %s event %s for trigger %s: %w", ev.Provider, ev.DedupKey, c.id, err)
			}
		}
	}
	var what string
	err := p.inTx(ctx, func(tx pgx.Tx) (out runs.Outcome, err error) {
		src := c.source(webhookEventID)
		switch {
		case !c.enabled:
			what = runs.SkipTriggerDisabled
			return runs.RecordSkipped(ctx, tx, p.d.Codec, src, ev, runs.SkipTriggerDisabled)
		case !c.automationEnabled:
			what = runs.SkipAutomationDisabled
			return runs.RecordSkipped(ctx, tx, p.d.Codec, src, ev, runs.SkipAutomationDisabled)
		}
		if ok, reason := providers.Matches(c.provider, c.config, ev); !ok {
			what = runs.SkipFilterMismatch
			skipped := ev
			skipped.Context = maps.Clone(ev.Context)
			if skipped.Context == nil {
				skipped.Context = map[string]any{}
			}
			skipped.Context["skip_detail"] = reason
			return runs.RecordSkipped(ctx, tx, p.d.Codec, src, skipped, runs.SkipFilterMismatch)
		}
		if llmSkip != nil {
			what = llmSkip.Reason
			return runs.RecordSkipped(ctx, tx, p.d.Codec, src, llmSkip.Apply(ev), what)
		}
		what = "queued"
		return runs.Enqueue(ctx, tx, p.d.Codec, src, ev)
	})
	if err != nil {
		return fmt.Errorf("record %s event %s for trigger %s: %w", ev.Provider, ev.DedupKey, c.id, err)
	}
	log.Debug("trigger event recorded", "trigger_id", c.id, "org_id", c.orgID, "outcome", what)
	return nil
}

func (p *processor) inTx(ctx context.Context, f func(pgx.Tx) (runs.Outcome, error)) error {
	return pgx.BeginFunc(ctx, p.d.Pool, func(tx pgx.Tx) error {
		_, err := f(tx)
		return err
	})
}

func (c candidate) source(webhookEventID string) runs.Source {
	return runs.Source{OrgID: c.orgID, TriggerID: c.id, AutomationID: c.automationID, TriggerType: "webhook",
		IntegrationID: c.integrationID, WebhookEventID: webhookEventID}
}

// parseable are the providers whose payloads the processor parses.
var parseable = map[string]bool{providers.GitHub: true, providers.Linear: true, providers.Sentry: true, providers.PostHog: true, providers.Custom: true}

// candidates finds the triggers a webhook concerns, and the provider its
// payload is parsed as.
func (p *processor) candidates(ctx context.Context, orgID string, wr *schemas.WebhookReceived, w providers.Webhook) ([]candidate, string, error) {
	if uuid.Validate(orgID) != nil {
		orgID = "" // not attributed (or garbage): no restriction
	}
	route := providers.RoutingOf(w)
	switch {
	case wr.Route == schemas.WebhookRouteTrigger || deref(wr.TriggerID) != "" || deref(wr.WebhookPath) != "":
		// A custom webhook URL belongs to one trigger, which says how its
		// payloads are parsed.
		var cands []candidate
		var err error
		if id := deref(wr.TriggerID); id != "" {
			if uuid.Validate(id) != nil {
				return nil, "", nil
			}
			cands, err = candidatesOf(p.q().WebhookCandidatesByID(ctx, triggersdb.WebhookCandidatesByIDParams{OrgID: orgID, ID: id}))
		} else {
			cands, err = candidatesOf(p.q().WebhookCandidatesByPath(ctx, triggersdb.WebhookCandidatesByPathParams{OrgID: orgID,
				WebhookPath: deref(wr.WebhookPath)}))
		}
		if err != nil || len(cands) == 0 {
			return nil, "", err
		}
		as := cands[0].provider
		if !parseable[as] {
			as = providers.Custom
			cands[0].provider = as
		}
		return cands, as, nil
	case deref(wr.IntegrationID) != "":
		id := deref(wr.IntegrationID)
		if uuid.Validate(id) != nil || route.Provider == "" {
			return nil, "", nil
		}
		cands, err := candidatesOf(p.q().WebhookCandidatesByIntegration(ctx, triggersdb.WebhookCandidatesByIntegrationParams{OrgID: orgID,
			IntegrationID: id, Provider: route.Provider}))
		return cands, w.Provider, err
	case w.Provider == providers.Nango:
		conn := first(deref(wr.ConnectionID), route.NangoConnectionID)
		if conn == "" || route.Provider == "" {
			return nil, "", nil
		}
		cands, err := candidatesOf(p.q().WebhookCandidatesByNangoConnection(ctx, triggersdb.WebhookCandidatesByNangoConnectionParams{
			OrgID: orgID, ConnectionID: conn, ProviderConfigKey: route.NangoProviderConfigKey, Provider: route.Provider}))
		return cands, w.Provider, err
	case w.Provider == providers.GitHub && route.GitHubInstallationID != 0:
		cands, err := candidatesOf(p.q().WebhookCandidatesByGitHubInstallation(ctx, triggersdb.WebhookCandidatesByGitHubInstallationParams{
			OrgID: orgID, InstallationID: route.GitHubInstallationID}))
		return cands, w.Provider, err
	case orgID != "" && parseable[w.Provider]:
		// A direct webhook routed by its org: every webhook trigger of the
		// provider in the org.
		cands, err := candidatesOf(p.q().WebhookCandidatesByProvider(ctx, triggersdb.WebhookCandidatesByProviderParams{OrgID: orgID,
			Provider: w.Provider}))
		return cands, w.Provider, err
	}
	return nil, "", nil
}

func (p *processor) q() *triggersdb.Queries { return triggersdb.New(p.d.Pool) }

// candidateRow is the row every WebhookCandidatesBy* query returns.
type candidateRow interface {
	triggersdb.WebhookCandidatesByIDRow | triggersdb.WebhookCandidatesByPathRow | triggersdb.WebhookCandidatesByIntegrationRow |
		triggersdb.WebhookCandidatesByNangoConnectionRow | triggersdb.WebhookCandidatesByGitHubInstallationRow |
		triggersdb.WebhookCandidatesByProviderRow
}

// candidatesOf converts the rows of a WebhookCandidatesBy* query.
func candidatesOf[R candidateRow](rows []R, err error) ([]candidate, error) {
	if err != nil {
		return nil, err
	}
	out := make([]candidate, len(rows))
	for i, row := range rows {
		r := triggersdb.WebhookCandidatesByIDRow(row)
		c := candidate{id: r.ID, orgID: r.OrgID, automationID: r.AutomationID, integrationID: r.IntegrationID, provider: r.Provider,
			enabled: r.Enabled, automationEnabled: r.AutomationEnabled, filterPrompt: r.LLMFilterPrompt, analysisPrompt: r.LLMAnalysisPrompt}
		if err := json.Unmarshal(r.Config, &c.config); err != nil {
			return nil, fmt.Errorf("config of trigger %s: %w", r.ID, err)
		}
		out[i] = c
	}
	return out, nil
}

// applyLifecycle moves the integrations a lifecycle webhook names to their
// new status. Transitions the lifecycle forbids are logged and dropped.
func (p *processor) applyLifecycle(ctx context.Context, log *slog.Logger, lc *providers.Lifecycle) error {
	if p.d.Integrations == nil {
		return consumers.Permanent(errors.New("trigger-processor: lifecycle webhook but no integrations service"))
	}
	to := integrations.Status(lc.Status)
	if lc.GitHubInstallationID != 0 {
		n, err := p.d.Integrations.SetStatusByInstallation(ctx, lc.GitHubInstallationID, to, lc.Reason)
		if errors.Is(err, integrations.ErrInvalidTransition) {
			log.Warn("installation status change refused", "installation_id", lc.GitHubInstallationID, "status", lc.Status)
			return nil
		}
		if err != nil {
			return fmt.Errorf("set installation %d %s: %w", lc.GitHubInstallationID, lc.Status, err)
		}
		log.Info("installation status changed", "installation_id", lc.GitHubInstallationID, "status", lc.Status, "integrations", n)
		return nil
	}
	refs, err := integrationsdb.New(p.d.Pool).NangoConnectionIntegrations(ctx, integrationsdb.NangoConnectionIntegrationsParams{
		ConnectionID: lc.NangoConnectionID, ProviderConfigKey: lc.NangoProviderConfigKey})
	if err != nil {
		return fmt.Errorf("find connection %s: %w", lc.NangoConnectionID, err)
	}
	for _, r := range refs {
		err := p.d.Integrations.SetStatus(ctx, r.OrgID, r.ID, to, lc.Reason)
		switch {
		case errors.Is(err, integrations.ErrInvalidTransition), errors.Is(err, integrations.ErrNotFound):
			log.Warn("connection status change refused", "integration_id", r.ID, "org_id", r.OrgID, "status", lc.Status, "error", err)
		case err != nil:
			return fmt.Errorf("set integration %s %s: %w", r.ID, lc.Status, err)
		default:
			log.Info("connection status changed", "integration_id", r.ID, "org_id", r.OrgID, "status", lc.Status)
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
