package mcpstdio

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"ticketrelay/front/mcptools"
	"ticketrelay/testkit/testio"
	"ticketrelay/testkit/testwait"
)

// Claude Code's first line over stdio (2.1.332), and a later request of the
// same protocol.
const (
	discover = `{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","version":"2.1.332"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}}}}`
	modernList = `{"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"claude-code","version":"2.1.332"},"io.modelcontextprotocol/clientCapabilities":{}}},"jsonrpc":"2.0","id":13}`
)

// The guard passes JSON-RPC lines through unchanged and answers everything
// else itself, in order, without ending the stream.
func TestGuard(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"` + strings.Repeat("a", MaxLine) + `"}}`
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":10,"method":"tools/list"}`, // before initialize: go-sdk would answer code 0
		discover,   // 2026-07-28 needs no initialize
		modernList, // nor does any request that names it
		`{"jsonrpc":"2.0","id":"p","method":"server/discover"}`, // a legacy probe: the server answers -32601
		`{"jsonrpc":"2.0","id":14,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`,
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`,
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
	// Nothing answers the requests passed on here (ids 1, 0, 11 and 4): no
	// time to wait for answers once the input ends.
	r, w := guard(strings.NewReader(in), &out, slog.New(slog.NewTextHandler(io.Discard, nil)), 0)
	passed, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if w.Close() != nil {
		t.Fatal("writer close")
	}
	wantPassed := `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n" +
		discover + "\n" + modernList + "\n" +
		`{"jsonrpc":"2.0","id":"p","method":"server/discover"}` + "\n" +
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}` + "\n" +
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
		{ID: float64(10)}, {ID: float64(14)}, {ID: nil}, {ID: nil}, {ID: "x"}, {ID: float64(3)}, {ID: nil},
		{ID: nil}, {ID: float64(5)}, {ID: float64(6)}, {ID: float64(7)}, {ID: float64(8)},
		{ID: nil},
	}
	codes := []int{-32600, -32600, -32700, -32600, -32600, -32600, -32600, -32600, -32600, -32600, -32600, -32700, -32600}
	reasons := []string{`"tools/list" before initialize`, `"tools/list" before initialize`, "not valid JSON", "batch requests", `"jsonrpc" must be "2.0"`, "nested deeper than 1000", "must be a JSON object",
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

// A client that closes its input right after its last request (a shell
// pipe) still gets every answer: the guard holds the end of the input back
// from the server, whose session would drop the calls still running, until
// every request it passed on has been answered.
func TestGuardStdioHoldsEOFUntilAnswered(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`, // no answer due
		`{"jsonrpc":"2.0","id":"\u0061b","method":"ping"}`,       // answered as "ab"
		`{not json`,                            // answered by the guard
		`{"jsonrpc":"2.0","id":7,"result":{}}`, // the client's answer to the server
	}, "\n") + "\n"
	var out testio.Buffer
	r, w := Guard(strings.NewReader(in), &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	br := bufio.NewReader(r)
	for i := range 4 { // every line but the malformed one
		if _, err := br.ReadBytes('\n'); err != nil {
			t.Fatalf("line %d passed on: %v", i, err)
		}
	}
	type end struct {
		rest []byte
		err  error
	}
	ended := make(chan end, 1)
	go func() {
		rest, err := io.ReadAll(br)
		ended <- end{rest, err}
	}()
	notYet := func(when string) {
		t.Helper()
		select {
		case e := <-ended:
			t.Fatalf("%s, the server's input ended (%q, %v): calls 1 and \"ab\" were passed on and not both answered", when, e.rest, e.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	notYet("before any answer")
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"roots/list"}` + "\n",                                                // the server's own request: no answer
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}` + "\n", // nor this
		`{"jsonrpc":"2.0","id":"ab","result":{}}` + "\n",
	} {
		if _, err := w.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	notYet(`with "ab" answered`)
	if _, err := w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-ended:
		if e.err != nil || len(e.rest) != 0 {
			t.Fatalf("end of the server's input: %q, %v; want a clean EOF", e.rest, e.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("every call answered, but the server's input did not end within 5s")
	}
	if got := strings.Count(out.String(), "\n"); got != 5 {
		t.Errorf("%d lines on out, want 5 (the guard's answer and the 4 written):\n%s", got, out.String())
	}
}

// The guard's bookkeeping: which messages it waits answers for, which
// writes count as answers, and what ends the wait besides the last answer.
func TestGuardStdioBookkeeping(t *testing.T) {
	w := &lockedWriter{w: io.Discard, pending: map[string]bool{}}
	steps := []struct {
		track, write string // one of them
		want         int    // unanswered afterwards
	}{
		{track: `{"jsonrpc":"2.0","id":1,"method":"ping"}`, want: 1},
		{track: `{"jsonrpc":"2.0","id":"a","method":"ping"}`, want: 2},
		{track: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, want: 2},
		{track: `{"jsonrpc":"2.0","id":3,"result":{}}`, want: 2},            // the client answering the server
		{track: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, want: 2},  // id 1 again: refused by the server with an answer to null
		{track: `{"jsonrpc":"2.0","id":"\u0061","method":"ping"}`, want: 2}, // "a" again, spelled differently
		{track: `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`, want: 3},
		{write: `{"jsonrpc":"2.0","id":1,"method":"roots/list"}`, want: 3},      // the server's request, not an answer
		{write: `{"jsonrpc":"2.0","id":2,"result":{}}`, want: 3},                // nothing asked under id 2
		{write: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}`, want: 3}, // the refusal of the second id 1
		{write: `{"jsonrpc":"2.0","id":"1","result":{}}`, want: 3},              // the string "1" is not the number 1
		{write: `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}`, want: 2},
		{write: `{"jsonrpc":"2.0","method":"notifications/message","params":{}}` + "\n" + `{"jsonrpc":"2.0","result":{},"id":"a"}`, want: 1},
	}
	for i, s := range steps {
		if s.track != "" {
			w.track([]byte(s.track))
		} else if _, err := w.Write([]byte(s.write + "\n")); err != nil {
			t.Fatal(err)
		}
		if got := w.unanswered(); got != s.want {
			t.Fatalf("step %d (%s%s): %d unanswered, want %d", i, s.track, s.write, got, s.want)
		}
	}

	// The last open call is never answered: the wait ends at the timeout.
	start := time.Now()
	if left, waited := w.awaitAnswers(100*time.Millisecond, nil); left != 1 || waited < 100*time.Millisecond {
		t.Errorf("timeout: %d left after %v; want 1 after 100ms", left, waited)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the 100ms wait took %v", d)
	}
	// The transport closed the reader: no answer can be written any more.
	stop := make(chan struct{})
	close(stop)
	if left, _ := w.awaitAnswers(time.Minute, stop); left != 1 {
		t.Errorf("stopped: %d left, want 1", left)
	}
	// The answer arrives while the guard waits.
	done := make(chan int, 1)
	go func() {
		left, _ := w.awaitAnswers(time.Minute, nil)
		done <- left
	}()
	testwait.For(t, 5*time.Second, "the guard waiting", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.settled != nil
	})
	if _, err := w.Write([]byte(`{"jsonrpc":"2.0","id":-9007199254740991,"result":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case left := <-done:
		if left != 0 {
			t.Errorf("answered: %d left", left)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the last answer did not end the wait")
	}
	if left, waited := w.awaitAnswers(time.Minute, nil); left != 0 || waited != 0 {
		t.Errorf("nothing open: waited %v with %d left", waited, left)
	}

	// Stdout is gone: no answer can arrive, the wait ends at once, whether
	// the write fails during the wait or before it.
	broken := &lockedWriter{w: failWriter{}, pending: map[string]bool{}}
	broken.track([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	go func() {
		testwait.Until(5*time.Second, func() bool {
			broken.mu.Lock()
			defer broken.mu.Unlock()
			return broken.settled != nil
		})
		broken.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/progress"}` + "\n"))
	}()
	if left, waited := broken.awaitAnswers(time.Minute, nil); left != 0 || waited > 5*time.Second {
		t.Errorf("stdout failed during the wait: %d left after %v; want the wait to end at once", left, waited)
	}
	if left, waited := broken.awaitAnswers(time.Minute, nil); left != 0 || waited != 0 {
		t.Errorf("stdout failed before the wait: waited %v with %d left", waited, left)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

// A session that ends (the transport closes its reader) stops the wait for
// answers at once, not after DrainTimeout.
func TestGuardStdioStopsWaitingWhenSessionEnds(t *testing.T) {
	var logs testio.Buffer
	r, _ := Guard(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"), io.Discard, slog.New(slog.NewTextHandler(&logs, nil)))
	br := bufio.NewReader(r)
	if _, err := br.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the guard to give up on call 1", func() bool {
		l := logs.String()
		return strings.Contains(l, "gave up waiting") && strings.Contains(l, "unanswered=1")
	})
	if _, err := br.ReadByte(); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("read after close: %v, want io.ErrClosedPipe", err)
	}
}

// go-sdk answers an error it did not classify with code 0, which JSON-RPC
// does not define; the writer gives such answers -32600, and leaves every
// other line as it was.
func TestGuardStdioValidCodes(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":3,"error":{"code":0,"message":"duplicate \"initialize\" received"}}` + "\n": `{"error":{"code":-32600,"message":"duplicate \"initialize\" received"},"id":3,"jsonrpc":"2.0"}` + "\n",
		`{"jsonrpc":"2.0","id":"a","error":{"code":0,"message":"x","data":{"code":0}}}`:                    `{"error":{"code":-32600,"data":{"code":0},"message":"x"},"id":"a","jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"m"}}` + "\n":                            `{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"m"}}` + "\n",
		`{"jsonrpc":"2.0","id":5,"result":{"text":"\"code\":0"}}` + "\n":                                   `{"jsonrpc":"2.0","id":5,"result":{"text":"\"code\":0"}}` + "\n",
		`{"jsonrpc":"2.0","id":5,"result":{"code":0}}` + "\n" + `{"jsonrpc":"2.0","id":6,"error":{"code":0,"message":"y"}}` + "\n": `{"jsonrpc":"2.0","id":5,"result":{"code":0}}` + "\n" +
			`{"error":{"code":-32600,"message":"y"},"id":6,"jsonrpc":"2.0"}` + "\n",
	} {
		var out bytes.Buffer
		w := &lockedWriter{w: &out, pending: map[string]bool{}}
		if n, err := w.Write([]byte(in)); err != nil || n != len(in) {
			t.Fatalf("Write: %d, %v; want %d", n, err, len(in))
		}
		if out.String() != want {
			t.Errorf("wrote %q\nwant  %q", out.String(), want)
		}
	}
}

// TestDrainTimeoutCoversTheLongestWait: the guard waits for the answer to
// a create call that waits for delivery as long as the tool may wait, and
// 15 seconds more for the write and the answer.
func TestDrainTimeoutCoversTheLongestWait(t *testing.T) {
	if want := (mcptools.MaxWaitForDelivery + 15) * time.Second; DrainTimeout != want {
		t.Errorf("DrainTimeout %s, want %s (mcptools.MaxWaitForDelivery + 15 s)", DrainTimeout, want)
	}
}
