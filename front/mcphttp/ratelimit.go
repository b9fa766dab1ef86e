package mcphttp

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/time/rate"

	"ticketrelay/internal/loggate"
)

// RateLimit bounds the HTTP requests of each client: the authenticated
// subject when there is one, else the remote IP address.
type RateLimit struct {
	PerSecond float64 // sustained requests per second; 0 turns the limit off
	Burst     int     // requests allowed at once; default 2×PerSecond, at least 1
}

func (c RateLimit) withDefaults() RateLimit {
	if c.Burst <= 0 {
		c.Burst = max(1, int(math.Ceil(2*c.PerSecond)))
	}
	return c
}

// maxTrackedClients bounds the clients (buckets, log gates) remembered at
// once, so that a flood from many addresses cannot grow a map without end.
const maxTrackedClients = 10_000

// buckets keeps one token bucket per key, at most max of them. Buckets
// unused for longer than it takes them to refill are full again, so they
// are dropped, by a sweep at most once per that time; a new key while max
// are held evicts a random one (that client starts again with a full
// bucket) in constant time, without scanning the map. Memory follows the
// number of recently active clients and never exceeds max buckets.
type buckets struct {
	cfg       RateLimit
	now       func() time.Time
	idle      time.Duration
	max       int
	mu        sync.Mutex
	m         map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newBuckets(cfg RateLimit, now func() time.Time, limit int) *buckets {
	cfg = cfg.withDefaults()
	refill := time.Duration(float64(cfg.Burst) / cfg.PerSecond * float64(time.Second))
	return &buckets{cfg: cfg, now: now, idle: max(time.Minute, refill), max: limit, m: map[string]*bucket{}}
}

// get returns key's bucket, creating it if create; b.mu is held.
func (b *buckets) get(key string, now time.Time, create bool) *bucket {
	if now.Sub(b.lastSweep) > b.idle {
		b.sweep(now)
	}
	k, ok := b.m[key]
	if !ok {
		if !create {
			return nil
		}
		loggate.EvictOne(b.m, b.max)
		k = &bucket{lim: rate.NewLimiter(rate.Limit(b.cfg.PerSecond), b.cfg.Burst)}
		b.m[key] = k
	}
	k.seen = now
	return k
}

func (b *buckets) sweep(now time.Time) {
	for k, v := range b.m {
		if now.Sub(v.seen) > b.idle {
			delete(b.m, k)
		}
	}
	b.lastSweep = now
}

// allow takes one token from key's bucket, or says how long to wait.
func (b *buckets) allow(key string) (bool, time.Duration) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.get(key, now, true).lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// empty says how long until key's bucket holds a token again: 0 if it
// holds one now (or key has none). It takes nothing.
func (b *buckets) empty(key string) time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.get(key, now, false)
	if k == nil {
		return 0
	}
	tokens := k.lim.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / b.cfg.PerSecond * float64(time.Second))
}

// take takes one token from key's bucket if it has one.
func (b *buckets) take(key string) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.get(key, now, true).lim.AllowN(now, 1)
}

func (b *buckets) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// ipKey is the client address a limit applies to: the IPv4 address, or the
// /64 prefix of an IPv6 one (one host usually holds a whole /64, so
// counting single IPv6 addresses would give it 2^64 budgets).
func ipKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

func clientKey(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && ti.UserID != "" {
		return "subject " + ti.UserID
	}
	return "ip " + ipKey(r.RemoteAddr)
}

// rateLimiter bounds the requests of each client (subject or address).
type rateLimiter struct {
	b       *buckets
	log     *slog.Logger
	logs    *loggate.Gate
	refused func(string)
	audit   func(r *http.Request, subject, tool, reason string) // nil: none
}

func newRateLimiter(cfg RateLimit, now func() time.Time, log *slog.Logger, refused func(string)) *rateLimiter {
	return &rateLimiter{b: newBuckets(cfg, now, maxTrackedClients), log: log,
		logs: loggate.New(loggate.Every, maxTrackedClients, now), refused: refused}
}

// wholeSeconds is wait rounded up to whole seconds, as Retry-After takes it.
func wholeSeconds(wait time.Duration) int { return int(math.Ceil(wait.Seconds())) }

// tooManyRequests answers 429 to a request refused before any work:
// Retry-After secs, msg as a JSON-RPC error, and the connection closed
// after the answer, so that being refused holds no connection.
func tooManyRequests(w http.ResponseWriter, secs int, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	closeAfter(w)
	writeRPCError(w, http.StatusTooManyRequests, CodeRateLimited, msg)
}

// wrap answers 429 with Retry-After and a JSON-RPC error to a client over
// its limit, and closes the connection after it; the request goes no
// further and changes nothing. The warning
// is logged at most once a minute per client, with the count held back.
func (l *rateLimiter) wrap(next http.Handler) http.Handler {
	cfg := l.b.cfg
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := clientKey(r)
		ok, wait := l.b.allow(key)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		l.refused(RefusedRateLimited)
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && l.audit != nil {
			l.audit(r, ti.UserID, "", RefusedRateLimited)
		}
		secs := wholeSeconds(wait)
		if pass, held := l.logs.Pass(key); pass {
			l.log.Warn("rate limit exceeded", "client", key, "method", r.Method, "retry_after_s", secs, "refused_since_last_warning", held)
		}
		tooManyRequests(w, secs, fmt.Sprintf(
			"rate limit exceeded: at most %g requests per second (bursts of %d) per client; retry after %d s. Nothing was done.",
			cfg.PerSecond, cfg.Burst, secs))
	})
}
