package identity

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
)

// lastUsedResolution is how stale api_keys.last_used_at may get: a busy key
// writes its row at most once per interval, not once per request.
const lastUsedResolution = time.Minute

const apiKeyColumns = `id::text, name, prefix, org_id::text, created_at, last_used_at, expires_at`

func scanAPIKey(row pgx.Row) (APIKey, error) {
	var k APIKey
	err := row.Scan(&k.ID, &k.Name, &k.Prefix, &k.OrgID, &k.CreatedAt, &k.LastUsedAt, &k.ExpiresAt)
	return k, err
}

func (h *handler) createAPIKey(c *api.Ctx) error {
	p := c.Principal()
	// A key cannot mint keys: a leaked key must not be able to outlive its
	// own revocation by creating successors.
	if p.Kind != auth.KindUser {
		return httpapi.Forbidden("API keys are created with a login session, not with another API key")
	}
	var req CreateAPIKeyRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := allow(c, h.apiKeyCreate, p.UserID); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if req.OrgID != nil {
		var member bool
		err := h.s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM members WHERE org_id = $1 AND user_id = $2)`,
			*req.OrgID, p.UserID).Scan(&member)
		if err != nil {
			return err
		}
		if !member {
			return httpapi.NotFound("organization")
		}
	}
	now := h.s.Now()
	var expires *time.Time
	if req.ExpiresInDays != nil {
		expires = new(now.Add(time.Duration(*req.ExpiresInDays) * 24 * time.Hour))
	}
	var out CreatedAPIKey
	err := pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		// Serialise one person's creations so the cap holds under concurrency.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, p.UserID); err != nil {
			return err
		}
		var active int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE user_id = $1 AND revoked_at IS NULL
			AND (expires_at IS NULL OR expires_at > $2)`, p.UserID, now).Scan(&active); err != nil {
			return err
		}
		if active >= MaxActiveAPIKeys {
			return httpapi.Conflict("api_key_limit", "you have the maximum number of API keys; revoke one first")
		}
		for range 5 { // a prefix collision (54 random bits) is practically impossible; retry anyway
			key := identity.NewSecret(identity.APIKeyPrefix)
			k, err := scanAPIKey(tx.QueryRow(ctx, `INSERT INTO api_keys (user_id, org_id, name, prefix, key_hash, expires_at, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (prefix) DO NOTHING RETURNING `+apiKeyColumns,
				p.UserID, req.OrgID, strings.TrimSpace(req.Name), key[:identity.APIKeyDisplayLen], identity.HashSecret(key), expires, now))
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			out = CreatedAPIKey{APIKey: k, Key: key}
			_, err = tx.Exec(ctx, `INSERT INTO audit_log (org_id, actor_id, action, target_type, target_id, details, request_id)
				VALUES ($1, $2, 'api_key.create', 'api_key', $3, jsonb_build_object('name', $4::text, 'prefix', $5::text), $6)`,
				req.OrgID, p.UserID, k.ID, k.Name, k.Prefix, c.RequestID())
			if err != nil {
				return err
			}
			// The key's organization's audit trail: id, name and prefix,
			// never the key.
			return audit.Emit(ctx, tx, audit.Event{OrgID: deref(req.OrgID), Action: "api_key.create", TargetType: "api_key", TargetID: k.ID,
				Details: map[string]any{"name": k.Name, "prefix": k.Prefix}, Actor: audit.ActorFrom(ctx)})
		}
		return errors.New("identity: could not allocate an API key prefix")
	})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusCreated, out)
}

func (h *handler) listAPIKeys(c *api.Ctx) error {
	pg, err := c.Page()
	if err != nil {
		return err
	}
	if pg.After != nil && !api.IsUUID(pg.After.ID) {
		return httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
	}
	at, id := pg.CursorArgs()
	rows, err := h.s.Pool.Query(c.Request.Context(), `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE user_id = $1 AND revoked_at IS NULL AND (created_at, id) < ($2, $3::uuid)
		ORDER BY created_at DESC, id DESC LIMIT $4`, c.UserID(), at, id, pg.Limit+1)
	if err != nil {
		return err
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) { return scanAPIKey(r) })
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(keys, pg.Limit, func(k APIKey) (time.Time, string) { return k.CreatedAt, k.ID }))
}

