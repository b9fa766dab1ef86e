package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"net/netip"
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
	// DefaultMaxSessionsPerAddress bounds, without tokens, the live
	// sessions of one client address (IPv4, or IPv6 /64).
	DefaultMaxSessionsPerAddress = 100
	// DefaultUnusedSessionTimeout closes a session that made no call since
	// its initialize. Clients list the tools right after initialize; a
	// session still silent after this long is most likely one of a flood.
	DefaultUnusedSessionTimeout = time.Minute
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
	RefusedSessionLimit    = "session_limit"   // MaxSessions reached, every session in use (503)
	// MaxSessionsPerSubject or MaxSessionsPerAddress reached, every session of the client in use (429)
	RefusedClientSessionLimit = "client_session_limit"
	RefusedHost               = "foreign_host" // a loopback listener reached under a Host that is not loopback (403)
	RefusedNoSession          = "no_session"   // a message other than initialize without Mcp-Session-Id (400: -32600)
	RefusedReinitialize       = "reinitialize" // initialize on a session that has been initialized (400: -32600)
)

// JSON-RPC error codes answered by the HTTP layer itself.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
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
	Now     func() time.Time // clock of the rate limiters and log gates; default time.Now
	Logger  *slog.Logger
}

// HTTPHandler serves an MCP server over streamable HTTP.
//
// From the outside in: the body deadline (BodyTimeout, set on every request
// with a body before anything else, so that even a refused one cannot
// trickle its body), the Mcp-Session-Id check (400 for one longer than
// MaxSessionIDLen or not visible ASCII), the Host check against DNS
// rebinding on loopback (403), the Origin check (403 on a foreign
// Origin, any method), bearer-token authentication (with its per-address
// failure limit), the per-client rate limit, the body checks (413 over the
// limit, 408 too slow, JSON-RPC parse errors for garbage), the session
// limit (400 for a message other than initialize without a session), then
// the SDK's handlers (whose own plain-text 400s become JSON-RPC errors). Requests for protocol 2026-07-28 go to a stateless
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
	if cfg.MaxSessionsPerAddress == 0 {
		cfg.MaxSessionsPerAddress = DefaultMaxSessionsPerAddress
	}
	if cfg.UnusedSessionTimeout == 0 {
		cfg.UnusedSessionTimeout = DefaultUnusedSessionTimeout
	}
	if cfg.Refused == nil {
		cfg.Refused = func(string) {}
	}
	if cfg.Evicted == nil {
		cfg.Evicted = func(string) {}
	}
	h := &HTTPHandler{bodyTimeout: cfg.BodyTimeout}
	getServer := func(*http.Request) *mcp.Server { return srv }
	stateless := sdkErrors(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		Logger:              sdkLogger(log),
	}))
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
		stateful := sdkErrors(mcp.NewStreamableHTTPHandler(getServer, opts))
		h.sessions = newSessionLimit(srv, sessionBounds{total: cfg.MaxSessions, perSubject: cfg.MaxSessionsPerSubject,
			perAddress: cfg.MaxSessionsPerAddress, unusedTimeout: cfg.UnusedSessionTimeout}, cfg.Now, log, cfg.Refused, cfg.Evicted)
		if h.ka != nil {
			h.sessions.ended = h.ka.forget
		}
		route = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isStatelessProtocol(r.Header.Get("Mcp-Protocol-Version")) {
				stateless.ServeHTTP(w, r)
				return
			}
			id := r.Header.Get("Mcp-Session-Id")
			msg, parsed := r.Context().Value(msgInfoKey{}).(msgInfo)
			switch {
			case id == "" && r.Method == http.MethodPost && parsed && msg.method != methodInitialize && sessionProtocol(r.Header.Get("Mcp-Protocol-Version")):
				// The SDK would open a session for it, answer it under a
				// made-up initialize (a call: "invalid during session
				// initialization", code 0) and close it again.
				cfg.Refused(RefusedNoSession)
				writeRPCErrorID(w, http.StatusBadRequest, msg.id, CodeInvalidRequest,
					"Invalid Request: no Mcp-Session-Id: a session starts with initialize, sent without one; "+
						"every other message carries the Mcp-Session-Id of its answer")
				return
			case id == "" && r.Method == http.MethodPost:
				// A POST without a session opens one.
				h.sessions.serveNew(w, r, stateful)
				return
			case id != "" && parsed && msg.method == methodInitialize && h.sessions.owns(id, subjectOf(r)):
				// The SDK answers it with code 0, which is no JSON-RPC code.
				cfg.Refused(RefusedReinitialize)
				writeRPCErrorID(w, http.StatusBadRequest, msg.id, CodeInvalidRequest,
					`Invalid Request: duplicate "initialize" received: this session is initialized; a new session starts with initialize sent without Mcp-Session-Id`)
				return
			case id != "" && parsed && msg.call && msg.method != methodInitialize:
				h.sessions.used(id, subjectOf(r))
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
	chain = checkHost(cfg.Refused, chain)
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
		info, e := inspectMessage(trimmed)
		if e != nil {
			refused(RefusedBadMessage)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(e.encode())
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), msgInfoKey{}, info))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// writeRPCError answers a JSON-RPC error with a null id (the request's id is
// unknown or unreadable at this layer).
func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	writeRPCErrorID(w, status, nil, code, msg)
}

