package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Session environment.
//
// At every boot (a resume included) the hub asks Deps.Env for the
// session's variables and env files (the org's secrets that apply to the
// session's configuration and repos, decrypted) and hands them to the
// provider in the sandbox spec; nothing of them is logged, broadcast or
// stored elsewhere, so rotating or deleting a secret applies at the next
// boot.
//
// request_env_variables blocks the agent's tool call until a member of
// the session submits the values (SubmitEnv: the REST route or the
// WebSocket message submit_env) or Deps.EnvRequestTimeout passes. The
// request is broadcast as env_request {tool_call_id, request} and its end
// as env_resolved {tool_call_id, status: submitted | timed_out |
// cancelled, keys, results}; neither carries a value. Submitted values are
// written into the sandbox (sandbox.EnvWriter: the runtime env file the
// agent's shell commands source, and optionally a dotenv file in the
// workspace) and, per value, optionally stored as an org or repo secret.

// DefaultEnvRequestTimeout is Deps.EnvRequestTimeout's default.
const DefaultEnvRequestTimeout = 5 * time.Minute

// EnvSource resolves a session's environment and stores submitted values.
type EnvSource interface {
	// Boot returns the session's variables and env files for a boot.
	Boot(ctx context.Context, s sessions.Session) (map[string]string, []sandbox.EnvFile, error)
	// Repos lists the repos a submitted value may be saved to (the
	// session's configuration's).
	Repos(ctx context.Context, s sessions.Session) ([]string, error)
	// Save stores submitted values as secrets (all or nothing; existing
	// keys are reported, not changed).
	Save(ctx context.Context, s sessions.Session, userID string, items []secrets.SubmittedSecret) ([]secrets.SaveResult, error)
}

// SecretsEnv is the EnvSource of the secrets store.
type SecretsEnv struct {
	DB  secrets.DB
	Box *secretbox.Box
}

func configurationID(s sessions.Session) string {
	if s.ConfigurationID == nil {
		return ""
	}
	return *s.ConfigurationID
}

// Boot implements EnvSource (secrets.ForSession).
func (e SecretsEnv) Boot(ctx context.Context, s sessions.Session) (map[string]string, []sandbox.EnvFile, error) {
	repos, err := secrets.SessionRepos(ctx, e.DB, s.OrgID, configurationID(s))
	if err != nil {
		return nil, nil, err
	}
	env, err := secrets.ForSession(ctx, e.DB, e.Box, s.OrgID, repos)
	if err != nil {
		return nil, nil, err
	}
	return env.Vars, env.Files, nil
}

// Repos implements EnvSource.
func (e SecretsEnv) Repos(ctx context.Context, s sessions.Session) ([]string, error) {
	repos, err := secrets.SessionRepos(ctx, e.DB, s.OrgID, configurationID(s))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(repos))
	for _, r := range repos {
		ids = append(ids, r.RepoID)
	}
	return ids, nil
}

// Save implements EnvSource (secrets.SaveSubmitted).
func (e SecretsEnv) Save(ctx context.Context, s sessions.Session, userID string, items []secrets.SubmittedSecret) ([]secrets.SaveResult, error) {
	return secrets.SaveSubmitted(ctx, e.DB, e.Box, s.OrgID, secrets.Actor{UserID: userID}, items)
}

// EnvKeySpec is one requested variable (the tool's arguments).
type EnvKeySpec struct {
	Key         string `json:"key"`
	Description string `json:"description,omitempty"`
	Type        string `json:"type,omitempty"` // env | secret
	Required    *bool  `json:"required,omitempty"`
	Suggestions []struct {
		Label        string `json:"label"`
		Value        string `json:"value,omitempty"`
		Instructions string `json:"instructions,omitempty"`
	} `json:"suggestions,omitempty"`
}

func (k EnvKeySpec) required() bool { return k.Required == nil || *k.Required }

// EnvRequest is the agent's request_env_variables call.
type EnvRequest struct {
	ToolCallID string
	Keys       []EnvKeySpec
}

// EnvAnswer is how an EnvRequest ended.
type EnvAnswer struct {
	// Status is protocol.EnvSubmitted or protocol.EnvTimedOut.
	Status string
	// Keys were submitted (sorted); their values are in the sandbox.
	Keys []string
	// Results say which were stored as secrets.
	Results []secrets.SaveResult
	// EnvFile is the workspace file the values were also written to ("").
	EnvFile string
	// Timeout is how long the request waited (protocol.EnvTimedOut).
	Timeout time.Duration
}

