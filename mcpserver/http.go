package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
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
	// Auth, if set, requires a bearer token on every request.
	Auth *AuthConfig
	// RateLimit bounds each client's requests (429 beyond); zero: no limit.
	RateLimit RateLimit
	Now       func() time.Time // clock of the rate limiter; default time.Now
	Logger    *slog.Logger
}

// HTTPHandler serves an MCP server over streamable HTTP.
//
// From the outside in: the Origin check (403 on a foreign Origin, any
// method), bearer-token authentication, the per-client rate limit, the body
// checks (413 over the limit, JSON-RPC parse errors for garbage), then the
// SDK's handlers, which check the Host header against DNS rebinding on
// loopback. Requests for protocol 2026-07-28 go to a stateless SDK handler;
// older ones to a handler with sessions, resumable streams and keepalive
// (or to the stateless one as well, with Stateless).
//
// The handlers never tie a tool call to its HTTP request: a client that
// drops its connection does not cancel the call (PropagateRequestCancellation
// stays off). A create that was accepted completes, and its retry replays it.
type HTTPHandler struct {
	chain  http.Handler
	events *EventStore
	ka     *keepalive
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
	h := &HTTPHandler{}
	getServer := func(*http.Request) *mcp.Server { return srv }
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		Logger:              log,
	})
	var route http.Handler = stateless
	if !cfg.Stateless {
		opts := &mcp.StreamableHTTPOptions{
			SessionTimeout:      cfg.SessionTimeout,
			MaxRequestBodyBytes: cfg.MaxBodyBytes,
			Logger:              log,
		}
		if cfg.EventStoreBytes > 0 {
			h.events = NewEventStore(cfg.EventStoreBytes)
			opts.EventStore = h.events
		}
		if cfg.KeepAlive > 0 {
			h.ka = newKeepalive(srv, cfg.KeepAlive, cfg.KeepAliveFailures, log)
		}
		stateful := mcp.NewStreamableHTTPHandler(getServer, opts)
		route = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isStatelessProtocol(r.Header.Get("Mcp-Protocol-Version")) {
				stateless.ServeHTTP(w, r)
				return
			}
			if id := r.Header.Get("Mcp-Session-Id"); h.ka != nil && r.Method == http.MethodGet && id != "" && standaloneStream(r) {
				defer h.ka.streamOpen(id)()
			}
			stateful.ServeHTTP(w, r)
		})
	}
	chain := checkBody(cfg.MaxBodyBytes, route)
	if cfg.RateLimit.PerSecond > 0 {
		chain = newRateLimiter(cfg.RateLimit, cfg.Now, log).wrap(chain)
	}
	if cfg.Auth != nil {
		chain = requireToken(cfg.Auth, log, chain)
	}
	h.chain = checkOrigin(cfg.AllowedOrigins, chain)
	return h
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.chain.ServeHTTP(w, r) }

// Close stops the keepalive pings. Sessions stay until they time out.
func (h *HTTPHandler) Close() {
	if h.ka != nil {
		h.ka.close()
	}
}

// EventStore is the store of resumable SSE events (nil if off).
func (h *HTTPHandler) EventStore() *EventStore { return h.events }

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

// checkBody reads a JSON POST body up to limit and answers, as JSON-RPC
// errors, what is not JSON-RPC at all: 413 for a body over the limit, 400
// with -32700 for invalid JSON, 400 with -32600 for JSON that is not a
// request object (or batch). Such a request reaches no session and changes
// nothing. Other methods and content types go on to the SDK (which answers
// 405 and 415).
func checkBody(limit int64, next http.Handler) http.Handler {
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
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeRPCError(w, http.StatusRequestEntityTooLarge, CodeInvalidRequest,
					fmt.Sprintf("Invalid Request: the body exceeds %d bytes", mbe.Limit))
				return
			}
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, "Invalid Request: could not read the body")
			return
		}
		trimmed := bytes.TrimSpace(body)
		switch {
		case len(trimmed) == 0:
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, "Invalid Request: empty body")
			return
		case !json.Valid(trimmed):
			writeRPCError(w, http.StatusBadRequest, CodeParseError, "Parse error: the body is not valid JSON")
			return
		case trimmed[0] != '{' && trimmed[0] != '[':
			writeRPCError(w, http.StatusBadRequest, CodeInvalidRequest, "Invalid Request: the body must be a JSON-RPC 2.0 message object")
			return
		}
		// Batches, other version tags and deep nesting: the same JSON-RPC
		// answer as over stdio, not the SDK's plain text.
		if e := checkMessage(trimmed); e != nil {
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
func checkOrigin(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && !originAllowed(origin, allowed) {
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

// IsLoopbackListen reports whether a listen address ("host:port") accepts
// only loopback connections: 127.0.0.0/8, ::1 or "localhost". An empty host
// (all interfaces) or any other name is not loopback.
func IsLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
