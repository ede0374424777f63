package runs

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/google/uuid"
)

// SessionRequest asks for the session of a run (client type automation,
// sandbox started immediately).
type SessionRequest struct {
	// IdempotencyKey is run:{run id}:session: asking twice gives the same
	// session.
	IdempotencyKey string
	OrgID          string
	RunID          string
	AutomationID   string
	// ConfigurationID is the configuration target resolution chose; nil
	// means a scratch workspace.
	ConfigurationID *string
	ModelID         string
	Title           string
	// TriggeredBy is the person who started a manual run, if any.
	TriggeredBy *string
}

// SessionState is what the finalizer learns about a run's session.
type SessionState struct {
	// Exists is false when the session is gone (deleted, never created).
	Exists bool
	// Status is the stored session status: starting, running, paused,
	// stopped or failed.
	Status string
	// SandboxAlive is false when the session's sandbox is known to be dead.
	SandboxAlive bool
}

// Sessions is how the run pipeline starts and watches agent sessions. The
// gateway's client implements it; RecordingSessions stands in until then and
// in tests.
type Sessions interface {
	// CreateSession creates (or, for a known idempotency key, returns) the
	// session of a run.
	CreateSession(ctx context.Context, req SessionRequest) (sessionID string, err error)
	// SendPrompt sends the run's prompt once per idempotency key.
	SendPrompt(ctx context.Context, orgID, sessionID, prompt, idempotencyKey string) error
	// SessionState reports on a session.
	SessionState(ctx context.Context, orgID, sessionID string) (SessionState, error)
}

// ErrSessionRejected wraps a session request the gateway refused for good
// (invalid configuration, limits): the run fails instead of retrying.
var ErrSessionRejected = errors.New("session request rejected")

// RecordedSession is one session RecordingSessions was asked for.
type RecordedSession struct {
	ID      string
	Request SessionRequest
	// Prompts are the prompts sent, in order, one per idempotency key.
	Prompts []string
	State   SessionState
}

// RecordingSessions implements Sessions by recording requests in memory:
// the same idempotency key gives the same session id (a UUID derived from
// the key, so it is stable across restarts), and each prompt idempotency key
// is recorded once. Sessions report running with a live sandbox until
// SetState says otherwise.
type RecordingSessions struct {
	Log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*RecordedSession // by id
	order    []string
	prompted map[string]bool
	fail     error
}

// NewRecordingSessions returns an empty recorder.
func NewRecordingSessions(log *slog.Logger) *RecordingSessions {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RecordingSessions{Log: log, sessions: map[string]*RecordedSession{}, prompted: map[string]bool{}}
}

var sessionNamespace = uuid.MustParse("6f1c63e4-7a43-4f6b-9a8e-5d0c2b1e9a77")

// CreateSession implements Sessions.
func (s *RecordingSessions) CreateSession(_ context.Context, req SessionRequest) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return "", s.fail
	}
	id := uuid.NewSHA1(sessionNamespace, []byte(req.OrgID+"/"+req.IdempotencyKey)).String()
	if _, ok := s.sessions[id]; !ok {
		s.sessions[id] = &RecordedSession{ID: id, Request: req, State: SessionState{Exists: true, Status: "running", SandboxAlive: true}}
		s.order = append(s.order, id)
		s.Log.Info("recorded session request (no gateway in this build: nothing runs the agent)",
			"session_id", id, "run_id", req.RunID, "idempotency_key", req.IdempotencyKey)
	}
	return id, nil
}

// SendPrompt implements Sessions.
func (s *RecordingSessions) SendPrompt(_ context.Context, _, sessionID, prompt, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.sessions[sessionID]
	if !ok {
		return errors.New("recording sessions: no such session " + sessionID)
	}
	if !s.prompted[key] {
		s.prompted[key] = true
		rs.Prompts = append(rs.Prompts, prompt)
	}
	return nil
}

// SessionState implements Sessions. Unknown ids (e.g. after a restart) are
// reported as gone.
func (s *RecordingSessions) SessionState(_ context.Context, _, sessionID string) (SessionState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs, ok := s.sessions[sessionID]; ok {
		return rs.State, nil
	}
	return SessionState{}, nil
}

// SetState changes what SessionState reports for a session.
func (s *RecordingSessions) SetState(sessionID string, st SessionState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs, ok := s.sessions[sessionID]; ok {
		rs.State = st
	}
}

// FailWith makes CreateSession fail with err (nil: succeed again).
func (s *RecordingSessions) FailWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// Recorded returns copies of the recorded sessions in creation order.
func (s *RecordingSessions) Recorded() []RecordedSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RecordedSession, 0, len(s.order))
	for _, id := range s.order {
		rs := *s.sessions[id]
		rs.Prompts = append([]string(nil), rs.Prompts...)
		out = append(out, rs)
	}
	return out
}
