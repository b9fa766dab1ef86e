// Package rpcguard checks a raw JSON-RPC message before go-sdk reads it, so
// that both transports answer what go-sdk would misread, or would answer
// with a code JSON-RPC does not define, with the JSON-RPC error the
// specification asks for. The HTTP transport (mcphttp) checks each POST
// body with it, the stdio guard (mcpstdio) each line: a client gets the
// same answer over both.
package rpcguard

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"ticketrelay/internal/jsonscan"
)

// JSON-RPC error codes of the answers to messages the guard refuses.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
)

// MaxJSONDepth is the deepest nesting accepted, over HTTP and stdio alike.
const MaxJSONDepth = 1000

// MethodInitialize is the method that opens a session.
const MethodInitialize = "initialize"

// Error is a JSON-RPC error answer to a message that never reached the
// SDK.
type Error struct {
	ID     json.RawMessage // null when the message has no readable id
	Code   int
	Reason string
}

// Message is what the transports need to know of a message Check passed.
type Message struct {
	Method string          // "" for a response
	ID     json.RawMessage // nil for a notification or a response without one
	Call   bool            // a request that needs an answer: a method and an id
}

// fields are the members of a message that Check looks at.
type fields struct {
	version, id, method, params []byte
	hasID, hasMethod            bool
	hasError, hasResult         bool
	dup                         string // the first member (or member of params) given twice
}

// Check returns what a message is if it is one JSON-RPC 2.0 message go-sdk
// will read as sent, and otherwise the error to answer: not JSON or not
// UTF-8 (-32700); a batch, not an object, a member given twice, another
// version tag, nesting deeper than MaxJSONDepth, an id other than a string
// or a safe integer, a method that is not a string, a response with neither
// result nor error, or anything else go-sdk's decoder refuses (-32600). Over
// stdio a message go-sdk cannot decode would end the session, and with it
// the answers to every call still running.
//
// Invalid UTF-8 inside a tool's arguments passes: the argument decoder
// answers it with a tool error that names the argument.
func Check(line []byte) (Message, *Error) {
	switch {
	case len(line) == 0:
		return Message{}, &Error{Code: CodeInvalidRequest, Reason: "empty message"}
	case !json.Valid(line):
		return Message{}, &Error{Code: CodeParseError, Reason: "not valid JSON"}
	case line[0] == '[':
		return Message{}, &Error{Code: CodeInvalidRequest, Reason: "batch requests are not supported"}
	case line[0] != '{':
		return Message{}, &Error{Code: CodeInvalidRequest, Reason: "a JSON-RPC message must be a JSON object"}
	}
	f := scan(line)
	if e := f.refuse(line); e != nil {
		return Message{}, e
	}
	m := Message{Call: f.hasMethod && f.hasID}
	if f.hasMethod {
		m.Method = jsonscan.DecodeString(f.method)
	}
	if f.hasID {
		m.ID = f.id
	}
	return m, nil
}

// scan reads the members of line, a JSON object.
func scan(line []byte) fields {
	var f fields
	f.dup = jsonscan.Duplicate(line, func(name string, v []byte) {
		switch name {
		case "jsonrpc":
			f.version = v
		case "id":
			f.id, f.hasID = v, true
		case "method":
			f.method, f.hasMethod = v, true
		case "params":
			f.params = v
		case "error":
			f.hasError = true
		case "result":
			f.hasResult = true
		}
	})
	if f.dup == "" && len(f.params) > 0 {
		if f.dup = jsonscan.Duplicate(f.params, nil); f.dup != "" {
			f.dup = "params." + f.dup
		}
	}
	return f
}

// refuse is the error to answer to line, whose members are f, or nil.
func (f *fields) refuse(line []byte) *Error {
	e := &Error{ID: f.id, Code: CodeInvalidRequest}
	switch {
	case f.dup != "":
		e.Reason = fmt.Sprintf("the member %q appears more than once", f.dup)
	case !bytes.Equal(f.version, []byte(`"2.0"`)) && jsonscan.DecodeString(f.version) != "2.0":
		e.Reason = fmt.Sprintf(`"jsonrpc" must be "2.0", got %s`, cmp.Or(string(f.version), "nothing"))
	case tooDeep(line, MaxJSONDepth):
		e.Reason = fmt.Sprintf("nested deeper than %d levels", MaxJSONDepth)
	case f.hasID && !ValidID(f.id):
		e.Reason = fmt.Sprintf(`"id" must be a string or an integer within ±%d`, maxSafeID)
	case f.hasMethod && f.method[0] != '"':
		e.Reason = `"method" must be a string`
	case !utf8.Valid(line) && !validOutsideArguments(line):
		e.Code, e.Reason = CodeParseError, "not valid UTF-8"
	case !f.hasMethod && f.hasResult == f.hasError:
		e.Reason = `a message without "method" is a response and needs "result" or "error"`
	case !f.hasMethod || f.hasError || f.hasResult:
		// A response, or something that is neither: rare, so it pays for
		// a second decode by go-sdk's own reader.
		if _, err := jsonrpc.DecodeMessage(line); err != nil {
			e.Reason = "not a JSON-RPC message: " + err.Error()
		}
	}
	if e.Reason == "" {
		return nil
	}
	return e
}

// validOutsideArguments reports whether every name and value of the
// message but the values inside params.arguments is valid UTF-8.
func validOutsideArguments(line []byte) bool {
	ok := true
	jsonscan.Members(line, func(name string, v []byte) bool {
		ok = utf8.ValidString(name)
		switch {
		case !ok:
		case name != "params" || v[0] != '{':
			ok = utf8.Valid(v)
		default:
			jsonscan.Members(v, func(name string, v []byte) bool {
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

// Encode is the JSON-RPC error response. Only an id go-sdk would echo
// unchanged is echoed; anything else answers to null.
func (e *Error) Encode() []byte {
	id := e.ID
	if !ValidID(id) {
		id = json.RawMessage("null")
	}
	title := "Invalid Request"
	if e.Code == CodeParseError {
		title = "Parse error"
	}
	b, _ := json.Marshal(map[string]any{ // cannot fail: plain values
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": e.Code, "message": title + ": " + e.Reason},
	})
	return b
}

// maxSafeID is the largest integer every JSON reader holds exactly (2^53-1):
// a larger or fractional id would come back changed.
const maxSafeID = 1<<53 - 1

// ValidID reports whether raw is a JSON-RPC id MCP allows, and that go-sdk
// echoes unchanged: a string of valid UTF-8, or an integer within ±2^53-1.
// (MCP forbids null; go-sdk turns 1.5 into 1 and 2^63 into -2^63.)
func ValidID(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		return utf8.Valid(raw)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && n >= -maxSafeID && n <= maxSafeID
}
