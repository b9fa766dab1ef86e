package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"ticketrelay/front/rpcguard"
)

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
			writeRPCError(w, http.StatusBadRequest, rpcguard.CodeInvalidRequest, fmt.Sprintf(
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
				writeRPCError(w, http.StatusRequestEntityTooLarge, rpcguard.CodeInvalidRequest,
					fmt.Sprintf("Invalid Request: the body exceeds %d bytes", mbe.Limit))
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				refused(RefusedBodyTimeout)
				closeAfter(w)
				writeRPCError(w, http.StatusRequestTimeout, rpcguard.CodeInvalidRequest,
					fmt.Sprintf("Invalid Request: the body did not arrive within %s", timeout))
				return
			}
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, rpcguard.CodeInvalidRequest, "Invalid Request: could not read the body")
			return
		}
		trimmed := bytes.TrimSpace(body)
		switch {
		case len(trimmed) == 0:
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, rpcguard.CodeInvalidRequest, "Invalid Request: empty body")
			return
		case !json.Valid(trimmed):
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, rpcguard.CodeParseError, "Parse error: the body is not valid JSON")
			return
		case trimmed[0] != '{' && trimmed[0] != '[':
			refused(RefusedBadMessage)
			writeRPCError(w, http.StatusBadRequest, rpcguard.CodeInvalidRequest, "Invalid Request: the body must be a JSON-RPC 2.0 message object")
			return
		}
		// Batches, other version tags and deep nesting: the same JSON-RPC
		// answer as over stdio, not the SDK's plain text.
		info, e := rpcguard.Check(trimmed)
		if e != nil {
			refused(RefusedBadMessage)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(e.Encode())
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), messageKey{}, info))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

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
