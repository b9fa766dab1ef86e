package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
)

const deliverTimeout = 20 * time.Second

// checkOneLine asserts that the local target holds exactly one line for id,
// carrying ticketID.
func checkOneLine(t *testing.T, s *stack, id, ticketID string) {
	t.Helper()
	lines := readJSONL(t, s.jsonl)
	if n := linesFor(lines, id); n != 1 {
		t.Fatalf("tickets.jsonl has %d lines for %s, want exactly 1 (file has %d lines)", n, id, len(lines))
	}
	for _, l := range lines {
		if l.Key == id && (l.Ticket.TicketID != ticketID || l.Ticket.RequestID != id) {
			t.Errorf("tickets.jsonl line for %s carries ticket %s of request %s, want ticket %s", id, l.Ticket.TicketID, l.Ticket.RequestID, ticketID)
		}
	}
}

// Claude Code's case: the call completed but the answer never reached the
// client; it calls again, with the same arguments, on a new session.
func TestLostResponseReplaysOnNewSession(t *testing.T) {
	s := startStack(t)
	const id = "8d0c1d9e-lost-response-1"
	args := ticketArgs(id, "Checkout fails with 502 for EU customers")

	cs1 := e2eproc.Connect(t, s.url)
	lost := mustCreate(t, cs1, args) // the client never sees this answer...
	if err := cs1.Close(); err != nil {
		t.Fatalf("closing the first session: %v", err)
	}

	cs2 := e2eproc.Connect(t, s.url) // ...and calls again on a new session
	if cs2.ID() != "" && cs2.ID() == cs1.ID() {
		t.Fatalf("second session has the id %q of the first", cs2.ID())
	}
	again := mustCreate(t, cs2, args)
	if lost.Replayed {
		t.Errorf("first call: replayed = true, want false")
	}
	if !again.Replayed {
		t.Errorf("retry: replayed = false, want true")
	}
	if again.TicketID != lost.TicketID || !again.CreatedAt.Equal(lost.CreatedAt) {
		t.Errorf("retry answered ticket %s created %s; the first call had ticket %s created %s",
			again.TicketID, again.CreatedAt, lost.TicketID, lost.CreatedAt)
	}

	waitDelivered(t, cs2, deliverTimeout, id)
	checkOneLine(t, s, id, lost.TicketID)
	m := scrape(t, s.front)
	if got := m.Get("ticketrelay_replays_total", "tool", createTool); got != 1 {
		t.Errorf("ticketrelay_replays_total{tool=%q} = %v, want 1", createTool, got)
	}
	if got := m.Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created"); got != 1 {
		t.Errorf("ticketrelay_tool_calls_total{outcome=created} = %v, want 1", got)
	}
	if c := countRows(t, openDB(t, s.db)); c != (rowCounts{1, 1, 1}) {
		t.Errorf("rows (requests, tickets, outbox) = %+v, want one of each", c)
	}
}

// The connection is cut right after the tools/call request is written: the
// server may or may not have committed it. A retry with the same request_id
// on a new session must end with exactly one ticket either way.
func TestTCPCutThenRetryCreatesOnce(t *testing.T) {
	for _, cut := range []string{"close", "reset"} {
		t.Run(cut, func(t *testing.T) {
			s := startStack(t)
			id := "tcp-cut-" + cut
			args := ticketArgs(id, "Disk full on build agent 7")

			raw := rawInitialize(t, s.url)
			body, err := json.Marshal(map[string]any{
				"jsonrpc": "2.0", "id": 2, "method": "tools/call",
				"params": map[string]any{"name": createTool, "arguments": args},
			})
			if err != nil {
				t.Fatal(err)
			}
			addr := s.front.Addr("mcp")
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			req := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
				"Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nMCP-Protocol-Version: %s\r\n"+
				"Content-Length: %d\r\n\r\n%s", addr, raw.ID, raw.Version, len(body), body)
			if _, err := conn.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			if cut == "reset" {
				if err := conn.(*net.TCPConn).SetLinger(0); err != nil { // RST instead of FIN
					t.Fatal(err)
				}
			}
			if err := conn.Close(); err != nil { // without reading a byte of the answer
				t.Fatal(err)
			}

			cs := e2eproc.Connect(t, s.url)
			r := mustCreate(t, cs, args)
			t.Logf("retry after the cut (%s): replayed=%v", cut, r.Replayed)
			waitDelivered(t, cs, deliverTimeout, id)
			checkOneLine(t, s, id, r.TicketID)
			if c := countRows(t, openDB(t, s.db)); c != (rowCounts{1, 1, 1}) {
				t.Errorf("rows (requests, tickets, outbox) = %+v, want one of each", c)
			}
			m := scrape(t, s.front)
			if got := m.Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created"); got != 1 {
				t.Errorf("ticketrelay_tool_calls_total{outcome=created} = %v, want exactly 1", got)
			}
			if r.Replayed && m.Get("ticketrelay_replays_total", "tool", createTool) < 1 {
				t.Errorf("the retry was a replay but ticketrelay_replays_total is 0")
			}
		})
	}
}

