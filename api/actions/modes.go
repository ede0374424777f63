package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

// providerIDs are the code-defined action sources.
var providerIDs = []string{"linear", "sentry", "slack"}

// NullableMode is a mode field that must be present: a string sets the
// mode, null clears it.
type NullableMode struct {
	set   bool
	value *string
}

// UnmarshalJSON records that the field was present.
func (m *NullableMode) UnmarshalJSON(b []byte) error {
	m.set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		m.value = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	m.value = &s
	return nil
}

// MarshalJSON writes the mode or null.
func (m NullableMode) MarshalJSON() ([]byte, error) { return json.Marshal(m.value) }

// ModeRequest sets or clears one action's mode.
type ModeRequest struct {
	// Integration is linear, sentry, slack or connector:<uuid>.
	Integration string `json:"integration" binding:"required,max=200"`
	Action      string `json:"action" binding:"required,max=200"`
	// Mode is allow, require_approval or deny; null clears the key.
	Mode NullableMode `json:"mode" doc:"allow | require_approval | deny; null clears the mode"`
}

// Validate checks the shape; the connector's organization is checked by
// the handler.
func (r *ModeRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if !validSourceShape(r.Integration) {
		fes = append(fes, httpapi.FieldError{Field: "integration", Problem: "must be linear, sentry, slack or connector:<uuid>"})
	}
	if strings.TrimSpace(r.Action) == "" || !utf8.ValidString(r.Action) || strings.ContainsAny(r.Action, "\x00") {
		fes = append(fes, httpapi.FieldError{Field: "action", Problem: "must be a non-empty action id"})
	}
	switch {
	case !r.Mode.set:
		fes = append(fes, httpapi.FieldError{Field: "mode", Problem: "is required (null clears the mode)"})
	case r.Mode.value != nil && !actions.ValidMode(*r.Mode.value):
		fes = append(fes, httpapi.FieldError{Field: "mode", Problem: "must be allow, require_approval or deny (or null to clear)"})
	}
	return fes
}

func validSourceShape(s string) bool {
	for _, p := range providerIDs {
		if s == p {
			return true
		}
	}
	id, ok := strings.CutPrefix(s, actions.ConnectorPrefix)
	return ok && api.IsUUID(id)
}

// connectorID returns the connector uuid of a connector source id.
func connectorID(source string) (string, bool) {
	return strings.CutPrefix(source, actions.ConnectorPrefix)
}

// ModeEntry is one stored mode, its key split.
type ModeEntry struct {
	Integration string `json:"integration"`
	Action      string `json:"action"`
	Mode        string `json:"mode"`
}

// ModesResponse is a scope's stored modes.
type ModesResponse struct {
	// ActionModes is the stored map, "<source>:<action>" → mode.
	ActionModes map[string]string `json:"action_modes"`
	// Entries is the same, split and sorted by integration and action.
	Entries []ModeEntry `json:"entries"`
}

func modesResponse(m map[string]string) ModesResponse {
	if m == nil {
		m = map[string]string{}
	}
	out := ModesResponse{ActionModes: m, Entries: []ModeEntry{}}
	for k, v := range m {
		src, act := splitKey(k)
		out.Entries = append(out.Entries, ModeEntry{Integration: src, Action: act, Mode: v})
	}
	sort.Slice(out.Entries, func(i, j int) bool {
		a, b := out.Entries[i], out.Entries[j]
		if a.Integration != b.Integration {
			return a.Integration < b.Integration
		}
		return a.Action < b.Action
	})
	return out
}

// splitKey splits "<source>:<action>"; a connector source holds a colon.
func splitKey(k string) (source, action string) {
	if rest, ok := strings.CutPrefix(k, actions.ConnectorPrefix); ok {
		id, act, _ := strings.Cut(rest, ":")
		return actions.ConnectorPrefix + id, act
	}
	source, action, _ = strings.Cut(k, ":")
	return source, action
}

var errTooManyModes = errors.New("too many modes")

// checkKey refuses a mode for an action the organization's catalog does
// not have, before anything is written. A provider action must be one of
// the provider's static definitions; a connector must be the org's, and
// its tool either reviewed (a tool_risk_overrides entry) or listed by the
// server now (tools/list within ConnectorTimeout). A connector whose tools
// cannot be listed cannot vouch for an unreviewed tool: 422 saying so.
// The problem names the offending key.
func (h *handlers) checkKey(ctx context.Context, orgID, source, action string) error {
	key := actions.ModeKey(source, action)
	id, ok := connectorID(source)
	if !ok {
		if p, ok := providerCatalog[source]; ok {
			for _, d := range p.definitions() {
				if d.ID == action {
					return nil
				}
			}
		}
		return httpapi.Invalid(httpapi.FieldError{Field: "action",
			Problem: fmt.Sprintf("unknown action %q: %s has no action %q", key, source, action)})
	}
	conn, err := h.integ.GetConnector(ctx, orgID, id)
	if errors.Is(err, integrations.ErrNotFound) {
		return httpapi.Invalid(httpapi.FieldError{Field: "integration", Problem: "is not a connector of this organization"})
	}
	if err != nil {
		return fmt.Errorf("check connector: %w", err)
	}
	if _, ok := conn.ToolOverrides[action]; ok {
		return nil
	}
	defs, err := h.listConnector(ctx, conn)
	if err != nil {
		return httpapi.Invalid(httpapi.FieldError{Field: "action",
			Problem: fmt.Sprintf("cannot check %q: the connector's tools could not be listed (%v)", key, err)})
	}
	for _, d := range defs {
		if d.ID == action {
			return nil
		}
	}
	return httpapi.Invalid(httpapi.FieldError{Field: "action",
		Problem: fmt.Sprintf("unknown action %q: connector %q has no tool %q", key, conn.Name, action)})
}

