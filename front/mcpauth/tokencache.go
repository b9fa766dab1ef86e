package mcpauth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// maxCachedTokens bounds each token cache.
const maxCachedTokens = 10000

// tokenCache remembers the principal of tokens already validated, by the
// token's SHA-256 (the token itself is not kept), so that a client
// presenting the same token on every call pays for its validation once:
// a JWT's signature check costs more than the rest of a create_ticket
// call's CPU in mcp-front, and an introspection is a round trip to the
// issuer.
type tokenCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]cached
}

type cached struct {
	p     Principal
	until time.Time // never past the token's exp
	gen   uint64    // the signing keys' generation the token verified under
}

func newTokenCache() *tokenCache { return &tokenCache{m: map[[sha256.Size]byte]cached{}} }

// get returns the principal cached for the token with digest sum, if it
// is still good at now under key generation gen.
func (tc *tokenCache) get(sum [sha256.Size]byte, now time.Time, gen uint64) (Principal, bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	c, ok := tc.m[sum]
	if !ok || !now.Before(c.until) || c.gen != gen {
		return Principal{}, false
	}
	return c.p, true
}

// put caches p until the earlier of until and its expiry. A full cache
// drops what is stale, and if that is not enough, everything: a flood of
// distinct tokens costs validations, never memory.
func (tc *tokenCache) put(sum [sha256.Size]byte, now time.Time, c cached) {
	if c.p.Expiry.Before(c.until) {
		c.until = c.p.Expiry
	}
	if !now.Before(c.until) {
		return
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.m) >= maxCachedTokens {
		for k, old := range tc.m {
			if !now.Before(old.until) {
				delete(tc.m, k)
			}
		}
		if len(tc.m) >= maxCachedTokens {
			clear(tc.m)
		}
	}
	tc.m[sum] = c
}
