package torture_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"ticketrelay/testkit/e2eproc"
)

const (
	msgBadID    = `Invalid Request: "id" must be a string or an integer within ±9007199254740991`
	msgNoResult = `Invalid Request: a message without "method" is a response and needs "result" or "error"`
)

type stdioRow struct {
	name string
	line []byte // one line, without its newline
	// want is the exact answer to the line (with "id": null where the line
	// has no readable id).
	want   string
	ledger int // ledger rows afterwards
}

// TestHostileStdio sends each row to a fresh `mcp-front -stdio` after the
// handshake, then a ping, then closes stdin. A line that is not one
// JSON-RPC 2.0 message (garbage, a batch, a wrong version tag, nesting past
// 1000 levels) gets the JSON-RPC error the specification asks for, and the
// session goes on: the ping after it is answered.
func TestHostileStdio(t *testing.T) {
	rows := []stdioRow{
		{name: "garbage JSON", line: []byte(`{not json`), want: rpcError(nil, -32700, "Parse error: not valid JSON")},
		// Lines, not a stream of JSON values: a truncated message is an
		// error of its own and does not swallow the ping after it.
		{name: "truncated message", line: []byte(`{"jsonrpc":"2.0","id":1,"method":`), want: rpcError(nil, -32700, "Parse error: not valid JSON")},
		{name: "not an object", line: []byte(`"tools/list"`), want: rpcError(nil, -32600, "Invalid Request: a JSON-RPC message must be a JSON object")},
		{name: "JSON-RPC 1.0", line: []byte(`{"jsonrpc":"1.0","id":2,"method":"ping"}`), want: rpcError(2, -32600, `Invalid Request: "jsonrpc" must be "2.0", got "1.0"`)},
		{name: "batch", line: batch, want: rpcError(nil, -32600, "Invalid Request: batch requests are not supported")},
		{name: "empty batch", line: []byte(`[]`), want: rpcError(nil, -32600, "Invalid Request: batch requests are not supported")},
		// encoding/json gives up on nesting past 10000 levels: not valid JSON.
		{name: "deep JSON 20000", line: deep(3, 20000), want: rpcError(nil, -32700, "Parse error: not valid JSON")},
		{name: "deep JSON 2000", line: deep(4, 2000), want: rpcError(4, -32600, "Invalid Request: nested deeper than 1000 levels")},
		{name: "deep JSON 500", line: deep(5, 500), want: toolError(5, `invalid argument "title": must be of type string, got array; nothing was written`)},
		{name: "unknown tool", line: unknownTool, want: rpcError(32, -32602, `unknown tool "delete_everything"`)},
		{name: "unknown method", line: unknownMeth, want: rpcError(34, -32601, `method not found: "tickets/drop"`)},
		{name: "params not an object", line: paramsString, want: rpcError(35, -32602, msgParams)},
		{name: "arguments not an object", line: argsString, want: toolError(36, msgArgsString)},
		{name: "wrong type", line: wrongType, want: toolError(37, msgWrongType)},
		{name: "control character in request_id", line: ctrlID, want: toolError(33, msgCtrlID)},
		{name: "invalid UTF-8", line: badUTF8, want: toolError(38, msgBadUTF8)},
		{name: "huge field", line: bigField, want: toolError(40, msgBigField)},
		{name: "valid create (control)", line: toolCall(41, "create_ticket", `{"request_id":"stdio-ok","title":"fine"}`), ledger: 1},
		// Valid JSON that go-sdk cannot decode used to end the session (and
		// with it the answers to calls in flight); an id it would change,
		// or a member it would read differently from how it was sent, used
		// to be answered under another id or to run another call.
		{name: "object id", line: []byte(`{"jsonrpc":"2.0","id":{},"method":"ping"}`), want: rpcError(nil, -32600, msgBadID)},
		{name: "boolean id", line: []byte(`{"jsonrpc":"2.0","id":true,"method":"ping"}`), want: rpcError(nil, -32600, msgBadID)},
		{name: "id out of float range", line: []byte(`{"jsonrpc":"2.0","id":-1e400,"method":"ping"}`), want: rpcError(nil, -32600, msgBadID)},
		{name: "null id", line: []byte(`{"jsonrpc":"2.0","id":null,"method":"ping"}`), want: rpcError(nil, -32600, msgBadID)},
		{name: "invalid UTF-8 in the id", line: []byte(`{"jsonrpc":"2.0","id":"a` + "\xff" + `","method":"ping"}`), want: rpcError(nil, -32600, msgBadID)},
		{name: "fractional id on a create", line: bytes.Replace(toolCall(42, "create_ticket", `{"request_id":"stdio-frac","title":"t"}`), []byte(`"id":42`), []byte(`"id":1.5`), 1), want: rpcError(nil, -32600, msgBadID)},
		{name: "id beyond 2^53 on a create", line: bytes.Replace(toolCall(43, "create_ticket", `{"request_id":"stdio-big","title":"t"}`), []byte(`"id":43`), []byte(`"id":9223372036854775808`), 1), want: rpcError(nil, -32600, msgBadID)},
		{name: "numeric method", line: []byte(`{"jsonrpc":"2.0","id":44,"method":5}`), want: rpcError(44, -32600, `Invalid Request: "method" must be a string`)},
		{name: "version tag in capitals", line: []byte(`{"JSONRPC":"2.0","id":45,"method":"ping"}`), want: rpcError(45, -32600, `Invalid Request: "jsonrpc" must be "2.0", got nothing`)},
		{name: "neither request nor response", line: []byte(`{"jsonrpc":"2.0"}`), want: rpcError(nil, -32600, msgNoResult)},
		{name: "response without result", line: []byte(`{"jsonrpc":"2.0","id":46}`), want: rpcError(46, -32600, msgNoResult)},
		{name: "error that is not an object", line: []byte(`{"jsonrpc":"2.0","id":47,"error":"x"}`)}, // go-sdk's own reason
		{name: "method twice", line: []byte(`{"jsonrpc":"2.0","id":48,"method":"ping","method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"stdio-dup","title":"t"}}}`),
			want: rpcError(48, -32600, `Invalid Request: the member "method" appears more than once`)},
		{name: "tool name twice", line: []byte(`{"jsonrpc":"2.0","id":49,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"stdio-dup2","title":"t"},"name":"find_request"}}`),
			want: rpcError(49, -32600, `Invalid Request: the member "params.name" appears more than once`)},
		{name: "RLO in title", line: rloTitle, want: toolError(59, msgRLOTitle)},
		{name: "isolate in label", line: lriLabel, want: toolError(60, msgLRILabel)},
		{name: "tag characters in title", line: tagTitle, want: toolError(61, msgTagTitle)},
		{name: "bidi controls in a body (accepted)", line: toolCall(62, "create_ticket", `{"request_id":"stdio-bidi-body","title":"t","body":"\u202eevil\u202c \u200f"}`), ledger: 1},
		// go-sdk answers these with code 0, which JSON-RPC does not define.
		{name: "second initialize", line: rpc(63, "initialize", initParams), want: rpcError(63, -32600, `duplicate "initialize" received`)},
		{name: "notification with an id", line: rpc(64, "notifications/initialized", `{}`), want: rpcError(64, -32600, `invalid request: unexpected id for "notifications/initialized"`)},
		{name: "argument twice", line: toolCall(50, "create_ticket", `{"request_id":"stdio-a","request_id":"stdio-b","title":"t"}`),
			want: toolError(50, `invalid argument "request_id": is given more than once; nothing was written`)},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			answers, stderr, db, exitErr := runStdio(t, r.line, true)
			if exitErr != nil {
				t.Errorf("mcp-front exited with %v; stderr:\n%s", exitErr, clip(stderr))
			}
			if !sameAnswer(answers["99"], `{"jsonrpc":"2.0","id":99,"result":{}}`) {
				t.Errorf("the ping after the hostile line: %q", answers["99"])
			}
			if id := answerID(r.line); r.want != "" && !sameAnswer(answers[id], r.want) {
				t.Errorf("answer to id %s:\n got %q\nwant %q", id, clip(answers[id]), clip(r.want))
			}
			if n := countRequests(t, db); n != r.ledger {
				t.Errorf("%d ledger rows, want %d", n, r.ledger)
			}
		})
	}
}