// writeMode sets or clears key in table.action_modes of one row (the org
// or an org's automation) in one statement and returns the new map.
// pgx.ErrNoRows: no such row; errTooManyModes: the map is full.
func (h *handlers) writeMode(ctx context.Context, tx pgx.Tx, table, id, orgID, key string, mode *string) (map[string]string, error) {
	var where string
	switch table {
	case "organizations":
		where = `id = $1 AND id = $2`
	case "automations":
		where = `id = $1 AND org_id = $2`
	default:
		return nil, fmt.Errorf("write mode: unknown table %q", table)
	}
	var m map[string]string
	if mode == nil {
		err := tx.QueryRow(ctx, `UPDATE `+table+` SET action_modes = action_modes - $3::text, updated_at = now()
			WHERE `+where+` RETURNING action_modes`, id, orgID, key).Scan(&m)
		return m, err
	}
	err := tx.QueryRow(ctx, `UPDATE `+table+` SET action_modes = jsonb_set(action_modes, ARRAY[$3::text], to_jsonb($4::text)),
			updated_at = now()
		WHERE `+where+` AND (action_modes ? $3::text OR (SELECT count(*) FROM jsonb_object_keys(action_modes)) < $5)
		RETURNING action_modes`, id, orgID, key, *mode, MaxModes).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if e := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE `+where+`)`, id, orgID).Scan(&exists); e != nil {
			return nil, fmt.Errorf("write mode: %w", e)
		}
		if exists {
			return nil, errTooManyModes
		}
	}
	return m, err
}

func (h *handlers) readModes(ctx context.Context, table, id, orgID string) (map[string]string, error) {
	where := `id = $1 AND org_id = $2`
	if table == "organizations" {
		where = `id = $1 AND id = $2`
	}
	var m map[string]string
	err := h.pool.QueryRow(ctx, `SELECT action_modes FROM `+table+` WHERE `+where, id, orgID).Scan(&m)
	return m, err
}

func (h *handlers) orgModes(c *api.Ctx) error {
	m, err := h.readModes(c.Request.Context(), "organizations", c.OrgID(), c.OrgID())
	if errors.Is(err, pgx.ErrNoRows) {
		return httpapi.NotFound("organization")
	}
	if err != nil {
		return fmt.Errorf("read org modes: %w", err)
	}
	return c.Reply(http.StatusOK, modesResponse(m))
}

func (h *handlers) setOrgMode(c *api.Ctx) error {
	return h.setMode(c, "organizations", c.OrgID(), "organization")
}

func (h *handlers) setAutomationMode(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	return h.setMode(c, "automations", id, "automation")
}

func (h *handlers) setMode(c *api.Ctx, table, id, what string) error {
	var req ModeRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	// A scope that is not the caller's is 404 before the key is checked
	// (which may ask a connector's server).
	if _, err := h.readModes(ctx, table, id, c.OrgID()); errors.Is(err, pgx.ErrNoRows) {
		return httpapi.NotFound(what)
	} else if err != nil {
		return fmt.Errorf("read %s modes: %w", what, err)
	}
	if req.Mode.value != nil {
		if err := h.checkKey(ctx, c.OrgID(), req.Integration, req.Action); err != nil {
			return err
		}
	}
	key := actions.ModeKey(req.Integration, req.Action)
	var m map[string]string
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		if m, err = h.writeMode(ctx, tx, table, id, c.OrgID(), key, req.Mode.value); err != nil {
			return err
		}
		// The organization's audit trail, in the change's transaction.
		ev := audit.Event{OrgID: c.OrgID(), Action: "action_mode.set", TargetType: what, TargetID: id,
			Details: map[string]any{"integration": req.Integration, "action": req.Action, "mode": req.Mode.value},
			Actor:   audit.ActorFrom(ctx)}
		if req.Mode.value == nil {
			ev.Action = "action_mode.clear"
		}
		return audit.Emit(ctx, tx, ev)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return httpapi.NotFound(what)
	case errors.Is(err, errTooManyModes):
		return httpapi.Invalid(httpapi.FieldError{Field: "action", Problem: fmt.Sprintf("the %s already has %d modes; clear some first", what, MaxModes)})
	case err != nil:
		return fmt.Errorf("set %s mode: %w", what, err)
	}
	mode := "(cleared)"
	if req.Mode.value != nil {
		mode = *req.Mode.value
	}
	c.Log().Info("action mode changed", "scope", what, "scope_id", id, "key", key, "mode", mode, "user_id", c.UserID())
	return c.Reply(http.StatusOK, modesResponse(m))
}
