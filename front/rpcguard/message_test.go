package rpcguard_test

import (
	"encoding/json"
	"strings"
	"testing"

	"ticketrelay/front/rpcguard"
)

// TestCheck: each kind of message go-sdk would misread is refused with
// the code and reason both transports answer; a message it reads as sent
// passes with what the transports need to know of it.
func TestCheck(t *testing.T) {
	deep := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":` + strings.Repeat("[", rpcguard.MaxJSONDepth) +
		strings.Repeat("]", rpcguard.MaxJSONDepth) + `}}`
	for _, c := range []struct {
		name, line string
		code       int    // 0: passes
		reason     string // in the error's message
		id         string // the id the answer echoes
	}{
		{"empty", ``, rpcguard.CodeInvalidRequest, "empty message", "null"},
		{"not JSON", `{"jsonrpc":`, rpcguard.CodeParseError, "not valid JSON", "null"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, rpcguard.CodeInvalidRequest, "batch", "null"},
		{"not an object", `"ping"`, rpcguard.CodeInvalidRequest, "must be a JSON object", "null"},
		{"member twice", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, rpcguard.CodeInvalidRequest, `"id" appears more than once`, "1"},
		{"params member twice", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a","name":"b"}}`,
			rpcguard.CodeInvalidRequest, `"params.name" appears more than once`, "3"},
		{"other version", `{"jsonrpc":"1.0","id":4,"method":"ping"}`, rpcguard.CodeInvalidRequest, `"jsonrpc" must be "2.0"`, "4"},
		{"too deep", deep, rpcguard.CodeInvalidRequest, "nested deeper than", "1"},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, rpcguard.CodeInvalidRequest, `"id" must be a string or an integer`, "null"},
		{"method not a string", `{"jsonrpc":"2.0","id":5,"method":7}`, rpcguard.CodeInvalidRequest, `"method" must be a string`, "5"},
		{"invalid UTF-8 in the method", "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"p\xffng\"}", rpcguard.CodeParseError, "not valid UTF-8", "6"},
		{"response without result", `{"jsonrpc":"2.0","id":7}`, rpcguard.CodeInvalidRequest, `needs "result" or "error"`, "7"},
		{"call", `{"jsonrpc":"2.0","id":"a","method":"tools/list"}`, 0, "", ""},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, 0, "", ""},
		{"invalid UTF-8 in the arguments", "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"t\",\"arguments\":{\"title\":\"\xff\"}}}", 0, "", ""},
		{"response", `{"jsonrpc":"2.0","id":9,"result":{}}`, 0, "", ""},
	} {
		m, e := rpcguard.Check([]byte(c.line))
		if c.code == 0 {
			if e != nil {
				t.Errorf("%s: refused: %+v", c.name, e)
			}
			continue
		}
		if e == nil {
			t.Errorf("%s: passed as %+v, want code %d", c.name, m, c.code)
			continue
		}
		var answer struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(e.Encode(), &answer); err != nil {
			t.Fatalf("%s: answer %s: %v", c.name, e.Encode(), err)
		}
		if answer.Error.Code != c.code || !strings.Contains(answer.Error.Message, c.reason) || string(answer.ID) != c.id {
			t.Errorf("%s: answer %s, want code %d, id %s and %q", c.name, e.Encode(), c.code, c.id, c.reason)
		}
	}
}

// TestCheckMessage: what a message that passes is, for the transports.
func TestCheckMessage(t *testing.T) {
	for _, c := range []struct {
		line, method, id string
		call             bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, rpcguard.MethodInitialize, "1", true},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "notifications/initialized", "", false},
		{`{"jsonrpc":"2.0","id":"r","result":{}}`, "", `"r"`, false},
		{`{"jsonrpc":"2.0","id":2,"method":"tools\/list"}`, "tools/list", "2", true},
	} {
		m, e := rpcguard.Check([]byte(c.line))
		if e != nil || m.Method != c.method || string(m.ID) != c.id || m.Call != c.call {
			t.Errorf("%s: %+v (id %s), %+v; want method %q, id %s, call %v", c.line, m, m.ID, e, c.method, c.id, c.call)
		}
	}
}
