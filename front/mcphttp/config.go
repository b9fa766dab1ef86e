package mcphttp

import (
	"log/slog"
	"net/http"
	"time"
)

// Defaults of Config.
const (
	DefaultSessionTimeout    = 30 * time.Minute
	DefaultEventStoreBytes   = 4 << 20
	DefaultMaxBodyBytes      = 1 << 20
	DefaultKeepAliveFailures = 3
	// DefaultMaxSessions bounds the live sessions of a handler (each holds
	// about 10 KB and a few goroutines until it ends).
	DefaultMaxSessions = 1000
	// DefaultMaxSessionsPerSubject bounds the live sessions of one
	// authenticated subject.
	DefaultMaxSessionsPerSubject = 100
	// DefaultMaxSessionsPerAddress bounds, without tokens, the live
	// sessions of one client address (IPv4, or IPv6 /64).
	DefaultMaxSessionsPerAddress = 100
	// DefaultUnusedSessionTimeout closes a session that made no call since
	// its initialize. Clients list the tools right after initialize; a
	// session still silent after this long is most likely one of a flood.
	DefaultUnusedSessionTimeout = time.Minute
	// DefaultBodyTimeout bounds the time a client takes to send a request
	// body, per MiB of MaxBodyBytes and at least (1 MiB in 30 s is 35 KB/s):
	// see Config.BodyTimeout.
	DefaultBodyTimeout = 30 * time.Second
	// SessionLimitRetryAfter is the Retry-After of the answers refusing a
	// new session (503, 429): sessions end by DELETE or SessionTimeout,
	// which no client can be told precisely.
	SessionLimitRetryAfter = 30 * time.Second
	// MaxSessionIDLen is the longest Mcp-Session-Id accepted (the SDK's are 26
	// characters).
	MaxSessionIDLen = 128
)

// Config configures the streamable HTTP endpoint. The zero value is a
// working loopback configuration without authentication.
type Config struct {
	// AllowedOrigins are browser origins (scheme://host[:port]) allowed
	// besides loopback ones. Requests without an Origin header (CLI clients,
	// Claude Code) are always allowed.
	AllowedOrigins []string
	// Stateless serves every protocol version without sessions, for
	// deployments behind a load balancer: no GET stream, no resumption.
	Stateless bool
	// SessionTimeout closes idle sessions. Default 30 minutes.
	SessionTimeout time.Duration
	// EventStoreBytes bounds the memory that keeps SSE events so that a
	// client whose stream dropped resumes it with Last-Event-ID (sessions,
	// protocol 2025-11-25). Default DefaultEventStoreBytes; negative turns resumption off.
	EventStoreBytes int
	// KeepAlive is the interval of pings on sessions that hold a GET stream
	// open; 0 sends none. A session is closed after KeepAliveFailures
	// (default 3) consecutive unanswered pings; sessions without a GET
	// stream are never pinged, so never closed for it.
	KeepAlive         time.Duration
	KeepAliveFailures int
	// MaxBodyBytes bounds a request body (413 beyond). Default 1 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the time to receive a request body, from the end of
	// the headers (408 beyond, and the connection closes), so that a client
	// sending slowly cannot hold a connection and a handler. Default
	// DefaultBodyTimeout (30 s) per MiB of MaxBodyBytes, at least
	// DefaultBodyTimeout, so that a larger limit does not ask for a faster
	// client; negative: none. Responses are not bounded: SSE streams and
	// calls that wait for delivery last as long as they need.
	BodyTimeout time.Duration
	// MaxSessions bounds the live sessions (protocol 2025-11-25, not
	// Stateless): a request that would open one more closes the oldest
	// session that made no call since its initialize, or, if every one
	// made calls, gets 503 with a JSON-RPC error, and nothing is kept.
	// Sessions end by SessionTimeout, UnusedSessionTimeout, DELETE or
	// keepalive. Default DefaultMaxSessions; negative: no bound.
	MaxSessions int
	// MaxSessionsPerSubject bounds, with Auth, the live sessions of one
	// subject, so one token cannot take them all: beyond it, the subject's
	// oldest unused session is closed, or if it has none, 429. Default
	// DefaultMaxSessionsPerSubject; negative: no bound.
	MaxSessionsPerSubject int
	// MaxSessionsPerAddress is the same bound for one client address
	// (IPv4, or IPv6 /64) of requests without a token subject. Default
	// DefaultMaxSessionsPerAddress; negative: no bound.
	MaxSessionsPerAddress int
	// UnusedSessionTimeout closes a session that made no call (any request
	// but initialize) this long after it opened; a session that made one
	// is never closed for it. Default DefaultUnusedSessionTimeout;
	// negative: none.
	UnusedSessionTimeout time.Duration
	// Evicted, if set, is called with one of the Evicted* words for every
	// unused session this layer closes.
	Evicted func(reason string)
	// Auth, if set, requires a bearer token on every request.
	Auth *AuthConfig
	// RateLimit bounds each client's requests (429 beyond); zero: no limit.
	RateLimit RateLimit
	// Refused, if set, is called with one of the Refused* words for every
	// request a check or limit of this layer refuses (for a metric): every
	// answer of this layer itself except the SDK's own (404 for an unknown
	// session, 403 for another subject's, 405, 415).
	Refused func(reason string)
	// Audit, if set, is told of each request refused for a caller this
	// layer knows (a valid token: a scope it lacks, a step-up, its rate
	// limit), for the audit trail: its subject, the tool of a tools/call
	// whose name was read ("" otherwise) and the Refused* word.
	Audit  func(r *http.Request, subject, tool, reason string)
	Now    func() time.Time // clock of the rate limiters and log gates; default time.Now
	Logger *slog.Logger
}

// withDefaults fills the zero fields of c with their defaults.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.EventStoreBytes == 0 {
		c.EventStoreBytes = DefaultEventStoreBytes
	}
	if c.KeepAliveFailures <= 0 {
		c.KeepAliveFailures = DefaultKeepAliveFailures
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = defaultBodyTimeout(c.MaxBodyBytes)
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxSessionsPerSubject == 0 {
		c.MaxSessionsPerSubject = DefaultMaxSessionsPerSubject
	}
	if c.MaxSessionsPerAddress == 0 {
		c.MaxSessionsPerAddress = DefaultMaxSessionsPerAddress
	}
	if c.UnusedSessionTimeout == 0 {
		c.UnusedSessionTimeout = DefaultUnusedSessionTimeout
	}
	if c.Refused == nil {
		c.Refused = func(string) {}
	}
	if c.Audit == nil {
		c.Audit = func(*http.Request, string, string, string) {}
	}
	if c.Evicted == nil {
		c.Evicted = func(string) {}
	}
	return c
}
