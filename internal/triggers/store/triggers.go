package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/triggers/pollgroups"
	"github.com/proliferate/proliferate/internal/triggers/providers"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// Trigger types.
const (
	TypeWebhook   = "webhook"
	TypePolling   = "polling"
	TypeScheduled = "scheduled"
	TypeManual    = "manual"
)

// Providers of the triggers this package creates itself.
const (
	ProviderScheduled = "scheduled"
	ProviderManual    = "manual"
)

// MaxConfigBytes bounds a trigger config, as JSON.
const MaxConfigBytes = 16 << 10

// IntegrationRef summarizes a trigger's integration (only when the caller may
// see it: org-visible, or private and their own).
type IntegrationRef struct {
	ID string `json:"id"`
	// Kind is what it connects to (github, linear, sentry…).
	Kind string `json:"kind"`
	// Provider is how: github-app or nango.
	Provider    string  `json:"provider"`
	DisplayName *string `json:"display_name"`
	Status      string  `json:"status"`
}

// Trigger is a configured event source of an automation. It never carries
// the webhook secret (see CreatedTrigger).
type Trigger struct {
	ID           string `json:"id"`
	AutomationID string `json:"automation_id"`
	// TriggerType is webhook, polling, scheduled (a schedule's own trigger)
	// or manual (the automation's Run Now trigger).
	TriggerType   string          `json:"trigger_type"`
	Provider      string          `json:"provider"`
	Enabled       bool            `json:"enabled"`
	Config        map[string]any  `json:"config"`
	IntegrationID *string         `json:"integration_id"`
	Integration   *IntegrationRef `json:"integration,omitempty"`
	// WebhookPath and WebhookURL are set for webhook triggers without an
	// integration (custom ones, and providers' webhooks pointed straight at
	// the trigger): POST WebhookURL with the body signed by the trigger's
	// secret, by the provider's scheme (custom: X-Webhook-Signature =
	// "sha256=" + hex HMAC-SHA256(secret, body)).
	WebhookPath *string `json:"webhook_path,omitempty"`
	WebhookURL  *string `json:"webhook_url,omitempty"`
	PollGroupID *string `json:"poll_group_id"`
	// ScheduleID is set on a schedule's trigger.
	ScheduleID *string `json:"schedule_id,omitempty"`
	// PendingEventCount counts the trigger's queued events.
	PendingEventCount int       `json:"pending_event_count"`
	CreatedBy         *string   `json:"created_by"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// CreatedTrigger is a new trigger; WebhookSecret is set (triggers with their
// own webhook URL) only in this response and in a rotation's: it is stored sealed
// and never shown again.
type CreatedTrigger struct {
	Trigger
	WebhookSecret *string `json:"webhook_secret,omitempty"`
}

// TriggerInput creates a trigger.
type TriggerInput struct {
	TriggerType, Provider string
	Config                map[string]any
	IntegrationID         *string
	Enabled               bool
}

// TriggerPatch changes a trigger; nil fields are kept.
type TriggerPatch struct {
	Config  map[string]any
	Enabled *bool
}

// TriggerFilter narrows GET /triggers.
type TriggerFilter struct{ AutomationID, Provider, TriggerType string }

// StatusCounts counts a trigger's events per status.
type StatusCounts struct {
	Queued     int `json:"queued"`
	Processing int `json:"processing"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	Skipped    int `json:"skipped"`
}

// TriggerDetail is a trigger with its 20 newest events and its event counts.
type TriggerDetail struct {
	Trigger
	RecentEvents []Event      `json:"recent_events"`
	StatusCounts StatusCounts `json:"status_counts"`
}

// RecentEventsLimit is how many events GET /triggers/:id shows.
const RecentEventsLimit = 20