// The client gives up waiting and retries while the first call is still
// being committed: 16 identical calls on 16 sessions at once.
func TestConcurrentRetriesCreateOnce(t *testing.T) {
	s := startStack(t)
	const n = 16
	const id = "inflight-5b7e"
	args := ticketArgs(id, "Payment webhook retries forever")

	sessions := make([]*mcp.ClientSession, n)
	for i := range sessions {
		sessions[i] = e2eproc.Connect(t, s.url)
	}
	results := make([]createResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			<-start
			results[i], errs[i] = create(ctx, cs, args)
		})
	}
	close(start)
	wg.Wait()

	created := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if r.TicketID != results[0].TicketID {
			t.Errorf("call %d answered ticket %s, call 0 answered %s", i, r.TicketID, results[0].TicketID)
		}
		if !r.Replayed {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d of %d concurrent calls answered replayed=false, want exactly 1", created, n)
	}
	waitDelivered(t, sessions[0], deliverTimeout, id)
	checkOneLine(t, s, id, results[0].TicketID)
	m := scrape(t, s.front)
	if got := m.Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created"); got != 1 {
		t.Errorf("ticketrelay_tool_calls_total{outcome=created} = %v, want 1", got)
	}
	if got := m.Get("ticketrelay_replays_total", "tool", createTool); got != n-1 {
		t.Errorf("ticketrelay_replays_total = %v, want %d", got, n-1)
	}
	if c := countRows(t, openDB(t, s.db)); c != (rowCounts{1, 1, 1}) {
		t.Errorf("rows (requests, tickets, outbox) = %+v, want one of each", c)
	}
}

// The same request_id with other arguments is a tool error that names the
// original ticket and writes nothing.
func TestRequestIDReuseWithOtherArgumentsIsRejected(t *testing.T) {
	s := startStack(t)
	const id = "reuse-3f1a"
	orig := ticketArgs(id, "Login page is blank")
	cs := e2eproc.Connect(t, s.url)
	first := mustCreate(t, cs, orig)
	db := openDB(t, s.db)
	before := countRows(t, db)
	created := scrape(t, s.front).Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created")

	other := ticketArgs(id, "Login page is blank on Safari only")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: createTool, Arguments: other})
	if err != nil {
		t.Fatalf("create_ticket with reused request_id: protocol error %v, want a tool result with isError", err)
	}
	txt, err := toolText(res)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError {
		t.Fatalf("reused request_id with other arguments: isError = false: %s", txt)
	}
	if !strings.Contains(txt, first.TicketID) || !strings.Contains(txt, id) {
		t.Errorf("conflict message does not name the original ticket %s and request %s: %s", first.TicketID, id, txt)
	}

	if after := countRows(t, db); after != before {
		t.Errorf("rows changed by a rejected call: before %+v, after %+v", before, after)
	}
	m := scrape(t, s.front)
	if got := m.Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created"); got != created {
		t.Errorf("ticketrelay_tool_calls_total{outcome=created} went from %v to %v", created, got)
	}
	if got := m.Get("ticketrelay_request_id_conflicts_total", "tool", createTool); got != 1 {
		t.Errorf("ticketrelay_request_id_conflicts_total = %v, want 1", got)
	}

	// The original arguments still replay the original ticket, and only it
	// is delivered.
	again := mustCreate(t, cs, orig)
	if !again.Replayed || again.TicketID != first.TicketID {
		t.Errorf("original arguments after the conflict: %+v, want a replay of %s", again, first.TicketID)
	}
	waitDelivered(t, cs, deliverTimeout, id)
	checkOneLine(t, s, id, first.TicketID)
	for _, l := range readJSONL(t, s.jsonl) {
		if l.Key == id && l.Ticket.Title != orig["title"] {
			t.Errorf("delivered title %q, want the original %q", l.Ticket.Title, orig["title"])
		}
	}
}

