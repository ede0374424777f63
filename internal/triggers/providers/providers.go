// Package providers turns raw provider webhooks into normalized trigger events
// (Parse), decides whether a trigger's filter config matches an event
// (Matches), validates trigger configs (ValidateConfig) and describes every
// provider with the JSON Schema of its config (Providers). It is pure: no
// database, no network, no clock (ReceivedAt comes in with the webhook).
//
// Trigger config keys per provider (every key optional; unknown keys are
// problems; an empty list means "any"):
//
//	github:  events       []string  issues | pull_request | push | check_suite | check_run | workflow_run
//	         actions      []string  the payload's action (opened, closed, completed…); "merged" matches a merged PR's close
//	         branches     []string  globs (* within a path segment, ** across, ?) on the branch: push ref, PR base, check/workflow head
//	         labels       []string  any of these labels (issues, pull requests)
//	         repos        []string  globs on "owner/repo" (case-insensitive)
//	         conclusions  []string  success | failure | cancelled | skipped | timed_out | action_required | neutral | stale | startup_failure
//	linear:  team_id      string    team id or key (ENG)
//	         states       []string  workflow state names (case-insensitive)
//	         priorities   []int     0 none, 1 urgent, 2 high, 3 medium, 4 low
//	         labels       []string  any of these label names (case-insensitive)
//	         assignee_ids []string
//	         project_ids  []string
//	         actions      []string  create | update
//	sentry:  project_slug string
//	         environments []string
//	         min_level    string    debug < info < warning < error < fatal
//	posthog: event_names      []string
//	         property_filters map[string]string|number|boolean   event property equals value
//	custom:  conditions   []{path, equals | in | exists}          all must hold; path is $.a.b[0].c
//
// Normalized context (runs.Event.Context) is {"title", "description",
// "related_files", <provider>: {…}} with snake_case keys (custom webhooks:
// {"title", "payload": <the body, bounded>, "custom": {"received_at"}}); Matches reads
// the provider object, so pollers that build events for these providers must
// use the same builders (LinearIssueEvent, or Parse).
//
// # Bounded projection
//
// Parse and LinearIssueEvent return a bounded projection of the payload, the
// only form in which an event is matched, stored (trigger_events) and
// announced (triggers.events, 256 KiB a record); the raw webhook stays in
// webhooks.raw and the blob store. No field is stored twice: the issue or
// pull request body, the check run summary and a Linear description are the
// context's "description" only, and push commits keep their subject line
// (the full messages are the description). Limits, in bytes of UTF-8 cut on
// a rune boundary with a "…[truncated N bytes]" marker:
//
//	description                      16 KiB (MaxDescriptionBytes)
//	sentry.stack_trace                8 KiB
//	any other string                  2 KiB
//	github.commits                    100 items; related_files 200; any other list 100
//	payload (custom), posthog.properties, posthog.person
//	                                 whole up to 64 KiB of JSON, else cut to 64 KiB
//	nesting                          32 levels
//	the whole context                128 KiB of JSON (MaxContextBytes): members are
//	                                 kept in priority order (title, description,
//	                                 the provider object, related_files, payload)
//	title 500, url 2 KiB (longer: dropped), external id 256, dedup key 512,
//	event types 200 (longer identifiers: a prefix and the SHA-256 of the whole)
//
// A context from which anything was cut has "truncated": true; a list cut to
// its limit has a sibling "<name>_total" with its full length.
//
// Dedup keys (unique per trigger, so a redelivery changes nothing):
//
//	github   github:delivery:{X-GitHub-Delivery}; without one (Nango forwards)
//	         github:{item}:{action}[:{updated_at}]
//	linear   linear:{issue}:create, linear:{issue}:update:{updatedAt}
//	sentry   sentry:{event_id}; issue webhooks sentry:issue:{id}:{action}[:{delivery}]
//	posthog  posthog:{uuid}, else posthog:{event}:{distinct_id}:{timestamp},
//	         else the body hash within 5 minutes
//	custom   custom:key:{Idempotency-Key}, else custom:{sha256(body)}:{5-minute window}
package providers

import (
	"fmt"
	"time"

	"github.com/proliferate/proliferate/internal/runs"
)

// Provider ids.
const (
	GitHub    = "github"
	Linear    = "linear"
	Sentry    = "sentry"
	PostHog   = "posthog"
	Custom    = "custom"
	Scheduled = "scheduled"
	Manual    = "manual"
	// Nango is not a trigger provider: Webhook.Provider "nango" means the
	// body is a Nango envelope.
	Nango = "nango"
)

