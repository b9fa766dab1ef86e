package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Protocol versions served over HTTP. Requests of StatelessProtocol and later
// (they carry it in the MCP-Protocol-Version header) are served without
// sessions in every mode; older ones get sessions unless HTTPConfig.Stateless.
const (
	SessionProtocol   = "2025-11-25"
	StatelessProtocol = "2026-07-28"
)

// Defaults of HTTPConfig.
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
	// DefaultBodyTimeout bounds the time a client takes to send a request
	// body, per MiB of MaxBodyBytes and at least (1 MiB in 30 s is 35 KB/s):
	// see HTTPConfig.BodyTimeout.
	DefaultBodyTimeout = 30 * time.Second
	// SessionLimitRetryAfter is the Retry-After of the answers refusing a
	// new session (503, 429): sessions end by DELETE or SessionTimeout,
	// which no client can be told precisely.
	SessionLimitRetryAfter = 30 * time.Second
	// MaxSessionIDLen is the longest Mcp-Session-Id accepted (the SDK's are 26
	// characters).
	MaxSessionIDLen = 128
)

// Words passed to HTTPConfig.Refused: why this layer refused a request.
const (
	RefusedSessionID       = "bad_session_id"  // Mcp-Session-Id too long or not visible ASCII (400)
	RefusedOrigin          = "foreign_origin"  // an Origin neither loopback nor allowed (403)
	RefusedBodyTooLarge    = "body_too_large"  // a body over MaxBodyBytes (413)
	RefusedBodyTimeout     = "body_timeout"    // the body did not arrive within BodyTimeout (408)
	RefusedBadMessage      = "bad_message"     // a body that is not one JSON-RPC 2.0 message (400: -32700, -32600)
	RefusedUnauthenticated = "unauthenticated" // no valid bearer token (401)
	RefusedAuthThrottled   = "auth_throttled"  // too many of those from one address (429)
	RefusedRateLimited     = "rate_limited"    // over RateLimit (429)
	RefusedSessionLimit    = "session_limit"   // MaxSessions or MaxSessionsPerSubject reached (503, 429)
)

// JSON-RPC error codes answered by the HTTP layer itself.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeRateLimited    = -32000 // implementation-defined server error
)

// HTTPConfig configures the streamable HTTP endpoint. The zero value is a
// working loopback configuration without authentication.
type HTTPConfig struct {
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
	// Stateless): a request that would open one more gets 503 with a
	// JSON-RPC error, and nothing is kept. Sessions end by SessionTimeout,
	// DELETE or keepalive. Default DefaultMaxSessions; negative: no bound.
	MaxSessions int
	// MaxSessionsPerSubject bounds, with Auth, the live sessions of one
	// subject (429 beyond), so one token cannot take them all. Default
	// DefaultMaxSessionsPerSubject; negative: no bound.
	MaxSessionsPerSubject int
	// Auth, if set, requires a bearer token on every request.
	Auth *AuthConfig
	// RateLimit bounds each client's requests (429 beyond); zero: no limit.
	RateLimit RateLimit
	// Refused, if set, is called with one of the Refused* words for every
	// request a check or limit of this layer refuses (for a metric): every
	// answer of this layer itself except the SDK's own (404 for an unknown
	// session, 403 for another subject's, 405, 415, and its Host check).
	Refused func(reason string)
	Now     func() time.Time // clock of the rate limiters and log gates; default time.Now
	Logger  *slog.Logger
}

// HTTPHandler serves an MCP server over streamable HTTP.
//
// From the outside in: the body deadline (BodyTimeout, set on every request
// with a body before anything else, so that even a refused one cannot
// trickle its body), the Mcp-Session-Id check (400 for one longer than
// MaxSessionIDLen or not visible ASCII), the Origin check (403 on a foreign
// Origin, any method), bearer-token authentication (with its per-address
// failure limit), the per-client rate limit, the body checks (413 over the
// limit, 408 too slow, JSON-RPC parse errors for garbage), the session
// limit, then the SDK's handlers, which check the Host header against DNS
// rebinding on loopback. Requests for protocol 2026-07-28 go to a stateless
// SDK handler; older ones to a handler with sessions, resumable streams and
// keepalive (or to the stateless one as well, with Stateless).
//
// The handlers never tie a tool call to its HTTP request: a client that
// drops its connection does not cancel the call (PropagateRequestCancellation
// stays off). A create that was accepted completes, and its retry replays it.
type HTTPHandler struct {
	chain       http.Handler
	bodyTimeout time.Duration // in effect (≤ 0: none)
	events      *EventStore
	ka          *keepalive
	sessions    *sessionLimit // nil with Stateless
}

