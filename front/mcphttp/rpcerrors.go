package mcphttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"ticketrelay/front/rpcguard"
)

// writeRPCError answers a JSON-RPC error with a null id (the request's id is
// unknown or unreadable at this layer).
func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	writeRPCErrorID(w, status, nil, code, msg)
}

// writeRPCErrorID answers a JSON-RPC error to id: the request's, if go-sdk
// would echo it unchanged, else null.
func writeRPCErrorID(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	if !rpcguard.ValidID(id) {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Del("X-Content-Type-Options")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// messageKey is the context key of the rpcguard.Message of a POST body
// checkBody passed.
type messageKey struct{}

// sdkErrors turns the SDK's plain-text 400 answers to a POST that checkBody
// passed (its own checks of the message: an unknown method, an id on a
// notification or none on a request, missing params) into JSON-RPC errors
// to the message's id, with the code the specification gives them:
// -32601 for an unknown method, with the same message as over stdio, and
// -32600 for the rest. The status stays 400 (the MCP transport answers
// input it cannot accept with an HTTP error, the body a JSON-RPC error).
func sdkErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := r.Context().Value(messageKey{}).(rpcguard.Message)
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
		code, msg := rpcguard.CodeInvalidRequest, "Invalid Request: "+strings.TrimPrefix(strings.TrimPrefix(text, "invalid request: "), "Bad Request: ")
		if strings.HasPrefix(text, sdkNotHandled) {
			code, msg = rpcguard.CodeMethodNotFound, fmt.Sprintf("method not found: %q", info.Method)
		}
		writeRPCErrorID(w, http.StatusBadRequest, info.ID, code, msg)
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
