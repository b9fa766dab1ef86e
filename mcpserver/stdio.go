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
	"strconv"
	"sync"
	"time"
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

// StdioDrainTimeout bounds how long the guard holds back the end of the
// client's input while calls it passed on are still unanswered: the longest
// a create tool may wait for delivery (MaxWaitForDelivery) plus 15 seconds
// for the ledger write and the answer.
const StdioDrainTimeout = (MaxWaitForDelivery + 15) * time.Second

// GuardStdio sits between a client's byte stream and the SDK's stdio
// transport, which decodes a stream of JSON values and ends the session on
// the first one it cannot read. The guard reads lines instead: a line that
// is one JSON-RPC 2.0 object goes on to the server; anything else (not
// JSON, a batch, another version tag, nesting deeper than MaxJSONDepth, a
// line longer than MaxStdioLine) is answered with the JSON-RPC error the
// specification asks for, and the session goes on. Blank lines are skipped.
//
// When the client's input ends, the guard holds the end back until every
// request it passed on has been answered on out, for at most
// StdioDrainTimeout: the SDK ends the session on the end of its input and
// drops every call not yet answered, while a scripted client (a shell pipe)
// closes its end right after its last request and still expects the answer.
// It gives up early if a write to out fails or the transport closes the
// reader.
//
// It returns the reader to give the transport and the writer the transport
// must write through: the guard's own answers share its lock, so a line on
// out is never interleaved with another.
func GuardStdio(in io.Reader, out io.Writer, log *slog.Logger) (io.ReadCloser, io.WriteCloser) {
	return guardStdio(in, out, log, StdioDrainTimeout)
}

func guardStdio(in io.Reader, out io.Writer, log *slog.Logger, drain time.Duration) (io.ReadCloser, io.WriteCloser) {
	pr, pw := io.Pipe()
	r := &guardReader{PipeReader: pr, closed: make(chan struct{})}
	w := &lockedWriter{w: out, pending: map[string]bool{}}
	go func() {
		err := guardLines(in, pw, w, log)
		if left, waited := w.awaitAnswers(drain, r.closed); left > 0 {
			log.Warn("stdio: input ended; gave up waiting for the answers to calls still running",
				"unanswered", left, "waited", waited.Round(time.Millisecond))
		} else if waited > 0 {
			log.Debug("stdio: input ended; every call answered", "waited", waited.Round(time.Millisecond))
		}
		pw.CloseWithError(err) // nil: EOF for the transport
	}()
	return r, w
}

// guardReader is the transport's end of the pipe; closing it (the session
// ended) stops the wait for answers.
type guardReader struct {
	*io.PipeReader
	once   sync.Once
	closed chan struct{}
}

func (r *guardReader) Close() error {
	r.once.Do(func() { close(r.closed) })
	return r.PipeReader.Close()
}