// NewHTTPHandler serves srv over streamable HTTP as cfg says. Call Close
// when done if cfg.KeepAlive is set.
func NewHTTPHandler(srv *mcp.Server, cfg HTTPConfig) *HTTPHandler {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.EventStoreBytes == 0 {
		cfg.EventStoreBytes = DefaultEventStoreBytes
	}
	if cfg.KeepAliveFailures <= 0 {
		cfg.KeepAliveFailures = DefaultKeepAliveFailures
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = defaultBodyTimeout(cfg.MaxBodyBytes)
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSessionsPerSubject == 0 {
		cfg.MaxSessionsPerSubject = DefaultMaxSessionsPerSubject
	}
	if cfg.Refused == nil {
		cfg.Refused = func(string) {}
	}
	h := &HTTPHandler{bodyTimeout: cfg.BodyTimeout}
	getServer := func(*http.Request) *mcp.Server { return srv }
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		Logger:              sdkLogger(log),
	})
	var route http.Handler = stateless
	if !cfg.Stateless {
		opts := &mcp.StreamableHTTPOptions{
			SessionTimeout:      cfg.SessionTimeout,
			MaxRequestBodyBytes: cfg.MaxBodyBytes,
			Logger:              sdkLogger(log),
		}
		if cfg.EventStoreBytes > 0 {
			h.events = NewEventStore(cfg.EventStoreBytes)
			opts.EventStore = h.events
		}
		if cfg.KeepAlive > 0 {
			h.ka = newKeepalive(srv, cfg.KeepAlive, cfg.KeepAliveFailures, log)
		}
		stateful := mcp.NewStreamableHTTPHandler(getServer, opts)
		h.sessions = newSessionLimit(srv, cfg.MaxSessions, cfg.MaxSessionsPerSubject, cfg.Now, log, cfg.Refused)
		if h.ka != nil {
			h.sessions.ended = h.ka.forget
		}
		route = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isStatelessProtocol(r.Header.Get("Mcp-Protocol-Version")) {
				stateless.ServeHTTP(w, r)
				return
			}
			id := r.Header.Get("Mcp-Session-Id")
			switch {
			case id == "" && r.Method == http.MethodPost:
				// A POST without a session opens one.
				h.sessions.serveNew(w, r, stateful)
				return
			case id != "" && r.Method == http.MethodGet && h.ka != nil && standaloneStream(r) && h.sessions.owns(id, subjectOf(r)):
				// Only a live session of this subject is tracked for pings;
				// any other GET is the SDK's to refuse (404, 403).
				defer h.ka.streamOpen(id)()
			}
			stateful.ServeHTTP(w, r)
		})
	}
	chain := checkBody(cfg.MaxBodyBytes, cfg.BodyTimeout, cfg.Refused, route)
	if cfg.RateLimit.PerSecond > 0 {
		chain = newRateLimiter(cfg.RateLimit, cfg.Now, log, cfg.Refused).wrap(chain)
	}
	if cfg.Auth != nil {
		chain = requireToken(cfg.Auth, log, cfg.Now, cfg.Refused, chain)
	}
	chain = checkOrigin(cfg.AllowedOrigins, cfg.Refused, chain)
	chain = checkSessionID(cfg.Refused, chain)
	h.chain = bodyDeadline(cfg.BodyTimeout, chain)
	return h
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.chain.ServeHTTP(w, r) }

// defaultBodyTimeout is DefaultBodyTimeout per MiB of limit, at least
// DefaultBodyTimeout.
func defaultBodyTimeout(limit int64) time.Duration {
	d := float64(DefaultBodyTimeout) * float64(limit) / (1 << 20)
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(DefaultBodyTimeout, time.Duration(d))
}

// closeAfter makes the server close the connection once it has sent the
// answer: for the refusals that come before any work (401, 429, 408), so
// that a client cannot keep connections open by being refused on them.
func closeAfter(w http.ResponseWriter) { w.Header().Set("Connection", "close") }

// Close stops the keepalive pings. Sessions stay until they time out.
func (h *HTTPHandler) Close() {
	if h.ka != nil {
		h.ka.close()
	}
}

// EventStore is the store of resumable SSE events (nil if off).
func (h *HTTPHandler) EventStore() *EventStore { return h.events }

