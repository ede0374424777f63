package integrations

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// OAuth state lifetimes: the Slack flow is a quick redirect (5 minutes as in
// the original); installing a GitHub App may involve choosing repositories.
const (
	slackStateTTL  = 5 * time.Minute
	githubStateTTL = 15 * time.Minute
)

// ErrBadState: the OAuth state is unknown, expired, already used, or was
// issued to another person or organization.
var ErrBadState = errors.New("integrations: invalid or expired state")

// oauthState is what a state value stands for. States live in Redis, keyed
// by their hash, and are consumed on first use (CSRF and replay protection).
type oauthState struct {
	Kind        string `json:"kind"`
	OrgID       string `json:"org_id"`
	UserID      string `json:"user_id"`
	RedirectURI string `json:"redirect_uri,omitempty"`
}

type stateStore struct{ rdb *redis.Client }

func stateKey(kind, state string) string {
	sum := sha256.Sum256([]byte(state))
	return "integrations:oauth-state:" + kind + ":" + hex.EncodeToString(sum[:])
}

// issue makes a fresh state for st.
func (s *stateStore) issue(ctx context.Context, st oauthState, ttl time.Duration) (string, error) {
	if s.rdb == nil {
		return "", errors.New("integrations: redis is required for OAuth state")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	state := base64.RawURLEncoding.EncodeToString(b)
	raw, _ := json.Marshal(st)
	if err := s.rdb.Set(ctx, stateKey(st.Kind, state), raw, ttl).Err(); err != nil {
		return "", err
	}
	return state, nil
}

// consume returns and deletes the state; it must have been issued for kind to
// this person in this organization.
func (s *stateStore) consume(ctx context.Context, kind, state, orgID, userID string) (oauthState, error) {
	if s.rdb == nil || state == "" {
		return oauthState{}, ErrBadState
	}
	raw, err := s.rdb.GetDel(ctx, stateKey(kind, state)).Bytes()
	if errors.Is(err, redis.Nil) {
		return oauthState{}, ErrBadState
	}
	if err != nil {
		return oauthState{}, err
	}
	var st oauthState
	if json.Unmarshal(raw, &st) != nil || st.Kind != kind || st.OrgID != orgID || st.UserID != userID {
		return oauthState{}, ErrBadState
	}
	return st, nil
}