func guardLines(in io.Reader, next io.Writer, out *lockedWriter, log *slog.Logger) error {
	r := bufio.NewReaderSize(in, 64<<10)
	initialized := false // an initialize request went on to the server
	for {
		line, tooLong, err := readLine(r)
		if len(line) > 0 || tooLong {
			info, msg := inspectMessage(line)
			switch {
			case tooLong:
				msg = &rpcError{code: CodeInvalidRequest, reason: fmt.Sprintf("message longer than %d bytes", MaxStdioLine)}
			case msg != nil:
			case info.method == methodInitialize:
				initialized = true
			case !initialized && info.call && info.method != "ping":
				// go-sdk answers it with code 0, which is no JSON-RPC code.
				msg = &rpcError{id: info.id, code: CodeInvalidRequest,
					reason: fmt.Sprintf("%q before initialize: a session starts with initialize", info.method)}
			}
			if msg != nil {
				log.Warn("stdio: answered a malformed line", "code", msg.code, "reason", msg.reason)
				if werr := out.writeError(msg); werr != nil {
					return werr
				}
			} else {
				// Tracked before the server can see it, so that its answer
				// cannot come first.
				out.track(line)
				if _, werr := next.Write(append(line, '\n')); werr != nil {
					return werr
				}
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
	_, e := inspectMessage(line)
	return e
}

// msgInfo is what the transports need to know of a message checkMessage
// passed.
type msgInfo struct {
	method string          // "" for a response
	id     json.RawMessage // nil for a notification or a response without one
	call   bool            // a request that needs an answer: a method and an id
}

// inspectMessage is checkMessage, and on success what the message is.
func inspectMessage(line []byte) (msgInfo, *rpcError) {
	switch {
	case len(line) == 0:
		return msgInfo{}, &rpcError{code: CodeInvalidRequest, reason: "empty message"}
	case !json.Valid(line):
		return msgInfo{}, &rpcError{code: CodeParseError, reason: "not valid JSON"}
	case line[0] == '[':
		return msgInfo{}, &rpcError{code: CodeInvalidRequest, reason: "batch requests are not supported"}
	case line[0] != '{':
		return msgInfo{}, &rpcError{code: CodeInvalidRequest, reason: "a JSON-RPC message must be a JSON object"}
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
	if e.reason != "" {
		return msgInfo{}, e
	}
	info := msgInfo{call: hasMethod && hasID}
	if hasMethod {
		info.method = decodeString(method)
	}
	if hasID {
		info.id = id
	}
	return info, nil
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
// included, per Write. It also keeps the ids of the requests the guard
// passed to the server that have no answer on w yet.
type lockedWriter struct {
	mu      sync.Mutex
	w       io.Writer
	pending map[string]bool // idKey of each request passed on and not yet answered
	failed  bool            // a write to w failed: no answer can arrive any more
	settled chan struct{}   // closed when pending empties or a write fails, while awaitAnswers waits
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(validCodes(p))
	if n > 0 {
		n = len(p) // what the caller wrote, whatever validCodes changed
	}
	if err != nil {
		l.failed = true
	} else if len(l.pending) > 0 {
		for line := range bytes.SplitSeq(p, []byte("\n")) {
			if key, ok := messageID(line, false); ok {
				delete(l.pending, key)
			}
		}
	}
	if l.settled != nil && (l.failed || len(l.pending) == 0) {
		close(l.settled)
		l.settled = nil
	}
	return n, err
}

func (l *lockedWriter) Close() error { return nil }

// validCodes gives every error answer in p (lines of JSON-RPC messages)
// that carries code 0 the code -32600 instead. go-sdk answers an error it
// did not classify with code 0, which JSON-RPC does not define: a call
// after an initialize that failed, a second initialize, initialize
// params it cannot read, a cursor it cannot decode; each is a request the
// server refuses as it stands, which is what -32600 says.
func validCodes(p []byte) []byte {
	if !bytes.Contains(p, []byte(`"code":0`)) {
		return p
	}
	var out []byte
	for line := range bytes.Lines(p) {
		out = append(out, fixCode0(line)...)
	}
	return out
}

// fixCode0 rewrites one message line whose error has code 0.
func fixCode0(line []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil || m["error"] == nil {
		return line
	}
	var e map[string]json.RawMessage
	if json.Unmarshal(m["error"], &e) != nil || string(e["code"]) != "0" {
		return line
	}
	e["code"] = json.RawMessage(strconv.Itoa(CodeInvalidRequest))
	m["error"], _ = json.Marshal(e)
	b, err := json.Marshal(m)
	if err != nil {
		return line
	}
	if bytes.HasSuffix(line, []byte("\n")) {
		b = append(b, '\n')
	}
	return b
}

// track records the id of line, a message passed to the server, if it is
// a request: a call that needs an answer. A notification needs none; an
// id given again while the first is unanswered is the same entry (the
// server refuses the second with an answer to null).
func (l *lockedWriter) track(line []byte) {
	if key, ok := messageID(line, true); ok {
		l.mu.Lock()
		l.pending[key] = true
		l.mu.Unlock()
	}
}

// unanswered is the number of requests passed on and not yet answered.
func (l *lockedWriter) unanswered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// awaitAnswers waits until every tracked request has been answered, a write
// fails, stop is closed or timeout passes. It returns how many requests are
// still unanswered, and how long it waited (0 if it did not).
func (l *lockedWriter) awaitAnswers(timeout time.Duration, stop <-chan struct{}) (left int, waited time.Duration) {
	l.mu.Lock()
	if l.failed || len(l.pending) == 0 {
		l.mu.Unlock()
		return 0, 0
	}
	settled := make(chan struct{})
	l.settled = settled
	l.mu.Unlock()

	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-settled:
	case <-stop:
	case <-timer.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled = nil
	if l.failed {
		return 0, time.Since(start)
	}
	return len(l.pending), time.Since(start)
}

// messageID returns the key of the id of line, a JSON-RPC message, if it is
// a request (request true: it has a method) or an answer (request false: no
// method, a result or an error). Two ids get the same key if they are the
// same JSON-RPC id however they are spelled: go-sdk answers with the id it
// decoded, not the bytes it read.
func messageID(line []byte, request bool) (key string, ok bool) {
	var id []byte
	hasMethod, hasAnswer := false, false
	members(line, func(name string, v []byte) bool {
		switch name {
		case "id":
			id = v
		case "method":
			hasMethod = true
		case "result", "error":
			hasAnswer = true
		}
		return true
	})
	if id == nil || (request && !hasMethod) || (!request && (hasMethod || !hasAnswer)) {
		return "", false
	}
	return idKey(id)
}

// idKey is the canonical form of a JSON-RPC id: a string or an integer.
func idKey(raw []byte) (string, bool) {
	if len(raw) > 0 && raw[0] == '"' {
		return "s" + decodeString(raw), true
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return "n" + strconv.FormatInt(n, 10), true
	}
	return "", false
}

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
