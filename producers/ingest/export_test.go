package ingest

import (
	"io"
	"net/http"

	"github.com/proliferate/proliferate/internal/httpapi"
)

// AddBaselineRoute registers a no-op webhook route on the server's own mux
// for the benchmark baseline: the same body handling (size-limited read) and
// the same JSON answer as a webhook route, without verification or produce.
func (s *Server) AddBaselineRoute(pattern string) {
	max := int64(s.d.Cfg.IngestMaxBodyBytes)
	s.mux.Handle("POST "+pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max)); err != nil {
			writeError(w, errBadBody("could not read the request body"))
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, acceptedBody{Status: "accepted", EventID: "00000000-0000-7000-8000-000000000000"})
	}))
}
