package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/proliferate/proliferate/internal/httpapi"
)

// Bind decodes the JSON body into v strictly: the content type must be JSON,
// the body must fit the size limit, unknown fields and trailing data are
// rejected, then `binding:"…"` tags and Validate run. Every problem is a
// precise 4xx; nothing has been written when Bind fails.
func (c *Ctx) Bind(v any) error {
	ct := c.GetHeader("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return &httpapi.Error{Status: http.StatusUnsupportedMediaType, Code: httpapi.CodeUnsupportedMedia, Message: "Content-Type must be application/json"}
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &httpapi.Error{Status: http.StatusRequestEntityTooLarge, Code: httpapi.CodeBodyTooLarge,
				Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
		}
		return httpapi.BadRequest("could not read request body")
	}
	return httpapi.DecodeJSON(body, v)
}
