package llmproxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/proliferate/proliferate/internal/llmproxy/llmproxydb"
)

// keyInfo is a key's row as the proxy needs it. spend counts up locally as
// this replica records requests, so its own budget checks are immediate;
// other replicas' spend is seen when the entry is reloaded.
type keyInfo struct {
	found     bool // false: no such key (cached briefly, too)
	hash      [32]byte
	id        string
	orgID     string
	sessionID string
	limited   bool  // has a budget
	budget    int64 // USD micros, when limited
	spend     atomic.Int64
	expiresAt time.Time
	revoked   bool
	loadedAt  time.Time
}

// keyCache maps key hashes to their rows for ttl, bounded in size. Every
// eviction bumps epoch, and a load that started before an eviction does not
// store its (possibly stale) result: a revoked key cannot re-enter the cache
// from a read that raced the revocation.
type keyCache struct {
	ttl  time.Duration
	size int

	mu      sync.Mutex
	entries map[[32]byte]*keyInfo
	epoch   uint64
}

func newKeyCache(ttl time.Duration, size int) *keyCache {
	return &keyCache{ttl: ttl, size: size, entries: map[[32]byte]*keyInfo{}}
}

// get returns a fresh entry, or nil and the epoch a load must present to put.
func (c *keyCache) get(h [32]byte, now time.Time) (*keyInfo, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[h]; ok && now.Sub(e.loadedAt) < c.ttl {
		return e, c.epoch
	}
	return nil, c.epoch
}

func (c *keyCache) put(h [32]byte, e *keyInfo, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return
	}
	if _, ok := c.entries[h]; !ok && len(c.entries) >= c.size {
		// Drop an arbitrary tenth: cheap, and a dropped entry only costs a
		// reload.
		n := max(c.size/10, 1)
		for k := range c.entries {
			delete(c.entries, k)
			if n--; n == 0 {
				break
			}
		}
	}
	c.entries[h] = e
}

func (c *keyCache) evict(hs ...[32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for _, h := range hs {
		delete(c.entries, h)
	}
}

func (c *keyCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	clear(c.entries)
}

// lookup returns the key's row, from the cache or Postgres.
func (p *Proxy) lookup(ctx context.Context, h [32]byte) (*keyInfo, error) {
	now := p.d.Now()
	e, epoch := p.cache.get(h, now)
	if e != nil {
		return e, nil
	}
	e = &keyInfo{hash: h, loadedAt: now}
	// What this replica billed but has not stored yet, read before the row:
	// a commit in between is then counted twice (refusing early, never
	// late), never missed.
	unstored := p.unstoredSpend(h)
	r, err := llmproxydb.New(p.d.Pool).KeyByHash(ctx, h[:])
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("llmproxy: look up key: %w", err)
	default:
		e.found = true
		e.id, e.orgID, e.sessionID, e.expiresAt, e.revoked = r.ID, r.OrgID, r.SessionID, r.ExpiresAt, r.Revoked
		e.spend.Store(r.SpendMicros + unstored)
		if r.MaxBudgetMicros != nil {
			e.limited, e.budget = true, *r.MaxBudgetMicros
		}
	}
	p.cache.put(h, e, epoch)
	return e, nil
}
