package sessions

import (
	"context"
	"errors"
	"net/http"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Prebuilt records a setup session's snapshot as its configuration's ready
// snapshot, with the version key of the repositories' current revisions
// (prebuilds.Resolver).
type Prebuilt interface {
	Record(ctx context.Context, s sessions.Session, snapshotID string) (bool, error)
}

// FinalizeResponse is the outcome of a setup session's finalization.
type FinalizeResponse struct {
	SnapshotID      string `json:"snapshot_id"`
	ConfigurationID string `json:"configuration_id"`
	// SnapshotStatus is the configuration's snapshot status: ready.
	SnapshotStatus string `json:"snapshot_status"`
}

// finalize snapshots a running setup session's sandbox (it keeps running)
// and makes the snapshot its configuration's ready snapshot:
// the configuration's next sessions boot from it
// while their repositories are at the same revisions.
func (h *handlers) finalize(c *api.Ctx) error {
	s, err := h.loadForChange(c)
	if err != nil {
		return err
	}
	if s.SessionType != sessions.TypeSetup || s.ConfigurationID == nil {
		return httpapi.Conflict("not_setup_session", "only a setup session of a configuration can be finalized (this is a "+s.SessionType+" session)")
	}
	if s.Status != sessions.StatusRunning {
		return httpapi.Conflict("invalid_transition", "only a running setup session can be finalized (it is "+s.Status+")")
	}
	if h.rt == nil || h.prebuilt == nil {
		return unavailable("no gateway is reachable to snapshot the session")
	}
	id, err := h.rt.Snapshot(c.Request.Context(), s.OrgID, s.ID)
	if err != nil {
		if errors.Is(err, sessions.ErrNotFound) || errors.Is(err, sessions.ErrInvalidTransition) {
			return mapErr(err)
		}
		c.Log().Error("finalize: snapshot through gateway failed", "session_id", s.ID, "error", err)
		return httpapi.Unavailable("the gateway could not snapshot the session")
	}
	// The provider that took the snapshot is the session's.
	if fresh, err := h.store.Get(c.Request.Context(), s.OrgID, s.ID); err == nil {
		s = fresh
	}
	ok, err := h.prebuilt.Record(c.Request.Context(), s, id)
	if err != nil {
		return err
	}
	if !ok {
		return httpapi.NotFound("configuration")
	}
	c.Log().Info("setup session finalized", "session_id", s.ID, "configuration_id", *s.ConfigurationID, "snapshot_id", id)
	return c.Reply(http.StatusOK, FinalizeResponse{SnapshotID: id, ConfigurationID: *s.ConfigurationID, SnapshotStatus: "ready"})
}
