package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// Limits of the stdio guard.
const (
	// MaxStdioLine is the longest line passed to the server (the SDK's own
	// default frame limit is of the same order); a longer one is answered
	// with an error and skipped.
	MaxStdioLine = 8 << 20
	// MaxJSONDepth is the deepest nesting accepted, as over HTTP.
	MaxJSONDepth = 1000
)

// GuardStdio sits between a client's byte stream and the SDK's stdio
// transport, which decodes a stream of JSON values and ends the session on
// the first one it cannot read. The guard reads lines instead: a line that
// is one JSON-RPC 2.0 object goes on to the server; anything else (not
// JSON, a batch, another version tag, nesting deeper than MaxJSONDepth, a
// line longer than MaxStdioLine) is answered with the JSON-RPC error the
// specification asks for, and the session goes on. Blank lines are skipped.
//
// It returns the reader to give the transport and the writer the transport
// must write through: the guard's own answers share its lock, so a line on
// out is never interleaved with another.
func GuardStdio(in io.Reader, out io.Writer, log *slog.Logger) (io.ReadCloser, io.WriteCloser) {
	pr, pw := io.Pipe()
	w := &lockedWriter{w: out}
	go func() {
		err := guardLines(in, pw, w, log)
		pw.CloseWithError(err) // nil: EOF for the transport
	}()
	return pr, w
}

func guardLines(in io.Reader, next io.Writer, out *lockedWriter, log *slog.Logger) error {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if len(line) > 0 || tooLong {
			msg := checkMessage(line)
			if tooLong {
				msg = &rpcError{code: CodeInvalidRequest, reason: fmt.Sprintf("message longer than %d bytes", MaxStdioLine)}
			}
			if msg != nil {
				log.Warn("stdio: answered a malformed line", "code", msg.code, "reason", msg.reason)
				if werr := out.writeError(msg); werr != nil {
					return werr
				}
			} else if _, werr := next.Write(append(line, '\n')); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readLine reads one line without its end, trimmed of surrounding blanks.
// A line over MaxStdioLine is consumed and reported as tooLong.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > MaxStdioLine+1 {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(buf), tooLong, err
	}
}

// rpcError is a JSON-RPC error answer to a message that never reached the
// SDK.
type rpcError struct {
	id     json.RawMessage // null when the line has no readable id
	code   int
	reason string
}

// checkMessage returns nil for one JSON-RPC 2.0 object, and otherwise the
// error to answer: not JSON (-32700), a batch, not an object, another
// version tag, nesting deeper than MaxJSONDepth (-32600). Both transports
// use it, so a client gets the same answer over HTTP and stdio.
func checkMessage(line []byte) *rpcError {
	switch {
	case len(line) == 0:
		return &rpcError{code: CodeInvalidRequest, reason: "empty message"}
	case !json.Valid(line):
		return &rpcError{code: CodeParseError, reason: "not valid JSON"}
	case line[0] == '[':
		return &rpcError{code: CodeInvalidRequest, reason: "batch requests are not supported"}
	case line[0] != '{':
		return &rpcError{code: CodeInvalidRequest, reason: "a JSON-RPC message must be a JSON object"}
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return &rpcError{code: CodeInvalidRequest, reason: "not a JSON-RPC message: " + err.Error()}
	}
	switch {
	case m.JSONRPC != "2.0":
		return &rpcError{id: m.ID, code: CodeInvalidRequest, reason: fmt.Sprintf(`"jsonrpc" must be "2.0", got %q`, m.JSONRPC)}
	case tooDeep(line, MaxJSONDepth):
		return &rpcError{id: m.ID, code: CodeInvalidRequest, reason: fmt.Sprintf("nested deeper than %d levels", MaxJSONDepth)}
	}
	return nil
}

// tooDeep reports whether b (valid JSON) nests objects and arrays deeper
// than max. Brackets inside strings do not count.
func tooDeep(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// lockedWriter serialises whole writes: the SDK writes one message, newline
// included, per Write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

func (l *lockedWriter) writeError(e *rpcError) error {
	_, err := l.Write(append(e.encode(), '\n'))
	return err
}

// encode is the JSON-RPC error response. Only a string or number id can be
// echoed; anything else answers to null.
func (e *rpcError) encode() []byte {
	id := e.id
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		id = json.RawMessage("null")
	}
	title := "Invalid Request"
	if e.code == CodeParseError {
		title = "Parse error"
	}
	b, _ := json.Marshal(map[string]any{ // cannot fail: plain values
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": e.code, "message": title + ": " + e.reason},
	})
	return b
}
