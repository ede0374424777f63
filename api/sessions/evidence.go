package sessions

import (
	"errors"
	"mime"
	"net/http"
	"path"
	"strconv"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// EvidenceList is a session's verification evidence (the verify tool's
// files), oldest first.
type EvidenceList struct {
	Items []evidence.Item `json:"items"`
}

func (h *handlers) evidenceRoutes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/sessions/:id/evidence", Summary: "The session's verification evidence (files the agent uploaded with verify)",
			Tag: tag, Access: api.OrgMember, Response: EvidenceList{}, Handler: h.listEvidence},
		{Method: http.MethodGet, Path: "/sessions/:id/evidence/:evidence_id/content",
			Summary: "Download one piece of verification evidence (served as an attachment with its sniffed content type)",
			Tag:     tag, Access: api.OrgMember, Handler: h.evidenceContent},
	}
}

func (h *handlers) listEvidence(c *api.Ctx) error {
	s, err := h.load(c)
	if err != nil {
		return err
	}
	items, err := h.evidence.ListSession(c.Request.Context(), s.OrgID, s.ID)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, EvidenceList{Items: items})
}

// evidenceContent serves the bytes as an attachment that browsers neither
// sniff nor run (nosniff, a sandboxing CSP), within the organization.
func (h *handlers) evidenceContent(c *api.Ctx) error {
	s, err := h.load(c)
	if err != nil {
		return err
	}
	id, err := c.UUIDParam("evidence_id", "evidence")
	if err != nil {
		return err
	}
	blobs, err := h.blobs()
	if err != nil {
		c.Log().Error("evidence blob store", "error", err)
		return unavailable("the evidence store is not available")
	}
	st := evidence.Store{Pool: h.evidence.Pool, Blobs: blobs}
	it, data, err := st.Open(c.Request.Context(), s.OrgID, s.ID, id)
	if errors.Is(err, evidence.ErrNotFound) {
		return httpapi.NotFound("evidence")
	}
	if err != nil {
		return err
	}
	hd := c.Writer.Header()
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(it.Path)}))
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	hd.Set("Cache-Control", "private, max-age=300")
	hd.Set("ETag", strconv.Quote(it.SHA256))
	hd.Set("X-Evidence-SHA256", it.SHA256)
	c.Data(http.StatusOK, it.ContentType, data)
	return nil
}
