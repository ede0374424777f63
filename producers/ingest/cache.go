package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// routedTrigger is what ingest needs of a trigger to verify and route a
// webhook addressed to its path.
type routedTrigger struct {
	id, orgID, provider, triggerType string
	integrationID                    *string
	// secret is the opened webhook secret; nil when it could not be opened.
	secret []byte
}

// routeCache keeps resolved webhook paths (and paths with no trigger) for a
// short time, so a burst of deliveries to one trigger costs one query and
// one decryption. It is bounded: when full, expired entries are dropped, and
// if none were, everything is.
type routeCache struct {
	ttl     time.Duration
	mu      sync.RWMutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	t   *routedTrigger // nil: no such path
	exp time.Time
}

const maxCacheEntries = 10_000

func newRouteCache(ttl time.Duration) *routeCache {
	return &routeCache{ttl: ttl, entries: map[string]cacheEntry{}}
}

func (c *routeCache) get(path string, now time.Time) (*routedTrigger, bool) {
	if c.ttl <= 0 {
		return nil, false
	}
	c.mu.RLock()
	e, ok := c.entries[path]
	c.mu.RUnlock()
	if !ok || !now.Before(e.exp) {
		return nil, false
	}
	return e.t, true
}

func (c *routeCache) put(path string, t *routedTrigger, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCacheEntries {
		for k, e := range c.entries {
			if !now.Before(e.exp) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCacheEntries {
			clear(c.entries)
		}
	}
	c.entries[path] = cacheEntry{t: t, exp: now.Add(c.ttl)}
}

// lookupTimeout bounds the routing query; past it the request gets 503.
const lookupTimeout = 2 * time.Second

// lookupTrigger returns the trigger whose webhook_path is path, nil when there
// is none. An error means the database could not answer.
func (s *Server) lookupTrigger(ctx context.Context, path string) (*routedTrigger, error) {
	now := time.Now()
	if t, ok := s.cache.get(path, now); ok {
		return t, nil
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	r, err := triggersdb.New(s.d.Pool).WebhookTrigger(ctx, path)
	t := routedTrigger{id: r.ID, orgID: r.OrgID, provider: r.Provider, triggerType: r.TriggerType, integrationID: r.IntegrationID}
	sealed := r.WebhookSecretSealed
	if errors.Is(err, pgx.ErrNoRows) {
		s.cache.put(path, nil, now)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	secret, err := s.d.Box.Open(sealed, []byte("trigger-webhook:"+t.id))
	if err != nil {
		s.d.Log.Error("ingest: cannot open a trigger's webhook secret", "trigger_id", t.id, "err", err)
	} else {
		t.secret = secret
	}
	s.cache.put(path, &t, now)
	return &t, nil
}