func idOf(line []byte) string {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(line, &m)
	return string(m.ID)
}

// answerID is the id the answer to line carries: the line's own, or null
// when it has none that go-sdk would echo unchanged (a string of valid
// UTF-8, or an integer within ±2^53-1).
func answerID(line []byte) string {
	id := idOf(line)
	if id != "" && id[0] == '"' && utf8.ValidString(id) {
		return id
	}
	if n, err := strconv.ParseInt(id, 10, 64); err == nil && n >= -(1<<53-1) && n <= 1<<53-1 {
		return id
	}
	return "null"
}

// runStdio runs one stdio session: handshake, line, ping, EOF (once the
// answers to the line and the ping are in, if wait). It returns the answers
// after the handshake by id, stderr, the database path and the exit error.
// Every stdout line must be a JSON-RPC message.
func runStdio(t *testing.T, line []byte, wait bool) (map[string]string, string, string, error) {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "tickets.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, frontBin, "-stdio", "-create-db", "-db", db)
	cmd.SysProcAttr = e2eproc.DieWithParent()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
		for sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
	}()
	write := func(b []byte) {
		if _, err := stdin.Write(append(bytes.Clone(b), '\n')); err != nil {
			t.Logf("write stdin: %v", err) // the server may have ended the session
		}
	}
	write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"hostile","version":"0"}}}`, protocol))
	first, ok := <-lines
	if !ok || !bytes.Contains(first, []byte(`"id":0,"result"`)) {
		t.Fatalf("initialize: %q; stderr:\n%s", first, stderr.String())
	}
	write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	write(line)
	write([]byte(`{"jsonrpc":"2.0","id":99,"method":"ping"}`))
	if !wait {
		stdin.Close()
	}
	answers := map[string]string{}
	// The answers come in any order; wait for the ping's (or the end).
	for l := range lines {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(l, &m); err != nil || m.JSONRPC != "2.0" {
			t.Errorf("stdout line is not a JSON-RPC message: %q", clip(string(l)))
			continue
		}
		answers[string(m.ID)] = string(l)
		if wait && answers["99"] != "" && answers[answerID(line)] != "" {
			break
		}
	}
	stdin.Close()
	for range lines {
	}
	err = cmd.Wait()
	return answers, stderr.String(), db, err
}

// TestStdioPipe is a scripted client: a shell pipe that writes the
// handshake and its calls at once and closes stdin right behind them
// (`printf '%s\n' INIT INITIALIZED CALL | mcp-front -stdio`). Every call
// is answered, even one still waiting for delivery when the input ends,
// every ticket is stored, and mcp-front exits 0 after the last answer. The
// SDK ends the session on the end of its input and used to drop the calls
// not yet answered: nothing stored, no answer.
func TestStdioPipe(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tickets.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var in bytes.Buffer
	for _, l := range [][]byte{
		fmt.Appendf(nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"pipe","version":"0"}}}`, protocol),
		[]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`),
		toolCall(3, "create_ticket", `{"request_id":"pipe-x","title":"t"}`),
		// Nothing delivers here: it waits the full second, then answers.
		toolCall(5, "create_ticket", `{"request_id":"pipe-y","title":"t","wait_for_delivery_seconds":1}`),
	} {
		in.Write(append(l, '\n'))
	}
	cmd := exec.CommandContext(ctx, frontBin, "-stdio", "-create-db", "-db", db)
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Stdin = &in // closed as soon as it is all written
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-front: %v; stderr:\n%s", err, clip(stderr.String()))
	}
	answers := map[string]json.RawMessage{}
	for l := range bytes.Lines(stdout.Bytes()) {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Result  json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(l, &m); err != nil || m.JSONRPC != "2.0" || m.Result == nil {
			t.Errorf("stdout line is not a JSON-RPC result: %q", clip(string(l)))
			continue
		}
		answers[string(m.ID)] = m.Result
	}
	if len(answers) != 3 || answers["0"] == nil {
		t.Errorf("answers to ids %v, want 0, 3 and 5; stdout:\n%s\nstderr:\n%s", slices.Sorted(maps.Keys(answers)), clip(stdout.String()), clip(stderr.String()))
	}
	for id, requestID := range map[string]string{"3": "pipe-x", "5": "pipe-y"} {
		var r struct {
			IsError bool `json:"isError"`
			Out     struct {
				RequestID string `json:"request_id"`
				TicketID  string `json:"ticket_id"`
				Status    string `json:"status"`
			} `json:"structuredContent"`
		}
		if err := json.Unmarshal(answers[id], &r); err != nil || r.IsError || r.Out.RequestID != requestID || r.Out.TicketID == "" || r.Out.Status != "queued" {
			t.Errorf("answer to id %s: %s; want a queued ticket for %s", id, clip(string(answers[id])), requestID)
		}
	}
	if n := countRequests(t, db); n != 2 {
		t.Errorf("%d ledger rows, want 2", n)
	}
}

// TestStdioBeforeInitialize: a call before initialize (other than ping)
// gets -32600 from the guard (go-sdk answered it with code 0, which
// JSON-RPC does not define), and the session starts normally after it.
func TestStdioBeforeInitialize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var in bytes.Buffer
	for _, l := range [][]byte{
		rpc(1, "tools/list", `{}`),
		rpc(2, "ping", `{}`),
		rpc(3, "initialize", initParams),
		[]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`),
		rpc(4, "tools/list", `{}`),
	} {
		in.Write(append(l, '\n'))
	}
	cmd := exec.CommandContext(ctx, frontBin, "-stdio", "-create-db", "-db", filepath.Join(t.TempDir(), "tickets.db"))
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-front: %v; stderr:\n%s", err, clip(stderr.String()))
	}
	answers := map[string]string{}
	for l := range bytes.Lines(stdout.Bytes()) {
		answers[idOf(l)] = string(bytes.TrimSpace(l))
	}
	if want := rpcError(1, -32600, `Invalid Request: "tools/list" before initialize: a session starts with initialize`); !sameAnswer(answers["1"], want) {
		t.Errorf("tools/list before initialize:\n got %s\nwant %s", answers["1"], want)
	}
	if !sameAnswer(answers["2"], `{"jsonrpc":"2.0","id":2,"result":{}}`) {
		t.Errorf("ping before initialize: %s", answers["2"])
	}
	for _, id := range []string{"3", "4"} {
		if !strings.Contains(answers[id], `"result"`) {
			t.Errorf("answer to id %s: %s", id, clip(answers[id]))
		}
	}
	if !strings.Contains(answers["4"], `"create_ticket"`) {
		t.Errorf("tools/list after initialize: %s", clip(answers["4"]))
	}
}
