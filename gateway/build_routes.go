package gateway

import (
	"context"
	"net/http"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// Builds runs configuration builds (gateway/builds.Builder).
type Builds interface {
	// Dispatch claims build id and runs it in the background: false when
	// it was claimed already or has ended.
	Dispatch(ctx context.Context, id string) (bool, error)
}

func (s *Server) buildRoutes() {
	s.handle("POST /configuration-builds/{id}/run", s.runBuild)
}

// runBuild asks this gateway to run a configuration build the API
// recorded (platform services only): 202 with claimed=false when another
// request or gateway already runs it (nothing is built twice).
func (s *Server) runBuild(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, false)
	if err != nil {
		return err
	}
	if p.Kind != auth.KindService {
		return httpapi.Forbidden("configuration builds are run for the platform's services only")
	}
	id := r.PathValue("id")
	if !uuidRE.MatchString(id) {
		return httpapi.NotFound("configuration build")
	}
	if s.d.Builds == nil {
		return httpapi.Unavailable("this gateway does not run configuration builds")
	}
	claimed, err := s.d.Builds.Dispatch(r.Context(), id)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusAccepted, protocol.BuildDispatch{Claimed: claimed})
	return nil
}
