// Package loggate keeps repeated warnings out of the log: a Gate lets a
// warning about one key through at most once per interval and counts the
// ones it held back, and SDKLogger is the logger go-sdk gets, gated so.
package loggate

import (
	"sync"
	"time"
)

// Every is how often a warning about one key (a client, a limit, a message
// of go-sdk) is logged at most; the ones held back in between are counted
// in the next.
const Every = time.Minute

// Gate lets a warning about one key through at most once per interval
// and counts those it held back, for the next one to report. It remembers
// at most max keys: at most once per interval, a sweep forgets the keys
// whose interval has passed with nothing held back (the next warning about
// them passes anyway); a new key while max are held evicts a random one in
// constant time (its count of held-back warnings is lost).
type Gate struct {
	every     time.Duration
	max       int
	now       func() time.Time
	mu        sync.Mutex
	keys      map[string]*gateEntry
	lastSweep time.Time
}

type gateEntry struct {
	last time.Time
	held int
}

func New(every time.Duration, limit int, now func() time.Time) *Gate {
	return &Gate{every: every, max: limit, now: now, keys: map[string]*gateEntry{}}
}

// Pass reports whether a warning about key may be logged now and, if so, how
// many were held back since the last one.
func (g *Gate) Pass(key string) (ok bool, held int) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.lastSweep) >= g.every {
		for k, v := range g.keys {
			if now.Sub(v.last) >= g.every && v.held == 0 {
				delete(g.keys, k)
			}
		}
		g.lastSweep = now
	}
	e := g.keys[key]
	if e == nil {
		EvictOne(g.keys, g.max)
		g.keys[key] = &gateEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < g.every {
		e.held++
		return false, 0
	}
	held = e.held
	e.last, e.held = now, 0
	return true, held
}

// Len is the number of keys the gate remembers.
func (g *Gate) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys)
}

// Holds reports whether the gate remembers key.
func (g *Gate) Holds(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.keys[key]
	return ok
}

// EvictOne makes room for one more key in m, if it holds max or more, by
// deleting the first key a range yields: a random one (map iteration starts
// at a random place), found in constant time. The idle sweeps, not this,
// keep the maps small in normal operation; this only bounds them under a
// flood of new keys, at a cost that does not grow with the map.
func EvictOne[V any](m map[string]V, max int) {
	for k := range m {
		if len(m) < max {
			return
		}
		delete(m, k)
	}
}
