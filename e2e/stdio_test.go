package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/e2eproc"
)

// mcp-front -stdio under a real MCP client: stdout carries JSON-RPC and
// nothing else (the go-sdk client drops the session on one stray line), even
// with debug logging and concurrent calls.
//
// The command run by mcp.CommandTransport is this test binary in tap mode
// (see runTap): it runs mcp-front with the same stdin and stderr, forwards
// its stdout unchanged, checks every line of it, and exits non-zero if one is
// not a JSON-RPC 2.0 message, so a stray byte fails the test even where the
// client might not notice it.
func TestStdioCarriesOnlyJSONRPC(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "tickets.db")
	logPath := filepath.Join(dir, "mcp-front-stdio.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	t.Cleanup(func() {
		if t.Failed() {
			e2eproc.DumpLog(t, "mcp-front -stdio", logPath)
		}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-stdio", "-db", db, "-log-level", "debug")
	cmd.Env = e2eproc.Environ(tapEnv + "=" + frontBin)
	cmd.Stderr = logf

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "ticketrelay-e2e-stdio", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect over stdio: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			cs.Close()
		}
	})

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
	}
	if !names[createTool] || !names["find_request"] {
		t.Fatalf("tools/list: %v, want create_ticket and find_request", names)
	}

	// 4 clients at once on the one session, so that answers race for stdout.
	const workers, perWorker = 4, 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, a...))
	}
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := fmt.Sprintf("stdio-w%d-%03d", w, i)
				r, err := create(ctx, cs, ticketArgs(id, "Ticket over stdio "+id))
				if err != nil {
					fail("create_ticket %s: %v", id, err)
					return
				}
				if r.Replayed {
					fail("create_ticket %s: replayed on the first call", id)
				}
				st, err := find(ctx, cs, id)
				if err != nil {
					fail("find_request %s: %v", id, err)
					return
				}
				// No dispatcher runs: the request stays in the outbox.
				if st.Status != "queued" || st.TicketID != r.TicketID {
					fail("find_request %s: %+v, want queued with ticket %s", id, st, r.TicketID)
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failed calls over stdio, first: %s", len(failures), failures[0])
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("the session did not survive the calls: ping: %v", err)
	}

	// Closing stdin stops mcp-front; the tap exits with its status, or 3 if
	// stdout carried anything but JSON-RPC lines.
	closed = true
	if err := cs.Close(); err != nil {
		t.Errorf("closing the stdio session: %v (mcp-front exited non-zero, or its stdout was not pure JSON-RPC)", err)
	}
	logf.Close()
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "TAP VIOLATION") {
		t.Errorf("mcp-front wrote something other than JSON-RPC lines to stdout (see its stderr)")
	}
	if !strings.Contains(string(log), "mcp-front serving MCP on stdio") {
		t.Errorf("mcp-front's start-up log line is not on stderr")
	}

	n := workers * perWorker
	if c := countRows(t, openDB(t, db)); c != (rowCounts{n, n, n}) {
		t.Errorf("rows (requests, tickets, outbox) = %+v, want %d of each", c, n)
	}
}

// The tap itself must catch what the client might not: a line that is not
// JSON-RPC, a JSON value that is not a JSON-RPC message, an unterminated
// last line.
func TestStdoutTapCatchesStrayOutput(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, c := range []struct {
		out  string
		code int
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n", 0},
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\nstarting up\n", 3},
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" + `{"id":2}` + "\n", 3},
		{`{"jsonrpc":"2.0","id":1} {"jsonrpc":"2.0","id":2}` + "\n", 3},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, 3},
		{"\n", 3},
	} {
		cmd := exec.Command(self, "-c", `printf '%s' "$1"`, "sh", c.out)
		cmd.Env = append(os.Environ(), tapEnv+"="+sh)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || stdout.String() != c.out {
			t.Errorf("tap over %q: exit %d, forwarded %q; want exit %d and the bytes unchanged (stderr %q)",
				c.out, code, stdout.String(), c.code, stderr.String())
		}
	}
}