// triggerRow converts a stored trigger (err is the query's).
func (s *Store) triggerRow(r triggersdb.GetTriggerRow, err error) (Trigger, error) {
	if err != nil {
		return Trigger{}, err
	}
	t := Trigger{ID: r.ID, AutomationID: r.AutomationID, TriggerType: r.TriggerType, Provider: r.Provider, Enabled: r.Enabled,
		IntegrationID: r.IntegrationID, WebhookPath: r.WebhookPath, PollGroupID: r.PollGroupID, ScheduleID: r.ScheduleID,
		PendingEventCount: int(r.PendingEventCount), CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if err := json.Unmarshal(r.Config, &t.Config); err != nil {
		return Trigger{}, fmt.Errorf("trigger %s: config: %w", r.ID, err)
	}
	if t.Config == nil {
		t.Config = map[string]any{}
	}
	if r.RefID != nil {
		t.Integration = &IntegrationRef{ID: *r.RefID, Kind: *r.RefKind, Provider: *r.RefProvider, DisplayName: r.RefDisplayName, Status: *r.RefStatus}
	}
	if t.WebhookPath != nil {
		u := s.webhookURL(*t.WebhookPath)
		t.WebhookURL = &u
	}
	return t, nil
}

func (s *Store) webhookURL(path string) string {
	return strings.TrimRight(s.IngestURL, "/") + "/webhooks/t/" + path
}

func (s *Store) getTrigger(ctx context.Context, tx pgx.Tx, orgID, userID, id string) (Trigger, error) {
	var q triggersdb.DBTX = s.Pool
	if tx != nil {
		q = tx
	}
	t, err := s.triggerRow(triggersdb.New(q).GetTrigger(ctx, triggersdb.GetTriggerParams{UserID: nullable(userID), OrgID: orgID, ID: id}))
	if isNoRows(err) {
		return t, notFound("trigger")
	}
	return t, err
}

// providerInfo finds a provider of providers.Providers().
func providerInfo(id string) (providers.Info, bool) {
	for _, p := range providers.Providers() {
		if p.ID == id {
			return p, true
		}
	}
	return providers.Info{}, false
}

// checkConfig validates a config for a provider, with paths under "config".
func checkConfig(provider string, cfg map[string]any) error {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return invalid("config", "must be a JSON object")
	}
	if len(raw) > MaxConfigBytes {
		return invalid("config", fmt.Sprintf("must be at most %d bytes as JSON", MaxConfigBytes))
	}
	probs := providers.ValidateConfig(provider, cfg)
	if len(probs) == 0 {
		return nil
	}
	fes := make([]FieldError, len(probs))
	for i, p := range probs {
		field := "config"
		switch {
		case p.Path == "":
		case strings.HasPrefix(p.Path, "["):
			field += p.Path
		default:
			field += "." + p.Path
		}
		fes[i] = FieldError{Field: field, Problem: p.Problem}
	}
	return &ValidationError{Fields: fes}
}

// validateTriggerInput checks what needs no database: provider, type, config.
func validateTriggerInput(in *TriggerInput) error {
	if in.Config == nil {
		in.Config = map[string]any{}
	}
	info, ok := providerInfo(in.Provider)
	if !ok {
		ids := []string{}
		for _, p := range providers.Providers() {
			ids = append(ids, p.ID)
		}
		return invalid("provider", "unknown provider; one of "+strings.Join(ids, ", "))
	}
	if !slices.Contains(info.TriggerTypes, in.TriggerType) {
		return invalid("trigger_type", fmt.Sprintf("provider %s supports %s", in.Provider, strings.Join(info.TriggerTypes, ", ")))
	}
	if in.Provider == providers.Custom && in.IntegrationID != nil {
		return invalid("integration_id", "custom webhook triggers take no integration (they have their own URL and secret)")
	}
	if in.TriggerType == TypePolling && in.IntegrationID == nil {
		return invalid("integration_id", "is required for polling triggers (the poll uses the integration's credentials)")
	}
	return checkConfig(in.Provider, in.Config)
}