// Webhook is one raw inbound webhook as the ingest role recorded it.
type Webhook struct {
	// Provider is github, linear, sentry, posthog, custom or nango (a Nango
	// envelope: forward envelopes are unwrapped and parsed as the provider
	// named by their "from" or providerConfigKey).
	Provider string
	// Headers has lower-case names.
	Headers    map[string]string
	Body       []byte
	ReceivedAt time.Time
	// DeliveryID is the provider's delivery id when it has one
	// (X-GitHub-Delivery, Linear-Delivery, ...).
	DeliveryID string
}

// ParseError says why a payload could not be parsed. Parsing it again cannot
// succeed, so the processor records it as a failed event and does not retry.
type ParseError struct {
	Provider string
	Reason   string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s webhook: %s", e.Provider, e.Reason)
}

// ConfigProblem is one problem of a trigger config: Path is a JSON path
// relative to the config ("branches[2]", "conditions[0].path", "" for the
// config itself) and Problem a human-readable message.
type ConfigProblem struct {
	Path, Problem string
}

// Info describes a trigger provider for GET /providers.
type Info struct {
	ID           string
	Name         string
	TriggerTypes []string
	// ConfigSchema is the JSON Schema (draft 2020-12) of the trigger config.
	ConfigSchema map[string]any
}

// Parse turns a webhook into normalized events (usually one; none for
// deliveries that carry no trigger event: GitHub ping, installation
// lifecycle, Nango auth and sync, Linear non-Issue or remove events). A
// payload that cannot be parsed returns a *ParseError.
func Parse(w Webhook) ([]runs.Event, error) {
	evs, err := parse(w)
	if err != nil {
		return nil, err
	}
	return boundAll(evs), nil
}

// Matches reports whether a trigger with this provider and config fires for
// ev; when not, reason says why (for the skipped record).
func Matches(provider string, config map[string]any, ev runs.Event) (ok bool, reason string) {
	return matches(provider, config, ev)
}

// ValidateConfig checks a trigger config for a provider; each problem has a
// JSON path ("branches[2]") and a message. Unknown keys are problems. An
// unknown provider is a problem at path "".
func ValidateConfig(provider string, config map[string]any) []ConfigProblem {
	return validateConfig(provider, config)
}

// Providers lists every trigger provider with its JSON Schema (draft 2020-12)
// for config, for GET /providers.
func Providers() []Info {
	return providerInfos()
}

// Lifecycle is an integration status change a webhook announces instead of
// a trigger event: a GitHub App installation deleted, suspended or
// unsuspended, or a Nango auth event (connection created or overridden: active;
// refresh failed: expired).
type Lifecycle struct {
	// GitHubInstallationID is set for GitHub App installation events.
	GitHubInstallationID int64
	// NangoConnectionID and NangoProviderConfigKey are set for Nango auth
	// events.
	NangoConnectionID      string
	NangoProviderConfigKey string
	// Status is the integration's new status: active | suspended | deleted |
	// expired (the values of integrations.Status).
	Status string
	Reason string
}

// LifecycleOf returns the integration status change w announces, or nil when
// it announces none. It errors (with a *ParseError) only for a body that is
// not JSON.
func LifecycleOf(w Webhook) (*Lifecycle, error) {
	return lifecycleOf(w)
}

// Routing is what a webhook body says about where it belongs, for the
// processor's trigger lookup.
type Routing struct {
	// Provider the payload is parsed as (a Nango forward's inner provider).
	Provider string
	// GitHubInstallationID from a GitHub App payload's installation.id.
	GitHubInstallationID int64
	// NangoConnectionID and NangoProviderConfigKey from a Nango envelope.
	NangoConnectionID      string
	NangoProviderConfigKey string
}

// RoutingOf extracts routing hints from w; it never fails (unparseable
// bodies give empty hints).
func RoutingOf(w Webhook) Routing {
	return routingOf(w)
}

// FallbackDedupKey is a stable key for a webhook that cannot be parsed
// (delivery id when known, else body hash within its 5-minute window), so a
// redelivered unparseable webhook records one failed event.
func FallbackDedupKey(w Webhook) string {
	return fallbackDedupKey(w)
}

// LinearIssueEvent builds the normalized event of a Linear issue (a webhook's
// data object or a GraphQL issues node: labels may be a list or
// {"nodes": [...]}) for action create or update. Pollers use it so polled and
// pushed issues match the same filters and share dedup keys:
// linear:{id}:create, linear:{id}:update:{updatedAt}.
func LinearIssueEvent(issue map[string]any, action string, fallback time.Time) (runs.Event, error) {
	ev, err := linearIssueEvent(issue, action, "", fallback)
	if err != nil {
		return ev, err
	}
	return bound(ev), nil
}
