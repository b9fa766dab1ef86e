package mcpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// The guard passes JSON-RPC lines through unchanged and answers everything
// else itself, in order, without ending the stream.
func TestGuardStdio(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"` + strings.Repeat("a", MaxStdioLine) + `"}}`
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{not json`,
		``,
		`  {"jsonrpc":"2.0","method":"notifications/initialized"}  `,
		`[{"jsonrpc":"2.0","id":2,"method":"ping"}]`,
		`{"jsonrpc":"1.0","id":"x","method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		`17`,
		`{"jsonrpc":"2.0","id":{},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":5,"method":"ping","method":"x"}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"a","name":"b"}}`,
		`{"jsonrpc":"2.0","id":7}`,
		`{"jsonrpc":"2.0","id":8,"method":"ping","params":{"_meta":{"x":"` + "\xff" + `"}}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"x","arguments":{"t":"` + "\xff" + `"}}}`,
		`{"jsonrpc":"2.0","id":12,"result":{}}`,
		long,
		`{"jsonrpc":"2.0","id":4,"method":"ping","params":{"s":"[[[{{{"}}`,
	}, "\n") // no newline after the last line: EOF ends it
	var out bytes.Buffer
	r, w := GuardStdio(strings.NewReader(in), &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	passed, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if w.Close() != nil {
		t.Fatal("writer close")
	}
	wantPassed := `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"x","arguments":{"t":"` + "\xff" + `"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":12,"result":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":4,"method":"ping","params":{"s":"[[[{{{"}}` + "\n"
	if string(passed) != wantPassed {
		t.Errorf("passed to the server:\n%s\nwant:\n%s", passed, wantPassed)
	}
	type answer struct {
		ID    any `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	want := []answer{
		{ID: nil}, {ID: nil}, {ID: "x"}, {ID: float64(3)}, {ID: nil},
		{ID: nil}, {ID: float64(5)}, {ID: float64(6)}, {ID: float64(7)}, {ID: float64(8)},
		{ID: nil},
	}
	codes := []int{-32700, -32600, -32600, -32600, -32600, -32600, -32600, -32600, -32600, -32700, -32600}
	reasons := []string{"not valid JSON", "batch requests", `"jsonrpc" must be "2.0"`, "nested deeper than 1000", "must be a JSON object",
		`"id" must be a string or an integer`, `"method" appears more than once`, `"params.name" appears more than once`, `needs "result" or "error"`, "not valid UTF-8",
		"longer than"}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d answers, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		var a answer
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("answer %d is not JSON: %q", i, l)
		}
		if a.ID != want[i].ID || a.Error.Code != codes[i] || !strings.Contains(a.Error.Message, reasons[i]) {
			t.Errorf("answer %d = %s; want id %v, code %d, message with %q", i, l, want[i].ID, codes[i], reasons[i])
		}
	}
}
