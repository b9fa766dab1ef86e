// Package mcphttp serves an MCP server over streamable HTTP, hardened for
// an endpoint that other machines reach: bearer-token authentication, Host
// and Origin checks, rate limits, bounded bodies and sessions, keepalive
// pings, and an event store for resuming dropped SSE streams. Each message
// is checked by rpcguard before go-sdk reads it.
package mcphttp

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/rpcguard"
	"ticketrelay/internal/loggate"
)

// Protocol versions served over HTTP. Requests of StatelessProtocol and later
// (they carry it in the MCP-Protocol-Version header) are served without
// sessions in every mode; older ones get sessions unless Config.Stateless.
const (
	SessionProtocol   = "2025-11-25"
	StatelessProtocol = rpcguard.ModernProtocol
)

// Words passed to Config.Refused: why this layer refused a request.
const (
	RefusedSessionID       = "bad_session_id"  // Mcp-Session-Id too long or not visible ASCII (400)
	RefusedOrigin          = "foreign_origin"  // an Origin neither loopback nor allowed (403)
	RefusedBodyTooLarge    = "body_too_large"  // a body over MaxBodyBytes (413)
	RefusedBodyTimeout     = "body_timeout"    // the body did not arrive within BodyTimeout (408)
	RefusedBadMessage      = "bad_message"     // a body that is not one JSON-RPC 2.0 message (400: -32700, -32600)
	RefusedUnauthenticated = "unauthenticated" // no valid bearer token (401)
	RefusedAuthThrottled   = "auth_throttled"  // too many of those from one address (429)
	RefusedRateLimited     = "rate_limited"    // over RateLimit (429)
	RefusedSessionLimit    = "session_limit"   // MaxSessions reached, every session in use (503)
	// MaxSessionsPerSubject or MaxSessionsPerAddress reached, every session of the client in use (429)
	RefusedClientSessionLimit = "client_session_limit"
	RefusedHost               = "foreign_host"       // a loopback listener reached under a Host that is not loopback (403)
	RefusedNoSession          = "no_session"         // a message other than initialize without Mcp-Session-Id (400: -32600)
	RefusedReinitialize       = "reinitialize"       // initialize on a session that has been initialized (400: -32600)
	RefusedInsufficientScope  = "insufficient_scope" // a valid access token without every scope needed (403)
)

// CodeRateLimited is the JSON-RPC error code of the answers refusing a
// request over a limit (429, 503): an implementation-defined server error.
// The other codes this layer answers are rpcguard's.
const CodeRateLimited = -32000

// Handler serves an MCP server over streamable HTTP.
//
// From the outside in: the body deadline (BodyTimeout, set on every request
// with a body before anything else, so that even a refused one cannot
// trickle its body), the Mcp-Session-Id check (400 for one longer than
// MaxSessionIDLen or not visible ASCII), the Host check against DNS
// rebinding on loopback (403), the Origin check (403 on a foreign
// Origin, any method), bearer-token authentication (with its per-address
// failure limit), the per-client rate limit, the body checks (413 over the
// limit, 408 too slow, JSON-RPC parse errors for garbage), the step-up
// (403 insufficient_scope for a tool call whose grant needs a scope the
// access token lacks), the session limit (400 for a message other than
// initialize without a session), then the SDK's handlers (whose own plain-text 400s become JSON-RPC errors). Requests for protocol 2026-07-28 go to a stateless
// SDK handler; older ones to a handler with sessions, resumable streams and
// keepalive (or to the stateless one as well, with Stateless).
//
// The handlers never tie a tool call to its HTTP request: a client that
// drops its connection does not cancel the call (PropagateRequestCancellation
// stays off). A create that was accepted completes, and its retry replays it.
type Handler struct {
	chain       http.Handler
	bodyTimeout time.Duration // in effect (≤ 0: none)
	events      *EventStore
	ka          *keepalive
	sessions    *sessionLimit // nil with Stateless
}

// NewHandler serves srv over streamable HTTP as cfg says. Call Close when
// done: it stops the keepalive pings and ends the live sessions.
func NewHandler(srv *mcp.Server, cfg Config) *Handler {
	cfg = cfg.withDefaults()
	h := &Handler{bodyTimeout: cfg.BodyTimeout}
	h.chain = checks(cfg, h.routes(srv, cfg))
	return h
}

// checks wraps route in this layer's checks and limits, in the order
// Handler describes (the first to run is the outermost).
func checks(cfg Config, route http.Handler) http.Handler {
	chain := checkBody(cfg.MaxBodyBytes, cfg.BodyTimeout, cfg.Refused, stepUp(cfg.Auth, cfg.Logger, cfg.Now, cfg.Refused, cfg.Audit, route))
	if cfg.RateLimit.PerSecond > 0 {
		rl := newRateLimiter(cfg.RateLimit, cfg.Now, cfg.Logger, cfg.Refused)
		rl.audit = cfg.Audit
		chain = rl.wrap(chain)
	}
	if cfg.Auth != nil {
		chain = requireToken(cfg.Auth, cfg.Logger, cfg.Now, cfg.Refused, cfg.Audit, chain)
	}
	chain = checkOrigin(cfg.AllowedOrigins, cfg.Refused, chain)
	chain = checkHost(cfg.Refused, chain)
	chain = checkSessionID(cfg.Refused, chain)
	return bodyDeadline(cfg.BodyTimeout, chain)
}

