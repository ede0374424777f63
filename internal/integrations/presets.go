package integrations

import "sort"

// ConnectionRequirement is what a provider declares it needs (broker-agnostic,
// as in the original IntegrationProvider.connections).
type ConnectionRequirement struct {
	Type   string   `json:"type"`   // oauth2 | api_key
	Preset string   `json:"preset"` // stable key: github, sentry, linear
	Scopes []string `json:"scopes,omitempty"`
}

// Preset is one connectable provider and how the platform fulfils it. The
// broker mapping (which Nango integration key serves a preset) lives here and
// only here, so swapping the broker changes this table, not providers or
// routes (the original inlined it in each router endpoint).
type Preset struct {
	ID          string                `json:"id"`
	DisplayName string                `json:"display_name"`
	Category    string                `json:"category"` // source_control | issue_tracker | monitoring | communication
	Org         ConnectionRequirement `json:"org"`
	// UserAttribution: people may connect their own account (user_connections).
	UserAttribution bool `json:"user_attribution"`
	// Brokers that can fulfil it.
	Providers []Provider `json:"providers"`
	// NangoKey is the Nango integration (provider_config_key) for the preset.
	NangoKey string `json:"-"`
}

// DefaultPresets are the providers integrations supports. nangoKeys
// overrides Nango integration keys by preset id (deployments name their Nango
// integrations freely); by default the key is the preset id.
func DefaultPresets(nangoKeys map[string]string) Presets {
	ps := []Preset{
		{ID: "github", DisplayName: "GitHub", Category: "source_control",
			Org:             ConnectionRequirement{Type: "oauth2", Preset: "github", Scopes: []string{"repo", "read:org"}},
			UserAttribution: true, Providers: []Provider{ProviderGitHubApp, ProviderNango}},
		{ID: "linear", DisplayName: "Linear", Category: "issue_tracker",
			Org:             ConnectionRequirement{Type: "oauth2", Preset: "linear", Scopes: []string{"read", "write"}},
			UserAttribution: true, Providers: []Provider{ProviderNango}},
		{ID: "sentry", DisplayName: "Sentry", Category: "monitoring",
			Org:       ConnectionRequirement{Type: "oauth2", Preset: "sentry", Scopes: []string{"project:read", "event:read", "org:read"}},
			Providers: []Provider{ProviderNango}},
	}
	for i := range ps {
		ps[i].NangoKey = ps[i].ID
		if k := nangoKeys[ps[i].ID]; k != "" {
			ps[i].NangoKey = k
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID })
	return Presets{list: ps}
}

// Presets is the preset table.
type Presets struct{ list []Preset }

// All returns the presets in id order.
func (p Presets) All() []Preset { return append([]Preset(nil), p.list...) }

// ByID finds a preset.
func (p Presets) ByID(id string) (Preset, bool) {
	for _, x := range p.list {
		if x.ID == id {
			return x, true
		}
	}
	return Preset{}, false
}

// ByNangoKey maps a Nango provider_config_key back to its preset.
func (p Presets) ByNangoKey(key string) (Preset, bool) {
	for _, x := range p.list {
		if x.NangoKey == key {
			return x, true
		}
	}
	return Preset{}, false
}
