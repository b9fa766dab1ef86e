package mcpserver

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

// rateLimiter keeps one token bucket per client. Buckets unused for longer
// than it takes them to refill are dropped, so memory follows the number of
// recently active clients.
type rateLimiter struct {
	cfg       RateLimit
	now       func() time.Time
	log       *slog.Logger
	idle      time.Duration
	mu        sync.Mutex
	clients   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newRateLimiter(cfg RateLimit, now func() time.Time, log *slog.Logger) *rateLimiter {
	cfg = cfg.withDefaults()
	refill := time.Duration(float64(cfg.Burst) / cfg.PerSecond * float64(time.Second))
	return &rateLimiter{cfg: cfg, now: now, log: log, idle: max(time.Minute, refill), clients: map[string]*bucket{}}
}

// allow takes one request from key's bucket, or says how long to wait.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > l.idle {
		for k, b := range l.clients {
			if now.Sub(b.seen) > l.idle {
				delete(l.clients, k)
			}
		}
		l.lastSweep = now
	}
	b, ok := l.clients[key]
	if !ok {
		b = &bucket{lim: rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst)}
		l.clients[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func clientKey(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && ti.UserID != "" {
		return "subject " + ti.UserID
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip " + host
}

// wrap answers 429 with Retry-After and a JSON-RPC error to a client over
// its limit; the request goes no further and changes nothing.
func (l *rateLimiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := clientKey(r)
		ok, wait := l.allow(key)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		secs := int(math.Ceil(wait.Seconds()))
		l.log.Warn("rate limit exceeded", "client", key, "method", r.Method, "retry_after_s", secs)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeRPCError(w, http.StatusTooManyRequests, CodeRateLimited, fmt.Sprintf(
			"rate limit exceeded: at most %g requests per second (bursts of %d) per client; retry after %d s. Nothing was done.",
			l.cfg.PerSecond, l.cfg.Burst, secs))
	})
}
