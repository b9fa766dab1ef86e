package mcpserver

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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

// checkMessage returns nil for one JSON-RPC 2.0 message go-sdk will read as
// sent, and otherwise the error to answer: not JSON or not UTF-8 (-32700); a
// batch, not an object, a member given twice, another version tag, nesting
// deeper than MaxJSONDepth, an id other than a string or a safe integer, a
// method that is not a string, a response with neither result nor error, or
// anything else go-sdk's decoder refuses (-32600). Both transports use it, so a client gets the same answer over
// HTTP and stdio; over stdio a message go-sdk cannot decode would end the
// session, and with it the answers to every call still running.
//
// Invalid UTF-8 inside a tool's arguments passes: the argument decoder
// answers it with a tool error that names the argument.
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
	var (
		version, id, method, params []byte
		hasID, hasMethod            bool
		hasError, hasResult         bool
	)
	dup := duplicate(line, func(name string, v []byte) {
		switch name {
		case "jsonrpc":
			version = v
		case "id":
			id, hasID = v, true
		case "method":
			method, hasMethod = v, true
		case "params":
			params = v
		case "error":
			hasError = true
		case "result":
			hasResult = true
		}
	})
	if dup == "" && len(params) > 0 {
		if dup = duplicate(params, nil); dup != "" {
			dup = "params." + dup
		}
	}
	e := &rpcError{id: id, code: CodeInvalidRequest}
	switch {
	case dup != "":
		e.reason = fmt.Sprintf("the member %q appears more than once", dup)
	case !bytes.Equal(version, []byte(`"2.0"`)) && decodeString(version) != "2.0":
		e.reason = fmt.Sprintf(`"jsonrpc" must be "2.0", got %s`, cmp.Or(string(version), "nothing"))
	case tooDeep(line, MaxJSONDepth):
		e.reason = fmt.Sprintf("nested deeper than %d levels", MaxJSONDepth)
	case hasID && !validID(id):
		e.reason = fmt.Sprintf(`"id" must be a string or an integer within ±%d`, maxSafeID)
	case hasMethod && method[0] != '"':
		e.reason = `"method" must be a string`
	case !utf8.Valid(line) && !validOutsideArguments(line):
		e.code, e.reason = CodeParseError, "not valid UTF-8"
	case !hasMethod && hasResult == hasError:
		e.reason = `a message without "method" is a response and needs "result" or "error"`
	case !hasMethod || hasError || hasResult:
		// A response, or something that is neither: rare, so it pays for
		// a second decode by go-sdk's own reader.
		if _, err := jsonrpc.DecodeMessage(line); err != nil {
			e.reason = "not a JSON-RPC message: " + err.Error()
		}
	}
	if e.reason == "" {
		return nil
	}
	return e
}

// duplicate returns the first name the JSON object b holds twice, or "";
// each member before it is handed to fn, if fn is not nil.
func duplicate(b []byte, fn func(name string, value []byte)) (dup string) {
	seen := make([]string, 0, 8)
	members(b, func(name string, v []byte) bool {
		if slices.Contains(seen, name) {
			dup = name
			return false
		}
		seen = append(seen, name)
		if fn != nil {
			fn(name, v)
		}
		return true
	})
	return dup
}

// validOutsideArguments reports whether every name and value of the
// message but the values inside params.arguments is valid UTF-8.
func validOutsideArguments(line []byte) bool {
	ok := true
	members(line, func(name string, v []byte) bool {
		ok = utf8.ValidString(name)
		switch {
		case !ok:
		case name != "params" || v[0] != '{':
			ok = utf8.Valid(v)
		default:
			members(v, func(name string, v []byte) bool {
				ok = utf8.ValidString(name) && (name == "arguments" || utf8.Valid(v))
				return ok
			})
		}
		return ok
	})
	return ok
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

// encode is the JSON-RPC error response. Only an id go-sdk would echo
// unchanged is echoed; anything else answers to null.
func (e *rpcError) encode() []byte {
	id := e.id
	if !validID(id) {
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