// Errors of SubmitEnv.
var (
	// ErrNoEnvRequest: no pending request of the session (or not that
	// tool call's).
	ErrNoEnvRequest = errors.New("hub: no pending environment request")
	// ErrEnvUnavailable: the sandbox cannot take the values now (not
	// running, or its provider cannot add variables to a running sandbox).
	ErrEnvUnavailable = errors.New("hub: the session's sandbox cannot take environment values now")
)

// EnvInvalidError is a submission that breaks a rule; nothing was changed.
type EnvInvalidError struct{ Problems []protocol.EnvProblem }

func (e *EnvInvalidError) Error() string {
	return fmt.Sprintf("hub: invalid environment submission (%d problems)", len(e.Problems))
}

// wireResults are the save results as the stream and the REST answer
// carry them (nil stays nil).
func wireResults(rs []secrets.SaveResult) []protocol.EnvSaveResult {
	if rs == nil {
		return nil
	}
	out := make([]protocol.EnvSaveResult, len(rs))
	for i, r := range rs {
		out[i] = protocol.EnvSaveResult{Key: r.Key, Persisted: r.Persisted, AlreadyExisted: r.AlreadyExisted}
	}
	return out
}

// envRequests are a hub's pending requests.
type envRequests struct {
	mu      sync.Mutex
	pending map[string]*pendingEnv // tool call id →
}

type pendingEnv struct {
	req  EnvRequest
	raw  json.RawMessage // the env_request frame's request
	done chan EnvAnswer  // buffered 1; written once, by whoever removes it
}

// take removes the pending request id (the one pending when id is "").
func (r *envRequests) take(id string, keep bool) (*pendingEnv, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == "" {
		if len(r.pending) > 1 {
			return nil, &EnvInvalidError{[]protocol.EnvProblem{{Field: "tool_call_id", Problem: "required: several environment requests are pending"}}}
		}
		for k := range r.pending {
			id = k
		}
	}
	p, ok := r.pending[id]
	if !ok {
		return nil, ErrNoEnvRequest
	}
	if !keep {
		delete(r.pending, id)
	}
	return p, nil
}

// Pending lists the pending requests' tool call ids (sorted).
func (h *Hub) PendingEnvRequests() []string {
	h.env.mu.Lock()
	defer h.env.mu.Unlock()
	return slices.Sorted(maps.Keys(h.env.pending))
}

// sendPendingEnv sends c the env_request frames of the pending requests.
func (h *Hub) sendPendingEnv(c Client) {
	h.env.mu.Lock()
	var msgs []protocol.EnvRequestMessage
	for _, id := range slices.Sorted(maps.Keys(h.env.pending)) {
		msgs = append(msgs, protocol.EnvRequestMessage{Type: protocol.MsgEnvRequest, ToolCallID: id, Request: h.env.pending[id].raw})
	}
	h.env.mu.Unlock()
	for _, m := range msgs {
		h.sendTo(c, m)
	}
}

// AwaitEnv surfaces req to the session's clients and waits for a member's
// submission (SubmitEnv) or Deps.EnvRequestTimeout. A ctx ending first
// (the sandbox gave up on the call) withdraws the request.
func (h *Hub) AwaitEnv(ctx context.Context, req EnvRequest) (EnvAnswer, error) {
	raw, err := json.Marshal(map[string]any{"keys": req.Keys})
	if err != nil {
		return EnvAnswer{}, err
	}
	p := &pendingEnv{req: req, raw: raw, done: make(chan EnvAnswer, 1)}
	h.env.mu.Lock()
	if h.env.pending == nil {
		h.env.pending = map[string]*pendingEnv{}
	}
	if _, dup := h.env.pending[req.ToolCallID]; dup {
		h.env.mu.Unlock()
		return EnvAnswer{}, fmt.Errorf("hub: environment request %s is already pending", req.ToolCallID)
	}
	h.env.pending[req.ToolCallID] = p
	h.env.mu.Unlock()
	h.Broadcast(protocol.EnvRequestMessage{Type: protocol.MsgEnvRequest, ToolCallID: req.ToolCallID, Request: raw})
	h.log.Info("hub: environment requested", "tool_call_id", req.ToolCallID, "keys", envKeys(req.Keys))

	timeout := h.m.d.EnvRequestTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	// end withdraws the request; false when a submission took it first
	// (its answer is then on p.done at once).
	end := func(status string) bool {
		if _, err := h.env.take(req.ToolCallID, false); err != nil {
			return false
		}
		h.Broadcast(protocol.EnvResolvedMessage{Type: protocol.MsgEnvResolved, ToolCallID: req.ToolCallID, Status: status})
		h.log.Info("hub: environment request ended", "tool_call_id", req.ToolCallID, "status", status)
		return true
	}
	select {
	case a := <-p.done:
		return a, nil
	case <-t.C:
		if !end(protocol.EnvTimedOut) {
			return <-p.done, nil
		}
		return EnvAnswer{Status: protocol.EnvTimedOut, Timeout: timeout}, nil
	case <-ctx.Done():
		if !end(protocol.EnvCancelled) {
			return <-p.done, nil
		}
		return EnvAnswer{}, ctx.Err()
	case <-h.life.Done():
		if !end(protocol.EnvCancelled) {
			return <-p.done, nil
		}
		return EnvAnswer{}, ErrClosed
	}
}

