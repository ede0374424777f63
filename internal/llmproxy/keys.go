package llmproxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/llmproxy/llmproxydb"
)

// RevokedChannel is the Redis channel on which revocations are broadcast:
// each message is the space-separated hex SHA-256 hashes of revoked keys, and
// every proxy replica evicts them from its cache on receipt.
const RevokedChannel = "llmproxy:revoked"

// KeyPrefix starts every key the built-in proxy issues.
const KeyPrefix = "sk-prlf-"

// DefaultKeyDuration is a key's lifetime when KeysDeps.Duration is zero.
const DefaultKeyDuration = 24 * time.Hour

// KeysDeps configures Keys.
type KeysDeps struct {
	Pool *pgxpool.Pool
	// Redis broadcasts revocations to the proxies; nil broadcasts nothing
	// (proxies then notice within their cache TTL).
	Redis *redis.Client
	// PublicURL is the proxy's base URL as sandboxes reach it (Key.BaseURL
	// is PublicURL + "/v1").
	PublicURL string
	// Duration is a key's lifetime (default 24h).
	Duration time.Duration
	// BillingEnabled bounds each key by the organization's balance and
	// refuses keys to organizations without credits.
	BillingEnabled bool
	Now            func() time.Time
	Logger         *slog.Logger
}

// Keys issues and revokes the built-in proxy's virtual keys (table
// llm_virtual_keys). Only a key's SHA-256 hash is stored. It implements
// llmkeys.Issuer.
type Keys struct {
	d       KeysDeps
	baseURL string
}

var _ llmkeys.Issuer = (*Keys)(nil)

// NewKeys returns the issuer.
func NewKeys(d KeysDeps) (*Keys, error) {
	if d.Pool == nil {
		return nil, errors.New("llmproxy: keys need a Postgres pool")
	}
	if d.PublicURL == "" {
		return nil, errors.New("llmproxy: keys need the proxy's public URL")
	}
	if d.Duration <= 0 {
		d.Duration = DefaultKeyDuration
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	base := strings.TrimRight(d.PublicURL, "/")
	base = strings.TrimSuffix(base, "/v1")
	return &Keys{d: d, baseURL: base + "/v1"}, nil
}

// HashKey is the stored form of a key.
func HashKey(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// Issue creates a key for the session, bounded by the organization's balance
// when billing is enabled.
func (k *Keys) Issue(ctx context.Context, orgID, sessionID string) (llmkeys.Key, error) {
	if _, err := uuid.Parse(orgID); err != nil {
		return llmkeys.Key{}, fmt.Errorf("llmproxy: issue key: organization id %q: %w", orgID, err)
	}
	if _, err := uuid.Parse(sessionID); err != nil {
		return llmkeys.Key{}, fmt.Errorf("llmproxy: issue key: session id %q: %w", sessionID, err)
	}
	var budget *int64
	if k.d.BillingEnabled {
		b, err := llmkeys.OrgBudget(ctx, k.d.Pool, orgID)
		if err != nil {
			return llmkeys.Key{}, fmt.Errorf("llmproxy: issue key: %w", err)
		}
		budget = &b
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return llmkeys.Key{}, fmt.Errorf("llmproxy: issue key: random: %w", err)
	}
	value := KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	hash := HashKey(value)
	expires := k.d.Now().Add(k.d.Duration).UTC().Truncate(time.Microsecond)
	err := llmproxydb.New(k.d.Pool).InsertKey(ctx, llmproxydb.InsertKeyParams{
		KeyHash: hash[:], KeyPrefix: value[:12], OrgID: orgID, SessionID: sessionID, KeyAlias: sessionID,
		MaxBudgetMicros: budget, ExpiresAt: expires,
	})
	if err != nil {
		return llmkeys.Key{}, fmt.Errorf("llmproxy: issue key for session %s: %w", sessionID, err)
	}
	out := llmkeys.Key{Value: value, BaseURL: k.baseURL, ExpiresAt: expires}
	if budget != nil {
		out.MaxBudgetUSDMicros = *budget
	}
	return out, nil
}

// RevokeSession revokes every live key of the session.
func (k *Keys) RevokeSession(ctx context.Context, sessionID, reason string) error {
	if _, err := uuid.Parse(sessionID); err != nil {
		return fmt.Errorf("llmproxy: revoke keys: session id %q: %w", sessionID, err)
	}
	return k.revoke(ctx, "session_id", sessionID, reason)
}

// RevokeOrg revokes every live key of the organization's sessions.
func (k *Keys) RevokeOrg(ctx context.Context, orgID, reason string) error {
	if _, err := uuid.Parse(orgID); err != nil {
		return fmt.Errorf("llmproxy: revoke keys: organization id %q: %w", orgID, err)
	}
	return k.revoke(ctx, "org_id", orgID, reason)
}

// revoke marks the live keys revoked, then broadcasts their hashes. The
// database is the truth: a failed broadcast is logged, not returned (the
// keys are revoked; proxies that missed it refuse them once their cache
// entry expires, and a proxy whose subscription drops flushes its cache
// when it resubscribes).
func (k *Keys) revoke(ctx context.Context, column, id, reason string) error {
	q := llmproxydb.New(k.d.Pool)
	var hashes [][]byte
	var err error
	if column == "org_id" {
		hashes, err = q.RevokeOrgKeys(ctx, llmproxydb.RevokeOrgKeysParams{OrgID: id, Now: k.d.Now(), Reason: reason})
	} else {
		hashes, err = q.RevokeSessionKeys(ctx, llmproxydb.RevokeSessionKeysParams{SessionID: id, Now: k.d.Now(), Reason: reason})
	}
	if err != nil {
		return fmt.Errorf("llmproxy: revoke keys of %s %s: %w", column, id, err)
	}
	if len(hashes) == 0 || k.d.Redis == nil {
		return nil
	}
	hexes := make([]string, len(hashes))
	for i, h := range hashes {
		hexes[i] = hex.EncodeToString(h)
	}
	if err := k.d.Redis.Publish(ctx, RevokedChannel, strings.Join(hexes, " ")).Err(); err != nil {
		k.d.Logger.Error("llm-proxy: broadcasting key revocation failed; proxies refuse the keys when their cache entries expire",
			column, id, "keys", len(hashes), "err", err)
	}
	return nil
}