// Sessions is the number of live sessions (0 with Stateless).
func (h *HTTPHandler) Sessions() int {
	if h.sessions == nil {
		return 0
	}
	return h.sessions.live()
}

// isStatelessProtocol reports whether an MCP-Protocol-Version header names
// 2026-07-28 or later (versions are dates, so they compare as strings).
func isStatelessProtocol(v string) bool {
	return len(v) == len(StatelessProtocol) && v >= StatelessProtocol
}

// standaloneStream reports whether a GET opens or resumes the session's
// standalone stream (stream ID "": event IDs "_<n>") rather than resuming
// the stream of a call.
func standaloneStream(r *http.Request) bool {
	last := r.Header.Get("Last-Event-ID")
	return last == "" || strings.HasPrefix(last, "_")
}

// bodyDeadline sets a read deadline of timeout on the connection of every
// request with a body, before any other check. checkBody clears it once it
// has read the body; a request refused before that (401, 403, 429, 415…)
// keeps it, so that the server's draining of the unread rest is bounded too.
// The next request on the connection gets the server's own deadlines.
func bodyDeadline(timeout time.Duration, next http.Handler) http.Handler {
	if timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		}
		next.ServeHTTP(w, r)
	})
}

// checkSessionID answers 400 to a request whose Mcp-Session-Id is given
// more than once, is longer than MaxSessionIDLen or has characters other
// than visible ASCII (0x21-0x7E, as the MCP specification requires): no
// session has such an ID, and nothing further should see or keep it.
func checkSessionID(refused func(string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ids := r.Header.Values("Mcp-Session-Id"); len(ids) > 1 || (len(ids) == 1 && !validSessionID(ids[0])) {
			refused(RefusedSessionID)
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf(
				"Invalid Request: the Mcp-Session-Id header must be one value of at most %d visible ASCII characters", MaxSessionIDLen))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func validSessionID(id string) bool {
	if len(id) > MaxSessionIDLen {
		return false
	}
	for i := range len(id) {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// checkBody reads a JSON POST body up to limit and answers, as JSON-RPC
// errors, what is not JSON-RPC at all: 413 for a body over the limit, 408
// (and the connection closes) for one that did not arrive within timeout
// (bodyDeadline set the deadline), 400 with -32700 for invalid JSON, 400
// with -32600 for JSON that is not a request object (or batch). Such a
// request reaches no session and changes nothing. Other methods and content
// types go on to the SDK (which answers 405 and 415).
func checkBody(limit int64, timeout time.Duration, refused func(string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
		if err == nil && timeout > 0 {
			// The body is in: what follows (a call that waits, an SSE
			// response) is not bounded. After an error the deadline stays,
			// and bounds the server's draining of the rest.
			http.NewResponseController(w).SetReadDeadline(time.Time{})
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				refused(RefusedBodyTooLarge)
				writeRPCError(w, http.StatusRequestEntityTooLarge, CodeInvalidRequest,
					fmt.Sprintf("Invalid Request: the body exceeds %d bytes", mbe.Limit))
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				refused(RefusedBodyTimeout)
				closeAfter(w)
				writeRPCError(w, http.StatusRequestTimeout, CodeInvalidRequest,
					fmt.Sprintf("Invalid Request: the body did not arrive within %s", timeout))
				return
			}
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, "Invalid Request: could not read the body")
			return
		}
		trimmed := bytes.TrimSpace(body)
		switch {
		case len(trimmed) == 0:
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, "Invalid Request: empty body")
			return
		case !json.Valid(trimmed):
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, CodeParseError, "Parse error: the body is not valid JSON")
			return
		case trimmed[0] != '{' && trimmed[0] != '[':
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, "Invalid Request: the body must be a JSON-RPC 2.0 message object")
			return
		}
		// Batches, other version tags and deep nesting: the same JSON-RPC
		// answer as over stdio, not the SDK's plain text.
		if e := checkMessage(trimmed); e != nil {
			refused(RefusedBadMessage)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(e.encode())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// writeRPCError answers a JSON-RPC error with a null id (the request's id is
// unknown or unreadable at this layer).
func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// checkOrigin answers 403 to any request, whatever its method, whose Origin
// is neither loopback nor allowed: a web page must not drive the tools.
func checkOrigin(allowed []string, refused func(string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && !originAllowed(origin, allowed) {
			refused(RefusedOrigin)
			http.Error(w, "Forbidden: Origin "+origin+" is not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func originAllowed(origin string, allowed []string) bool {
	if slices.Contains(allowed, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