func envKeys(keys []EnvKeySpec) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.Key)
	}
	return out
}

// SubmitEnv answers a pending env request with a member's values: checked
// (keys requested, valid names, sizes, the env file path, repos of the
// session) before anything changes, stored as secrets where asked, written
// into the sandbox, then the agent's call returns. ErrForbidden unless the
// principal may act on the session; ErrNoEnvRequest; *EnvInvalidError;
// ErrEnvUnavailable.
func (h *Hub) SubmitEnv(ctx context.Context, p *auth.Principal, sub protocol.EnvSubmission) (protocol.EnvSubmitResult, error) {
	if !canMutate(h.Session(), p) {
		return protocol.EnvSubmitResult{}, ErrForbidden
	}
	pend, err := h.env.take(sub.ToolCallID, true)
	if err != nil {
		return protocol.EnvSubmitResult{}, err
	}
	sess := h.Session()
	var repos []string
	if h.m.d.Env != nil && slices.ContainsFunc(sub.Secrets, func(v protocol.EnvValue) bool { return v.RepoID != "" }) {
		if repos, err = h.m.d.Env.Repos(ctx, sess); err != nil {
			return protocol.EnvSubmitResult{}, err
		}
	}
	if probs := checkSubmission(pend.req, sub, repos); len(probs) > 0 {
		return protocol.EnvSubmitResult{}, &EnvInvalidError{probs}
	}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	w, ok := h.m.d.Provider.(sandbox.EnvWriter)
	if rt == nil || !ok {
		return protocol.EnvSubmitResult{}, ErrEnvUnavailable
	}
	vars := map[string]string{}
	var save []secrets.SubmittedSecret
	var file *sandbox.EnvFile
	if sub.EnvFile != "" {
		file = &sandbox.EnvFile{Path: sub.EnvFile}
	}
	for _, v := range sub.Secrets {
		h.addSecrets(v.Value) // never in the transcript
		vars[v.Key] = v.Value
		if v.Persist {
			save = append(save, secrets.SubmittedSecret{Key: v.Key, Value: v.Value, RepoID: v.RepoID})
		}
		if file != nil {
			file.Vars = append(file.Vars, sandbox.EnvVar{Key: v.Key, Value: v.Value})
		}
	}
	results := []secrets.SaveResult{}
	if len(save) > 0 {
		if h.m.d.Env == nil {
			return protocol.EnvSubmitResult{}, fmt.Errorf("hub: no secrets store to save submitted values")
		}
		if results, err = h.m.d.Env.Save(ctx, sess, p.UserID, save); err != nil {
			return protocol.EnvSubmitResult{}, fmt.Errorf("hub: save submitted values: %w", err)
		}
	}
	if err := w.WriteEnv(ctx, sess.ID, rt.sb.ID, vars, file); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return protocol.EnvSubmitResult{}, ErrEnvUnavailable
		}
		return protocol.EnvSubmitResult{}, fmt.Errorf("hub: write submitted values: %w", err)
	}
	keys := slices.Sorted(maps.Keys(vars))
	res := protocol.EnvSubmitResult{ToolCallID: pend.req.ToolCallID, Submitted: true, Keys: keys, Results: wireResults(results), EnvFile: sub.EnvFile}
	// Only the submission that removes the request answers it.
	if _, err := h.env.take(pend.req.ToolCallID, false); err != nil {
		return protocol.EnvSubmitResult{}, ErrNoEnvRequest
	}
	pend.done <- EnvAnswer{Status: protocol.EnvSubmitted, Keys: keys, Results: results, EnvFile: sub.EnvFile}
	h.Broadcast(protocol.EnvResolvedMessage{Type: protocol.MsgEnvResolved, ToolCallID: pend.req.ToolCallID, Status: protocol.EnvSubmitted,
		Keys: keys, Results: wireResults(results), EnvFile: sub.EnvFile})
	h.log.Info("hub: environment submitted", "tool_call_id", pend.req.ToolCallID, "keys", keys, "saved", len(save))
	return res, nil
}

