package mcphttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestResumeAfterStreamDrop: a 2025-11-25 client's POST stream drops in the
// middle of a create that waits for delivery. The call goes on; the client
// comes back with GET and Last-Event-ID and receives the rest: the progress
// notification of the delivery and the result, which carries "delivered".
func TestResumeAfterStreamDrop(t *testing.T) {
	e := newTenv(t)
	ts, _ := e.serve(t, Config{})
	c := &wire{t: t, url: ts.URL}
	c.initialize()

	rid := newRID()
	lastID := callThenDrop(t, c, rid, "resume me", 20)

	// Meanwhile the ticket is delivered.
	waitFor(t, 5*time.Second, "the create to commit", func() bool { return e.tickets(t) == 1 })
	if err := e.l.RecordDelivery(context.Background(), request.Delivery{RequestID: rid, Target: "local",
		State: string(request.StatusDelivered), Attempts: 1, ExternalID: "EXT-42"}); err != nil {
		t.Fatal(err)
	}

	// Resume after the last event seen.
	get := c.req(http.MethodGet, nil)
	get.Header.Set("Last-Event-ID", lastID)
	resp := c.do(get)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume GET: HTTP %d", resp.StatusCode)
	}
	defer resp.Body.Close()
	s := newSSE(resp.Body)
	var progress []string
	for {
		ev, ok := s.next()
		if !ok {
			t.Fatalf("resumed stream ended without the result; progress %v", progress)
		}
		var m rpcMsg
		if json.Unmarshal([]byte(ev.data), &m) != nil {
			continue
		}
		if m.Method == "notifications/progress" {
			progress = append(progress, string(m.Params))
			continue
		}
		if m.Result == nil || string(m.ID) != "7" {
			t.Fatalf("resumed stream: unexpected %s", ev.data)
		}
		var res struct {
			StructuredContent created `json:"structuredContent"`
		}
		if err := json.Unmarshal(m.Result, &res); err != nil {
			t.Fatal(err)
		}
		got := res.StructuredContent
		if got.Status != "delivered" || got.ExternalID != "EXT-42" || got.RequestID != rid || got.Replayed {
			t.Errorf("result after resumption %+v, want delivered EXT-42", got)
		}
		if len(progress) == 0 || !strings.Contains(progress[len(progress)-1], "delivered") {
			t.Errorf("progress after resumption %v: want the delivered notification", progress)
		}
		break
	}
	if n := e.tickets(t); n != 1 {
		t.Errorf("%d tickets, want 1", n)
	}
}

// TestDeletedSessionIsGone: after DELETE, the session id gets 404 on every
// method, so a client knows to start over.
func TestDeletedSessionIsGone(t *testing.T) {
	e := newTenv(t)
	ts, h := e.serve(t, Config{})
	c := &wire{t: t, url: ts.URL}
	c.initialize()
	resp := c.do(c.req(http.MethodDelete, nil))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: HTTP %d", resp.StatusCode)
	}
	for _, r := range []*http.Request{
		c.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)),
		c.req(http.MethodPost, createBody(3, newRID(), "after delete", "")),
		c.req(http.MethodGet, nil),
		c.req(http.MethodDelete, nil),
	} {
		resp := c.do(r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s after DELETE: HTTP %d, want 404", r.Method, resp.StatusCode)
		}
	}
	if n := e.tickets(t); n != 0 {
		t.Errorf("a call on a deleted session wrote %d tickets", n)
	}
	// Its events are gone with it.
	waitFor(t, 2*time.Second, "the session's events to be dropped", func() bool {
		_, streams, _ := h.EventStore().Stats()
		return streams == 0
	})
}

// TestEventStoreBounded: whatever the traffic, the store never holds more
// than its bound (events and per-stream bookkeeping), drops the oldest
// first, says so on a resumption it cannot serve, and frees a closed
// session at once.
func TestEventStoreBounded(t *testing.T) {
	ctx := context.Background()
	const budget = 64 << 10
	s := NewEventStore(budget)
	payload := []byte(strings.Repeat("x", 200))
	// 20,000 calls of one long session: a priming event and a response each.
	for i := range 20000 {
		stream := fmt.Sprintf("s%d", i)
		s.Open(ctx, "long", stream)
		s.Append(ctx, "long", stream, nil)
		s.Append(ctx, "long", stream, payload)
		if b, _, _ := s.Stats(); b > budget {
			t.Fatalf("after %d calls the store holds %d bytes > %d", i+1, b, budget)
		}
	}
	b, streams, events := s.Stats()
	if streams > budget/streamOverhead || streams < 10 {
		t.Errorf("%d streams kept (bytes %d, events %d)", streams, b, events)
	}
	// The newest call resumes; the oldest was purged and says so.
	var got [][]byte
	for d, err := range s.After(ctx, "long", "s19999", 0) {
		if err != nil {
			t.Fatalf("After newest: %v", err)
		}
		got = append(got, d)
	}
	if len(got) != 1 || string(got[0]) != string(payload) {
		t.Errorf("newest stream after its priming event: %q", got)
	}
	for _, err := range s.After(ctx, "long", "s0", 0) {
		if !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("oldest stream: err %v, want ErrEventsPurged", err)
		}
	}
	// One event larger than the whole budget is still kept (it is the
	// answer in flight), then goes first.
	big := make([]byte, 2*budget)
	s.Open(ctx, "other", "big")
	s.Append(ctx, "other", "big", big)
	if _, _, ev := s.Stats(); ev != 1 {
		t.Errorf("after an oversized event: %d events, want only it", ev)
	}
	s.SessionClosed(ctx, "other")
	s.SessionClosed(ctx, "long")
	if b, streams, events := s.Stats(); b != 0 || streams != 0 || events != 0 {
		t.Errorf("after every session closed: %d bytes, %d streams, %d events", b, streams, events)
	}
	if len(s.queue)-s.head > 0 && s.stale == 0 {
		t.Errorf("queue holds %d live entries after every session closed", len(s.queue)-s.head)
	}
}

// callThenDrop starts create_ticket with a progress token and a delivery
// wait of wait seconds as request 7, reads its stream up to the first
// progress notification (event _1), then drops the connection as a client
// that lost it would, and returns the last event id it read.
func callThenDrop(t *testing.T, c *wire, rid, title string, wait int) string {
	t.Helper()
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket","_meta":{"progressToken":"p7"},`+
		`"arguments":{"request_id":%q,"title":%q,"wait_for_delivery_seconds":%d}}}`, rid, title, wait)
	ctx, drop := context.WithCancel(context.Background())
	defer drop()
	resp := c.do(c.req(http.MethodPost, body).WithContext(ctx))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call: HTTP %d", resp.StatusCode)
	}
	defer resp.Body.Close()
	s := newSSE(resp.Body)
	var lastID string
	for !strings.HasSuffix(lastID, "_1") {
		ev, ok := s.next()
		if !ok {
			t.Fatalf("stream ended before the first progress notification")
		}
		if ev.id == "" {
			t.Fatalf("event without id %+v: the stream is not resumable", ev)
		}
		lastID = ev.id
		if ev.data != "" && !strings.Contains(ev.data, `"notifications/progress"`) {
			t.Fatalf("before any delivery, got %s", ev.data)
		}
	}
	return lastID
}