// checkIntegration makes sure the integration is the organization's, visible
// to the caller and not deleted (else 404), and connects to the trigger's
// provider (else 422).
func checkIntegration(ctx context.Context, tx pgx.Tx, orgID, userID string, id *string, provider string) error {
	if id == nil {
		return nil
	}
	r, err := integrationsdb.New(tx).VisibleIntegrationKind(ctx, integrationsdb.VisibleIntegrationKindParams{ID: *id, OrgID: orgID,
		UserID: nullable(userID)})
	if isNoRows(err) {
		return notFound("integration")
	}
	if err != nil {
		return err
	}
	if kind := r.IntegrationID; kind != provider {
		return invalid("integration_id", fmt.Sprintf("is a %s integration; a %s trigger needs a %s integration", kind, provider, provider))
	}
	return nil
}

// CreateTrigger validates and inserts a trigger of an automation. A webhook
// trigger without an integration (custom, or a provider's webhook pointed
// straight at the trigger: PostHog, Linear, Sentry, a GitHub repository
// webhook) gets its own random path and secret (sealed; returned once); a
// webhook trigger with an integration receives the integration's webhooks
// (GitHub App, Nango) and has neither. A polling trigger joins its poll
// group, in the same transaction.
func (s *Store) CreateTrigger(ctx context.Context, orgID, automationID string, in TriggerInput, au Audit) (CreatedTrigger, error) {
	var out CreatedTrigger
	if in.TriggerType != TypeWebhook && in.TriggerType != TypePolling {
		return out, invalid("trigger_type", "must be one of webhook, polling")
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := lockAutomation(ctx, tx, orgID, automationID); err != nil {
			return err
		}
		if err := validateTriggerInput(&in); err != nil {
			return err
		}
		if err := checkIntegration(ctx, tx, orgID, au.UserID, in.IntegrationID, in.Provider); err != nil {
			return err
		}
		id := uuid.NewString()
		var path, sealed, secret *string
		if in.TriggerType == TypeWebhook && in.IntegrationID == nil {
			p, sec, seal, err := s.newWebhookCredentials(id)
			if err != nil {
				return err
			}
			path, sealed, secret = &p, &seal, &sec
		}
		cfg, err := json.Marshal(in.Config)
		if err != nil {
			return fmt.Errorf("insert trigger: %w", err)
		}
		if err := triggersdb.New(tx).InsertTrigger(ctx, triggersdb.InsertTriggerParams{ID: id, OrgID: orgID, AutomationID: automationID,
			TriggerType: in.TriggerType, Provider: in.Provider, Enabled: in.Enabled, Config: cfg, IntegrationID: in.IntegrationID,
			WebhookPath: path, WebhookSecretSealed: sealed, CreatedBy: nullable(au.UserID)}); err != nil {
			return fmt.Errorf("insert trigger: %w", err)
		}
		if in.TriggerType == TypePolling && in.Enabled {
			if err := pollgroups.Attach(ctx, tx, id); err != nil {
				return fmt.Errorf("attach poll group: %w", err)
			}
		}
		if err := audit(ctx, tx, orgID, au, "trigger.create", "trigger", id, map[string]any{
			"automation_id": automationID, "provider": in.Provider, "trigger_type": in.TriggerType}); err != nil {
			return err
		}
		t, err := s.getTrigger(ctx, tx, orgID, au.UserID, id)
		out = CreatedTrigger{Trigger: t, WebhookSecret: secret}
		return err
	})
	return out, err
}

// newWebhookCredentials makes a custom trigger's path ("t_" + 24 base62
// characters) and secret, and seals the secret bound to the trigger id.
func (s *Store) newWebhookCredentials(triggerID string) (path, secret, sealed string, err error) {
	r, err := randomBase62(24)
	if err != nil {
		return "", "", "", err
	}
	secret, err = newWebhookSecret()
	if err != nil {
		return "", "", "", err
	}
	sealed, err = s.Box.Seal([]byte(secret), WebhookSecretAD(triggerID))
	if err != nil {
		return "", "", "", fmt.Errorf("seal webhook secret: %w", err)
	}
	return "t_" + r, secret, sealed, nil
}