// maxSubmittedValues bounds one submission.
const maxSubmittedValues = 50

// checkSubmission lists what makes sub unacceptable for req (never
// quoting a value).
func checkSubmission(req EnvRequest, sub protocol.EnvSubmission, repos []string) []protocol.EnvProblem {
	var probs []protocol.EnvProblem
	add := func(field, problem string) {
		probs = append(probs, protocol.EnvProblem{Field: field, Problem: problem})
	}
	requested := map[string]EnvKeySpec{}
	for _, k := range req.Keys {
		requested[k.Key] = k
	}
	if len(sub.Secrets) == 0 {
		add("secrets", "at least one value is required")
	}
	if len(sub.Secrets) > maxSubmittedValues {
		add("secrets", fmt.Sprintf("at most %d values", maxSubmittedValues))
	}
	seen := map[string]bool{}
	for i, v := range sub.Secrets {
		f := fmt.Sprintf("secrets[%d]", i)
		if err := secrets.ValidateKey(f+".key", v.Key); err != nil {
			var ie *secrets.InvalidError
			if errors.As(err, &ie) {
				add(ie.Field, ie.Problem)
			}
			continue
		}
		if !sandbox.SessionEnvAllowed(v.Key) {
			add(f+".key", "is a variable the sandbox sets itself")
			continue
		}
		if _, ok := requested[v.Key]; !ok {
			add(f+".key", "was not requested by the agent")
			continue
		}
		if seen[v.Key] {
			add(f+".key", "is given twice")
		}
		seen[v.Key] = true
		if err := secrets.ValidateValue(f+".value", v.Value); err != nil {
			var ie *secrets.InvalidError
			if errors.As(err, &ie) {
				add(ie.Field, ie.Problem)
			}
		}
		if v.RepoID != "" {
			if !v.Persist {
				add(f+".repo_id", "only applies when persist is true")
			} else if !slices.Contains(repos, v.RepoID) {
				add(f+".repo_id", "is not a repository of this session")
			}
		}
	}
	for _, k := range req.Keys {
		if k.required() && !seen[k.Key] && len(probs) == 0 {
			add("secrets", "the required key "+k.Key+" is missing")
		}
	}
	if sub.EnvFile != "" {
		if err := secrets.ValidateTargetPath("env_file", sub.EnvFile); err != nil {
			var ie *secrets.InvalidError
			if errors.As(err, &ie) {
				add(ie.Field, ie.Problem)
			}
		} else if err := sandbox.CheckEnvFilePath(sub.EnvFile); err != nil {
			add("env_file", "must be a relative path inside the workspace, outside .git")
		}
	}
	return probs
}

// handleSubmitEnv is the submit_env client message: the submitting client
// gets submit_env_result; everyone env_resolved.
func (h *Hub) handleSubmitEnv(ctx context.Context, c Client, p *auth.Principal, raw []byte) {
	var sub protocol.EnvSubmission
	if err := json.Unmarshal(raw, &sub); err != nil {
		h.sendTo(c, protocol.EnvSubmitResultMessage{Type: protocol.MsgEnvSubmitResult, Code: "invalid_message", Error: "submit_env: malformed fields"})
		return
	}
	res, err := h.SubmitEnv(ctx, p, sub)
	if err == nil {
		h.sendTo(c, protocol.EnvSubmitResultMessage{Type: protocol.MsgEnvSubmitResult, OK: true, Result: &res})
		return
	}
	msg := protocol.EnvSubmitResultMessage{Type: protocol.MsgEnvSubmitResult}
	var inv *EnvInvalidError
	switch {
	case errors.As(err, &inv):
		msg.Code, msg.Error, msg.Fields = "validation_failed", "the submission is invalid; nothing was changed", inv.Problems
	case errors.Is(err, ErrForbidden):
		msg.Code, msg.Error = "forbidden", "only the session's creator can do this"
	case errors.Is(err, ErrNoEnvRequest):
		msg.Code, msg.Error = "env_request_not_found", "no pending environment request with this tool_call_id"
	case errors.Is(err, ErrEnvUnavailable):
		msg.Code, msg.Error = "sandbox_unavailable", "the session's sandbox cannot take the values now"
	default:
		h.log.Error("hub: submit_env failed", "err", err)
		msg.Code, msg.Error = "submit_env_failed", "the submission failed; please retry"
	}
	h.sendTo(c, msg)
}