// writeRPCErrorID answers a JSON-RPC error to id: the request's, if go-sdk
// would echo it unchanged, else null.
func writeRPCErrorID(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	if !validID(id) {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Del("X-Content-Type-Options")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// msgInfoKey is the context key of the msgInfo of a POST body checkBody
// passed.
type msgInfoKey struct{}

const methodInitialize = "initialize"

// sdkErrors turns the SDK's plain-text 400 answers to a POST that checkBody
// passed (its own checks of the message: an unknown method, an id on a
// notification or none on a request, missing params) into JSON-RPC errors
// to the message's id, with the code the specification gives them:
// -32601 for an unknown method, with the same message as over stdio, and
// -32600 for the rest. The status stays 400 (the MCP transport answers
// input it cannot accept with an HTTP error, the body a JSON-RPC error).
func sdkErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := r.Context().Value(msgInfoKey{}).(msgInfo)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		ew := &rpcErrorWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r)
		if !ew.capture {
			return
		}
		text := strings.TrimSpace(ew.buf.String())
		code, msg := CodeInvalidRequest, "Invalid Request: "+strings.TrimPrefix(strings.TrimPrefix(text, "invalid request: "), "Bad Request: ")
		if strings.HasPrefix(text, sdkNotHandled) {
			code, msg = CodeMethodNotFound, fmt.Sprintf("method not found: %q", info.method)
		}
		writeRPCErrorID(w, http.StatusBadRequest, info.id, code, msg)
	})
}

// sdkNotHandled starts the SDK's answer to a method it does not serve
// (jsonrpc2.ErrNotHandled).
const sdkNotHandled = "JSON RPC not handled"

// rpcErrorWriter holds back a 400 text/plain answer (the SDK's
// http.Error) for sdkErrors to rewrite; anything else passes.
type rpcErrorWriter struct {
	http.ResponseWriter
	started bool
	capture bool
	buf     bytes.Buffer
}

func (w *rpcErrorWriter) WriteHeader(code int) {
	if w.started {
		return
	}
	w.started = true
	if code == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.capture = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rpcErrorWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.capture {
		if w.buf.Len() < 4<<10 {
			w.buf.Write(b)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *rpcErrorWriter) Flush() {
	if !w.capture {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *rpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// checkHost answers 403 to a request that reached a loopback listener
// under a Host that is not loopback: a web page whose name was rebound to
// 127.0.0.1 (DNS rebinding). The SDK's handler does the same check, with
// the same answer; this one comes before authentication and every limit,
// and counts it (RefusedHost).
func checkHost(refused func(string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && loopbackHost(la.String()) && !loopbackHost(r.Host) {
			refused(RefusedHost)
			http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a host, with or without a port, is
// "localhost" or a loopback IP address (as the SDK's check reads it).
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
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