// ListTriggers lists the organization's triggers with pending event counts.
func (s *Store) ListTriggers(ctx context.Context, orgID, userID string, f TriggerFilter, p Page) ([]Trigger, error) {
	rows, err := triggersdb.New(s.Pool).ListTriggers(ctx, triggersdb.ListTriggersParams{UserID: nullable(userID), OrgID: orgID,
		AutomationID: nullable(f.AutomationID), Provider: nullable(f.Provider), TriggerType: nullable(f.TriggerType),
		BeforeAt: p.At, BeforeID: p.ID, Max: int32(p.Limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Trigger, 0, len(rows))
	for _, r := range rows {
		t, err := s.triggerRow(triggersdb.GetTriggerRow(r), nil)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// GetTrigger returns a trigger with its recent events and status counts.
func (s *Store) GetTrigger(ctx context.Context, orgID, userID, id string) (TriggerDetail, error) {
	var d TriggerDetail
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		t, err := s.getTrigger(ctx, tx, orgID, userID, id)
		if err != nil {
			return err
		}
		d.Trigger = t
		counts, err := triggersdb.New(tx).TriggerEventStatusCounts(ctx, triggersdb.TriggerEventStatusCountsParams{TriggerID: id, OrgID: orgID})
		if err != nil {
			return err
		}
		for _, c := range counts {
			n := int(c.N)
			switch c.Status {
			case "queued":
				d.StatusCounts.Queued = n
			case "processing":
				d.StatusCounts.Processing = n
			case "completed":
				d.StatusCounts.Completed = n
			case "failed":
				d.StatusCounts.Failed = n
			case "skipped":
				d.StatusCounts.Skipped = n
			}
		}
		d.PendingEventCount = d.StatusCounts.Queued
		d.RecentEvents, err = listEvents(ctx, tx, orgID, EventFilter{TriggerID: id}, farFuture, maxUUID, RecentEventsLimit)
		return err
	})
	return d, err
}

var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

const maxUUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"

// managed refuses changes through /triggers to triggers other resources own.
func managed(t Trigger) error {
	switch t.TriggerType {
	case TypeScheduled:
		return &ConflictError{Code: "managed_trigger", Message: "this trigger belongs to a schedule; change or delete the schedule instead"}
	case TypeManual:
		return &ConflictError{Code: "managed_trigger", Message: "this is the automation's Run Now trigger; it cannot be changed or deleted on its own"}
	}
	return nil
}

// UpdateTrigger changes a trigger's config or enabled flag. A polling
// trigger leaves its poll group when disabled (the group goes when empty)
// and joins it again when enabled.
func (s *Store) UpdateTrigger(ctx context.Context, orgID, id string, p TriggerPatch, au Audit) (Trigger, error) {
	var out Trigger
	err := s.tx(ctx, func(tx pgx.Tx) error {
		cur, err := s.lockTrigger(ctx, tx, orgID, au.UserID, id)
		if err != nil {
			return err
		}
		if err := managed(cur); err != nil {
			return err
		}
		if p.Config != nil {
			if err := checkConfig(cur.Provider, p.Config); err != nil {
				return err
			}
		}
		var cfg []byte // SQL NULL keeps the config
		if p.Config != nil {
			if cfg, err = json.Marshal(p.Config); err != nil {
				return fmt.Errorf("update trigger: %w", err)
			}
		}
		if err := triggersdb.New(tx).UpdateTrigger(ctx, triggersdb.UpdateTriggerParams{ID: id, OrgID: orgID, Config: cfg,
			Enabled: p.Enabled}); err != nil {
			return fmt.Errorf("update trigger: %w", err)
		}
		// Attach again after any change of an enabled polling trigger: the
		// group's interval follows its triggers' configs.
		if cur.TriggerType == TypePolling {
			enabled := cur.Enabled
			if p.Enabled != nil {
				enabled = *p.Enabled
			}
			if enabled {
				if err := pollgroups.Attach(ctx, tx, id); err != nil {
					return fmt.Errorf("attach poll group: %w", err)
				}
			} else if err := pollgroups.DetachEmpty(ctx, tx, orgID); err != nil {
				return fmt.Errorf("detach empty poll groups: %w", err)
			}
		}
		out, err = s.getTrigger(ctx, tx, orgID, au.UserID, id)
		if err != nil {
			return err
		}
		fields, err := changedFields(cur, out)
		if err != nil {
			return err
		}
		return audit(ctx, tx, orgID, au, "trigger.update", "trigger", id, map[string]any{
			"automation_id": out.AutomationID, "provider": out.Provider, "fields": fields})
	})
	return out, err
}

func (s *Store) lockTrigger(ctx context.Context, tx pgx.Tx, orgID, userID, id string) (Trigger, error) {
	if err := triggersdb.New(tx).LockTrigger(ctx, triggersdb.LockTriggerParams{ID: id, OrgID: orgID}); err != nil {
		return Trigger{}, err
	}
	return s.getTrigger(ctx, tx, orgID, userID, id)
}

// DeleteTrigger deletes a trigger with its events and their runs (cascade);
// a poll group left without triggers goes too.
func (s *Store) DeleteTrigger(ctx context.Context, orgID, id string, au Audit) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		cur, err := s.lockTrigger(ctx, tx, orgID, au.UserID, id)
		if err != nil {
			return err
		}
		if err := managed(cur); err != nil {
			return err
		}
		if err := triggersdb.New(tx).DeleteTrigger(ctx, triggersdb.DeleteTriggerParams{ID: id, OrgID: orgID}); err != nil {
			return err
		}
		if cur.PollGroupID != nil || cur.TriggerType == TypePolling {
			if err := pollgroups.DetachEmpty(ctx, tx, orgID); err != nil {
				return fmt.Errorf("detach empty poll groups: %w", err)
			}
		}
		return audit(ctx, tx, orgID, au, "trigger.delete", "trigger", id, map[string]any{
			"automation_id": cur.AutomationID, "provider": cur.Provider, "trigger_type": cur.TriggerType})
	})
}

