package identity

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// lastUsedResolution is how stale api_keys.last_used_at may get: a busy key
// writes its row at most once per interval, not once per request.
const lastUsedResolution = time.Minute

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
		member, err := orgsdb.New(h.s.Pool).MembershipExists(ctx, orgsdb.MembershipExistsParams{OrgID: *req.OrgID, UserID: p.UserID})
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
		q := identitydb.New(tx)
		// Serialise one person's creations so the cap holds under concurrency.
		if err := q.LockUser(ctx, p.UserID); err != nil {
			return err
		}
		active, err := q.CountActiveAPIKeys(ctx, identitydb.CountActiveAPIKeysParams{UserID: p.UserID, Now: now})
		if err != nil {
			return err
		}
		if active >= MaxActiveAPIKeys {
			return httpapi.Conflict("api_key_limit", "you have the maximum number of API keys; revoke one first")
		}
		for range 5 { // a prefix collision (54 random bits) is practically impossible; retry anyway
			key := identity.NewSecret(identity.APIKeyPrefix)
			row, err := q.InsertAPIKey(ctx, identitydb.InsertAPIKeyParams{UserID: p.UserID, OrgID: req.OrgID, Name: strings.TrimSpace(req.Name),
				Prefix: key[:identity.APIKeyDisplayLen], KeyHash: identity.HashSecret(key), ExpiresAt: expires, CreatedAt: now})
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			k := APIKey(row)
			out = CreatedAPIKey{APIKey: k, Key: key}
			details, err := json.Marshal(map[string]string{"name": k.Name, "prefix": k.Prefix})
			if err != nil {
				return err
			}
			err = auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{OrgID: req.OrgID, ActorID: &p.UserID, Action: "api_key.create",
				TargetType: "api_key", TargetID: k.ID, Details: details, RequestID: c.RequestID()})
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
	rows, err := identitydb.New(h.s.Pool).ListAPIKeys(c.Request.Context(), identitydb.ListAPIKeysParams{UserID: c.UserID(),
		CursorAt: at, CursorID: id, MaxRows: int32(pg.Limit + 1)})
	if err != nil {
		return err
	}
	keys := make([]APIKey, len(rows))
	for i, r := range rows {
		keys[i] = APIKey(r)
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
		// Someone else's key id is indistinguishable from a missing one.
		k, err := identitydb.New(tx).RevokeAPIKey(ctx, identitydb.RevokeAPIKeyParams{ID: id, UserID: p.UserID, Now: h.s.Now()})
		if errors.Is(err, pgx.ErrNoRows) {
			return httpapi.NotFound("API key")
		}
		if err != nil {
			return err
		}
		details, err := json.Marshal(map[string]string{"prefix": k.Prefix})
		if err != nil {
			return err
		}
		err = auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{OrgID: k.OrgID, ActorID: &p.UserID, Action: "api_key.revoke",
			TargetType: "api_key", TargetID: id, Details: details, RequestID: c.RequestID()})
		if err != nil {
			return err
		}
		return audit.Emit(ctx, tx, audit.Event{OrgID: deref(k.OrgID), Action: "api_key.revoke", TargetType: "api_key", TargetID: id,
			Details: map[string]any{"prefix": k.Prefix}, Actor: audit.ActorFrom(ctx)})
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
	k, err := identitydb.New(h.s.Pool).APIKeyByPrefix(ctx, bearer[:identity.APIKeyDisplayLen])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, true, auth.ErrUnauthenticated
	}
	if err != nil {
		return nil, true, err
	}
	now := h.s.Now()
	if subtle.ConstantTimeCompare([]byte(identity.HashSecret(bearer)), []byte(k.KeyHash)) != 1 ||
		k.RevokedAt != nil || (k.ExpiresAt != nil && !now.Before(*k.ExpiresAt)) {
		return nil, true, auth.ErrUnauthenticated
	}
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= lastUsedResolution {
		// The condition repeats in SQL so concurrent requests on several
		// replicas still write once per interval.
		if err := identitydb.New(h.s.Pool).TouchAPIKey(ctx, identitydb.TouchAPIKeyParams{ID: k.ID, Now: now,
			StaleBefore: now.Add(-lastUsedResolution)}); err != nil {
			h.s.Log.Warn("identity: updating api_keys.last_used_at failed", "api_key_id", k.ID, "error", err)
		}
	}
	p := &auth.Principal{Kind: auth.KindAPIKey, UserID: k.UserID, APIKeyID: k.ID}
	if err := h.s.ResolvePerson(ctx, p); err != nil {
		return nil, true, err
	}
	if k.OrgID != nil {
		// An org-scoped key acts in its organization, with the person's
		// current role there (none if they left it).
		p.OrgID, p.Role = "", ""
		role, err := orgsdb.New(h.s.Pool).MembershipRole(ctx, orgsdb.MembershipRoleParams{OrgID: *k.OrgID, UserID: k.UserID})
		if err == nil {
			p.OrgID, p.Role = *k.OrgID, auth.Role(role)
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
