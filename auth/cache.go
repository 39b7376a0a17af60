package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"sync"
	"time"
)

// DefaultCacheSize is how many verified tickets a Verifier remembers.
const DefaultCacheSize = 65536

// verifiedCache remembers tickets that verified, keyed by the SHA-256 of the
// ticket, until their exp (plus Leeway, as Verify allows). A gateway sees
// the same ticket on every call of a session, so a hit skips the Ed25519
// verification (~60-110 µs) for a hash and a map lookup (~1-2 µs). Only
// successful verifications are cached; a hit still checks that the key
// that verified the ticket is still the key its kid names, so a key
// withdrawn from the key source stops its cached tickets too.
type verifiedCache struct {
	mu  sync.Mutex
	max int
	m   map[[32]byte]*cachedTicket
}

type cachedTicket struct {
	claims Claims
	kid    string
	key    ed25519.PublicKey
	from   time.Time // nbf - Leeway: not valid before (a clock may go back)
	until  time.Time // exp + Leeway: not valid from then on
}

func newVerifiedCache(max int) *verifiedCache {
	if max <= 0 {
		return nil
	}
	return &verifiedCache{max: max, m: make(map[[32]byte]*cachedTicket)}
}

func (c *verifiedCache) get(h [32]byte, now time.Time) *cachedTicket {
	c.mu.Lock()
	e := c.m[h]
	if e != nil && !now.Before(e.until) {
		delete(c.m, h)
		e = nil
	}
	c.mu.Unlock()
	if e != nil && now.Before(e.from) {
		return nil // verify it in full, which says why
	}
	return e
}

func (c *verifiedCache) put(h [32]byte, e *cachedTicket, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		// Drop expired entries; if that frees too little, drop an eighth of
		// the entries at random (map order).
		for k, v := range c.m {
			if !now.Before(v.until) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.max-c.max/8 {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[h] = e
}

func ticketHash(ticket string) [32]byte { return sha256.Sum256([]byte(ticket)) }