// RotateSecret gives a trigger with its own webhook URL a new secret (returned once);
// the old one stops working at once.
func (s *Store) RotateSecret(ctx context.Context, orgID, id string, au Audit) (CreatedTrigger, error) {
	var out CreatedTrigger
	err := s.tx(ctx, func(tx pgx.Tx) error {
		cur, err := s.lockTrigger(ctx, tx, orgID, au.UserID, id)
		if err != nil {
			return err
		}
		if cur.WebhookPath == nil {
			return &ConflictError{Code: "no_webhook_secret", Message: "only webhook triggers without an integration have their own URL and secret"}
		}
		secret, err := newWebhookSecret()
		if err != nil {
			return err
		}
		sealed, err := s.Box.Seal([]byte(secret), WebhookSecretAD(id))
		if err != nil {
			return fmt.Errorf("seal webhook secret: %w", err)
		}
		if err := triggersdb.New(tx).SetTriggerSecret(ctx, triggersdb.SetTriggerSecretParams{ID: id, OrgID: orgID,
			WebhookSecretSealed: sealed}); err != nil {
			return err
		}
		if err := audit(ctx, tx, orgID, au, "trigger.rotate_secret", "trigger", id, nil); err != nil {
			return err
		}
		t, err := s.getTrigger(ctx, tx, orgID, au.UserID, id)
		out = CreatedTrigger{Trigger: t, WebhookSecret: &secret}
		return err
	})
	return out, err
}