// Invalid calls are tool errors that name the argument, and write nothing.
func TestInvalidCallsWriteNothing(t *testing.T) {
	s := startStack(t)
	cs := e2eproc.Connect(t, s.url)
	mustCreate(t, cs, ticketArgs("valid-before-invalid", "A valid ticket"))
	db := openDB(t, s.db)
	before := countRows(t, db)
	created := scrape(t, s.front).Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created")

	title := "Printer on fire"
	cases := []struct {
		name string
		args map[string]any
		want []string // substrings of the error message
	}{
		{"missing request_id", map[string]any{"title": title}, []string{`"request_id"`, "required"}},
		{"request_id with a space", map[string]any{"request_id": "has space", "title": title}, []string{`"request_id"`, "0x20"}},
		{"request_id with a control char", map[string]any{"request_id": "ctl\x01id", "title": title}, []string{`"request_id"`, "0x01"}},
		{"request_id of 256 chars", map[string]any{"request_id": strings.Repeat("k", 256), "title": title}, []string{`"request_id"`, "256"}},
		{"title of the wrong type", map[string]any{"request_id": "inv-title-type", "title": 42}, []string{`"title"`, "string"}},
		{"empty title", map[string]any{"request_id": "inv-title-empty", "title": ""}, []string{`"title"`, "required"}},
		{"body over 64 KiB", map[string]any{"request_id": "inv-body-big", "title": title, "body": strings.Repeat("b", 64<<10+1)}, []string{`"body"`, "65537"}},
		{"unknown argument", map[string]any{"request_id": "inv-unknown", "title": title, "assignee": "bob"}, []string{`"assignee"`, "unknown"}},
		{"priority not in the enum", map[string]any{"request_id": "inv-priority", "title": title, "priority": "critical"}, []string{`"priority"`, "critical"}},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: createTool, Arguments: c.args})
		cancel()
		if err != nil {
			t.Errorf("%s: protocol error %v, want a tool result with isError", c.name, err)
			continue
		}
		txt, err := toolText(res)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !res.IsError || !contains(txt, c.want...) || !strings.Contains(txt, "nothing was written") {
			t.Errorf("%s: isError=%v %q; want an error containing %q and \"nothing was written\"", c.name, res.IsError, txt, c.want)
		}
	}

	// Invalid UTF-8 cannot be sent by the Go client (encoding/json replaces
	// it), so it goes over a hand-made request on a session of its own.
	raw := rawInitialize(t, s.url)
	msg := raw.Call(t, []byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"create_ticket",`+
		`"arguments":{"request_id":"inv-utf8","title":"bad `+"\xff\xfe"+` bytes"}}}`))
	var resp struct {
		Result *mcp.CallToolResult `json:"result"`
		Error  json.RawMessage     `json:"error"`
	}
	if err := json.Unmarshal(msg, &resp); err != nil || resp.Result == nil {
		t.Fatalf("invalid UTF-8: want a tool result, got %s (%v)", msg, err)
	}
	txt, err := toolText(resp.Result)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Result.IsError || !contains(txt, "UTF-8", `"title"`, "nothing was written") {
		t.Errorf("invalid UTF-8 in title: isError=%v %q", resp.Result.IsError, txt)
	}

	if after := countRows(t, db); after != before {
		t.Errorf("rows changed by invalid calls: before %+v, after %+v", before, after)
	}
	m := scrape(t, s.front)
	if got := m.Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "created"); got != created {
		t.Errorf("ticketrelay_tool_calls_total{outcome=created} went from %v to %v", created, got)
	}
	if got, want := m.Get("ticketrelay_tool_calls_total", "tool", createTool, "outcome", "invalid"), float64(len(cases)+1); got != want {
		t.Errorf("ticketrelay_tool_calls_total{outcome=invalid} = %v, want %v", got, want)
	}
	for _, id := range []string{"inv-title-type", "inv-title-empty", "inv-body-big", "inv-unknown", "inv-priority", "inv-utf8"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := find(ctx, cs, id)
		cancel()
		if err != nil || r.Status != "unknown" {
			t.Errorf("find_request %s after an invalid call: %+v, %v; want unknown", id, r, err)
		}
	}
	requireNoRequest(t, db, "inv-utf8")
}

func requireNoRequest(t *testing.T, db *sql.DB, id string) {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM requests WHERE request_id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("request %s was stored", id)
	}
}