func (h *handler) deleteAPIKey(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "API key")
	if err != nil {
		return err
	}
	p := c.Principal()
	ctx := c.Request.Context()
	err = pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		var orgID *string
		var prefix string
		// Someone else's key id is indistinguishable from a missing one.
		err := tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = $3 WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL
			RETURNING org_id::text, prefix`, id, p.UserID, h.s.Now()).Scan(&orgID, &prefix)
		if errors.Is(err, pgx.ErrNoRows) {
			return httpapi.NotFound("API key")
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO audit_log (org_id, actor_id, action, target_type, target_id, details, request_id)
			VALUES ($1, $2, 'api_key.revoke', 'api_key', $3, jsonb_build_object('prefix', $4::text), $5)`,
			orgID, p.UserID, id, prefix, c.RequestID())
		if err != nil {
			return err
		}
		return audit.Emit(ctx, tx, audit.Event{OrgID: deref(orgID), Action: "api_key.revoke", TargetType: "api_key", TargetID: id,
			Details: map[string]any{"prefix": prefix}, Actor: audit.ActorFrom(ctx)})
	})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}

// apiKeyVerifier accepts pk_ keys: the row is found by the key's clear prefix
// and the SHA-256 of the whole key compared in constant time; revoked and
// expired keys are refused. The person is then resolved like any other, so a
// deleted user's keys stop working with them.
func (h *handler) apiKeyVerifier(ctx context.Context, bearer string) (*auth.Principal, bool, error) {
	if !strings.HasPrefix(bearer, identity.APIKeyPrefix) {
		return nil, false, nil
	}
	if !identity.WellFormed(bearer, identity.APIKeyPrefix) {
		return nil, true, auth.ErrUnauthenticated
	}
	var id, userID, hash string
	var orgID *string
	var expires, revoked, lastUsed *time.Time
	err := h.s.Pool.QueryRow(ctx, `SELECT id::text, user_id::text, org_id::text, key_hash, expires_at, revoked_at, last_used_at
		FROM api_keys WHERE prefix = $1`, bearer[:identity.APIKeyDisplayLen]).
		Scan(&id, &userID, &orgID, &hash, &expires, &revoked, &lastUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, true, auth.ErrUnauthenticated
	}
	if err != nil {
		return nil, true, err
	}
	now := h.s.Now()
	if subtle.ConstantTimeCompare([]byte(identity.HashSecret(bearer)), []byte(hash)) != 1 ||
		revoked != nil || (expires != nil && !now.Before(*expires)) {
		return nil, true, auth.ErrUnauthenticated
	}
	if lastUsed == nil || now.Sub(*lastUsed) >= lastUsedResolution {
		// The condition repeats in SQL so concurrent requests on several
		// replicas still write once per interval.
		if _, err := h.s.Pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $2 WHERE id = $1
			AND (last_used_at IS NULL OR last_used_at <= $3)`, id, now, now.Add(-lastUsedResolution)); err != nil {
			h.s.Log.Warn("identity: updating api_keys.last_used_at failed", "api_key_id", id, "error", err)
		}
	}
	p := &auth.Principal{Kind: auth.KindAPIKey, UserID: userID, APIKeyID: id}
	if err := h.s.ResolvePerson(ctx, p); err != nil {
		return nil, true, err
	}
	if orgID != nil {
		// An org-scoped key acts in its organization, with the person's
		// current role there (none if they left it).
		p.OrgID, p.Role = "", ""
		var role string
		err := h.s.Pool.QueryRow(ctx, `SELECT role FROM members WHERE org_id = $1 AND user_id = $2`, *orgID, userID).Scan(&role)
		if err == nil {
			p.OrgID, p.Role = *orgID, auth.Role(role)
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return nil, true, err
		}
	}
	return p, true, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