// routes builds the SDK's handlers for srv: the stateless one, and unless
// cfg.Stateless the one with sessions (with its event store, keepalive and
// session limit, kept in h) behind a router that picks between them.
func (h *Handler) routes(srv *mcp.Server, cfg Config) http.Handler {
	getServer := func(*http.Request) *mcp.Server { return srv }
	stateless := sdkErrors(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		Logger:              loggate.SDKLogger(cfg.Logger),
	}))
	if cfg.Stateless {
		return stateless
	}
	opts := &mcp.StreamableHTTPOptions{
		SessionTimeout:      cfg.SessionTimeout,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		Logger:              loggate.SDKLogger(cfg.Logger),
	}
	if cfg.EventStoreBytes > 0 {
		h.events = NewEventStore(cfg.EventStoreBytes)
		opts.EventStore = h.events
	}
	if cfg.KeepAlive > 0 {
		h.ka = newKeepalive(srv, cfg.KeepAlive, cfg.KeepAliveFailures, cfg.Logger)
	}
	h.sessions = newSessionLimit(srv, sessionBounds{total: cfg.MaxSessions, perSubject: cfg.MaxSessionsPerSubject,
		perAddress: cfg.MaxSessionsPerAddress, unusedTimeout: cfg.UnusedSessionTimeout}, cfg.Now, cfg.Logger, cfg.Refused, cfg.Evicted)
	if h.ka != nil {
		h.sessions.ended = h.ka.forget
	}
	return &router{stateless: stateless, stateful: sdkErrors(mcp.NewStreamableHTTPHandler(getServer, opts)),
		sessions: h.sessions, ka: h.ka, refused: cfg.Refused}
}

// router sends a request of protocol 2026-07-28 or later to the stateless
// SDK handler and an older one to the handler with sessions, after the
// checks that need the session table: a message without a session other
// than initialize, a second initialize, a call that makes a session used,
// a GET stream to ping.
type router struct {
	stateless, stateful http.Handler
	sessions            *sessionLimit
	ka                  *keepalive // nil without pings
	refused             func(string)
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isStatelessProtocol(r.Header.Get("Mcp-Protocol-Version")) {
		rt.stateless.ServeHTTP(w, r)
		return
	}
	id := r.Header.Get("Mcp-Session-Id")
	msg, parsed := r.Context().Value(messageKey{}).(rpcguard.Message)
	switch {
	case id == "" && r.Method == http.MethodPost && parsed && msg.Method != rpcguard.MethodInitialize && sessionProtocol(r.Header.Get("Mcp-Protocol-Version")):
		// The SDK would open a session for it, answer it under a
		// made-up initialize (a call: "invalid during session
		// initialization", code 0) and close it again.
		rt.refused(RefusedNoSession)
		writeRPCErrorID(w, http.StatusBadRequest, msg.ID, rpcguard.CodeInvalidRequest,
			"Invalid Request: no Mcp-Session-Id: a session starts with initialize, sent without one; "+
				"every other message carries the Mcp-Session-Id of its answer")
		return
	case id == "" && r.Method == http.MethodPost:
		// A POST without a session opens one.
		rt.sessions.serveNew(w, r, rt.stateful)
		return
	case id != "" && parsed && msg.Method == rpcguard.MethodInitialize && rt.sessions.owns(id, subjectOf(r)):
		// The SDK answers it with code 0, which is no JSON-RPC code.
		rt.refused(RefusedReinitialize)
		writeRPCErrorID(w, http.StatusBadRequest, msg.ID, rpcguard.CodeInvalidRequest,
			`Invalid Request: duplicate "initialize" received: this session is initialized; a new session starts with initialize sent without Mcp-Session-Id`)
		return
	case id != "" && parsed && msg.Call && msg.Method != rpcguard.MethodInitialize:
		rt.sessions.used(id, subjectOf(r))
	case id != "" && r.Method == http.MethodGet && rt.ka != nil && standaloneStream(r) && rt.sessions.owns(id, subjectOf(r)):
		// Only a live session of this subject is tracked for pings;
		// any other GET is the SDK's to refuse (404, 403).
		defer rt.ka.streamOpen(id)()
	}
	rt.stateful.ServeHTTP(w, r)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.chain.ServeHTTP(w, r) }

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

// Close stops the keepalive pings and ends the live sessions, so that a
// stopping front leaves no session goroutine behind; a client opens a new
// session wherever it reconnects, and its retries replay by request_id.
func (h *Handler) Close() {
	if h.ka != nil {
		h.ka.close()
	}
	if h.sessions != nil {
		h.sessions.closeAll()
	}
}

// EventStore is the store of resumable SSE events (nil if off).
func (h *Handler) EventStore() *EventStore { return h.events }

// Sessions is the number of live sessions (0 with Stateless).
func (h *Handler) Sessions() int {
	if h.sessions == nil {
		return 0
	}
	return h.sessions.live()
}

// isStatelessProtocol reports whether an MCP-Protocol-Version header names
// 2026-07-28 or later (versions are dates, so they compare as strings).
// sessionProtocol reports whether a request without a session that names
// protocol version v (none, or one the SDK serves with sessions) is one
// the SDK would answer under a made-up session. A version the SDK does
// not know is left to it: it answers with the versions it supports
// (UnsupportedProtocolVersionError, SEP-2575).
func sessionProtocol(v string) bool {
	return v == "" || (!isStatelessProtocol(v) && slices.Contains(mcp.SupportedProtocolVersions(), v))
}

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
