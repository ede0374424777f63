package actions

import "strings"

// The mode cascade: automation override, then org
// default, then the mode inferred from the action's risk hint; then the
// drift guard for connector tools. Stored modes come from JSONB maps keyed
// "<sourceId>:<actionId>"; a stored value that is not one of the three
// modes (including "") denies, fail-safe, with DeniedReason
// "unknown_mode:<value>".

// ModeSource says which level of the cascade decided.
type ModeSource string

// Mode sources, as recorded in action_invocations.mode_source.
const (
	ModeSourceAutomation ModeSource = "automation_override"
	ModeSourceOrg        ModeSource = "org_default"
	ModeSourceInferred   ModeSource = "inferred_default"
)

// DeniedReasonPolicy is the denied_reason of an invocation denied by its
// resolved mode.
const DeniedReasonPolicy = "policy"

// ConnectorPrefix starts the source id of every MCP connector source.
const ConnectorPrefix = "connector:"

// ModeInput is what the cascade reads for one invocation.
type ModeInput struct {
	SourceID string
	ActionID string
	Risk     RiskLevel
	// AutomationModes and OrgModes are automations.action_modes and
	// organizations.action_modes (nil when absent).
	AutomationModes map[string]string
	OrgModes        map[string]string
	// Drifted: the tool's DefinitionHash differs from the reviewed one.
	Drifted bool
}

// ModeResolution is the resolved policy, recorded on the invocation.
type ModeResolution struct {
	Mode   Mode
	Source ModeSource
	// Drifted is true when the drift guard applied (a drifted connector
	// tool), whether or not it changed the mode.
	Drifted bool
	// DeniedReason is set when Mode is deny: "policy", or
	// "unknown_mode:<value>" for an unrecognised stored mode.
	DeniedReason string
}

// ModeKey is the key of an action in the action_modes maps.
func ModeKey(sourceID, actionID string) string { return sourceID + ":" + actionID }

// ResolveMode runs the cascade. It never fails: every input resolves to a
// mode, and anything unexpected resolves to deny or require_approval.
func ResolveMode(in ModeInput) ModeResolution {
	var res ModeResolution
	stored, source, found := lookupMode(in)
	if found {
		res.Source = source
		if m, ok := parseMode(stored); ok {
			res.Mode = m
		} else {
			res.Mode = ModeDeny
			res.DeniedReason = "unknown_mode:" + stored
		}
	} else {
		res.Source = ModeSourceInferred
		res.Mode = InferMode(in.Risk)
	}
	if in.Drifted && strings.HasPrefix(in.SourceID, ConnectorPrefix) {
		res.Drifted = true
		if res.Mode == ModeAllow {
			res.Mode = ModeRequireApproval
		}
	}
	if res.Mode == ModeDeny && res.DeniedReason == "" {
		res.DeniedReason = DeniedReasonPolicy
	}
	return res
}

// lookupMode finds the stored mode, building the key once on the stack.
func lookupMode(in ModeInput) (string, ModeSource, bool) {
	if len(in.AutomationModes) == 0 && len(in.OrgModes) == 0 {
		return "", "", false
	}
	var arr [128]byte
	key := append(arr[:0], in.SourceID...)
	key = append(key, ':')
	key = append(key, in.ActionID...)
	// m[string(bytes)] does not allocate.
	if v, ok := in.AutomationModes[string(key)]; ok {
		return v, ModeSourceAutomation, true
	}
	if v, ok := in.OrgModes[string(key)]; ok {
		return v, ModeSourceOrg, true
	}
	return "", "", false
}

func parseMode(s string) (Mode, bool) {
	switch Mode(s) {
	case ModeAllow, ModeRequireApproval, ModeDeny:
		return Mode(s), true
	}
	return "", false
}

// InferMode maps a risk hint to its default mode: read → allow, write →
// require_approval, danger → deny. An unknown or empty risk asks for
// approval: a person decides rather than the agent or a blanket deny.
func InferMode(r RiskLevel) Mode {
	switch r {
	case RiskRead:
		return ModeAllow
	case RiskDanger:
		return ModeDeny
	default:
		return ModeRequireApproval
	}
}

// ValidMode reports whether s is one of the three modes (for the API that
// stores overrides: reject anything else at write time).
func ValidMode(s string) bool {
	_, ok := parseMode(s)
	return ok
}
