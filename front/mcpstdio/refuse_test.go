package mcpstdio

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// A server that cannot start answers every request of its client with the
// reason, ignores what needs no answer, and stops after the answer to
// initialize: the last request a client sends before it gives up.
func TestRefuseAnswersUntilInitialize(t *testing.T) {
	const msg = "mcp-front cannot start: -db /x/tickets.db: no ledger there; pass -create-db for a new one"
	inR, inW := io.Pipe()
	t.Cleanup(func() { inW.Close() }) // ends Refuse's reader, as the client's exit does
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Refuse(context.Background(), inR, outW, msg, time.Minute) }()
	answers := bufio.NewReader(outR)
	answer := func(line string) (id any, code int, message string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			l, _ := answers.ReadString('\n')
			got <- l
		}()
		var l string
		select {
		case l = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to %s", line)
		}
		var a struct {
			JSONRPC string `json:"jsonrpc"`
			ID      any    `json:"id"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &a); err != nil || a.JSONRPC != "2.0" {
			t.Fatalf("answer to %s: %q is no JSON-RPC message (%v)", line, l, err)
		}
		return a.ID, a.Error.Code, a.Error.Message
	}
	for _, quiet := range []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{not json`,
		`{"jsonrpc":"2.0","id":9,"result":{}}`,
	} {
		if _, err := io.WriteString(inW, quiet+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	if id, code, m := answer(discover); id != "server-discover-probe-1" || code != CodeCannotServe || m != msg {
		t.Errorf("server/discover answered id %v, code %d, %q; want the probe's id, %d, %q", id, code, m, CodeCannotServe, msg)
	}
	if id, code, m := answer(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`); id != float64(0) || code != CodeCannotServe || m != msg {
		t.Errorf("initialize answered id %v, code %d, %q; want 0, %d, %q", id, code, m, CodeCannotServe, msg)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Refuse: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Refuse did not return after answering initialize")
	}
	outW.Close()
	if rest, _ := io.ReadAll(answers); len(rest) != 0 {
		t.Errorf("out carried more than the two answers: %q", rest)
	}
}

// Refuse returns at the end of its input, and after its wait when the
// client never writes, having written nothing.
func TestRefuseEnds(t *testing.T) {
	var out strings.Builder
	if err := Refuse(context.Background(), strings.NewReader(""), &out, "x", time.Minute); err != nil || out.Len() != 0 {
		t.Errorf("empty input: %v, wrote %q", err, out.String())
	}
	silent, w := io.Pipe()
	defer w.Close()
	start := time.Now()
	if err := Refuse(context.Background(), silent, &out, "x", 50*time.Millisecond); err != nil || out.Len() != 0 {
		t.Errorf("silent client: %v, wrote %q", err, out.String())
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("silent client: returned after %v, before the 50ms wait", d)
	}
}