// TestStdioSurvivesMalformedMessages: a line that is valid JSON but not a
// message go-sdk can decode (an object id, a numeric method, no method and
// no id, a name in the wrong case) used to end the stdio session, and with
// it the answers to calls still running. Each must be answered with an
// error while the calls sent before and after it are answered too.
func TestStdioSurvivesMalformedMessages(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tickets.db")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, frontBin, "-stdio", "-db", db)
	cmd.Env = e2eproc.Environ("TICKETRELAY_METRICS_LISTEN=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	create := func(id int, rid string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"request_id":%q,"title":"t"}}}`, id, createTool, rid)
	}
	lines := []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	for i := range 5 {
		lines = append(lines, create(10+i, fmt.Sprintf("stdio-bad-%d", i)))
	}
	bad := []string{
		`{"jsonrpc":"2.0","id":{},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":-1e400,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"a` + "\xff" + `","method":"ping"}`,
		`{"jsonrpc":"2.0","id":20,"method":5}`,
		`{"jsonrpc":"2.0","id":21,"error":"x"}`,
		`{"jsonrpc":"2.0","id":25}`,
		`{"jsonrpc":"2.0"}`,
		`{"JSONRPC":"2.0","id":22,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":23,"method":"ping","method":"tools/call","params":{"name":"` + createTool + `","arguments":{"request_id":"stdio-dup-method","title":"t"}}}`,
		`{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"` + createTool + `","arguments":{"request_id":"stdio-x"},"name":"find_request"}}`,
	}
	lines = append(lines, bad...)
	// A well-formed response to a request the server never sent is no
	// error, and gets no answer.
	lines = append(lines, `{"jsonrpc":"2.0","id":99,"result":{}}`)
	lines = append(lines, create(30, "stdio-bad-after"), `{"jsonrpc":"2.0","id":31,"method":"ping"}`)
	if _, err := io.WriteString(stdin, strings.Join(lines, "\n")+"\n"); err != nil {
		t.Fatal(err)
	}

	// Answers by id; errors to an id that could not be echoed come as null.
	answers := map[string]string{}
	nulls := 0
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	want := 1 + 5 + len(bad) + 2 // initialize, creates, bad lines, create, ping
	for len(answers)+nulls < want && sc.Scan() {
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout line is not JSON: %q", sc.Text())
		}
		if string(m.ID) == "null" {
			if m.Error == nil || m.Error.Code != -32600 {
				t.Errorf("answer to null id is not an Invalid Request error: %s", sc.Text())
			}
			nulls++
			continue
		}
		answers[string(m.ID)] = sc.Text()
	}
	if len(answers)+nulls < want {
		t.Fatalf("%d answers before stdout ended (%v), want %d; stderr:\n%s", len(answers)+nulls, sc.Err(), want, stderr.String())
	}
	for _, id := range []string{"10", "11", "12", "13", "14", "30"} {
		if a := answers[id]; !strings.Contains(a, `"result"`) || strings.Contains(a, `"isError":true`) {
			t.Errorf("create id %s: %q", id, a)
		}
	}
	if !strings.Contains(answers["31"], `"result"`) {
		t.Errorf("ping after the bad lines: %q", answers["31"])
	}
	// Lines with an id that can be echoed get their error under it.
	for _, id := range []string{"20", "21", "22", "23", "24", "25"} {
		if a := answers[id]; !strings.Contains(a, `"code":-32600`) {
			t.Errorf("bad line with id %s: %q, want an Invalid Request error", id, a)
		}
	}
	if nulls != 8 {
		t.Errorf("%d errors to a null id, want 8 (one per line whose id cannot be echoed)", nulls)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("mcp-front exited with %v after stdin closed; stderr:\n%s", err, stderr.String())
	}
	// The five creates before the bad lines and the one after; nothing of
	// the duplicated method or the duplicated tool name.
	if c := countRows(t, openDB(t, db)); c != (rowCounts{6, 6, 6}) {
		t.Errorf("rows (requests, tickets, outbox) = %+v, want 6 of each", c)
	}
}
