package mcphttp

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcptools"
	"ticketrelay/request"
	"ticketrelay/testkit/testwait"
)

// TestKeepaliveSparesClientsWithoutStream: pings go only to sessions with an
// open GET stream. A session without one lives through many intervals (the
// SDK's own keepalive would close it at the first); one whose GET stream
// never answers is closed after the threshold; a real client that answers
// stays.
func TestKeepaliveSparesClientsWithoutStream(t *testing.T) {
	e := newTenv(t)
	// Each ping may take interval/2 to be answered: long enough for a real
	// client on a loaded machine running -race, short enough for a quick test.
	const interval = 250 * time.Millisecond
	ts, _ := e.serve(t, Config{KeepAlive: interval, KeepAliveFailures: 2})

	quiet := &wire{t: t, url: ts.URL}
	quiet.initialize()
	answering := connect(t, ts.URL, SessionProtocol, nil, nil) // go-sdk opens a GET stream and answers pings

	deaf := &wire{t: t, url: ts.URL}
	deaf.initialize()
	resp := deaf.do(deaf.req(http.MethodGet, nil))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: HTTP %d", resp.StatusCode)
	}
	pings := make(chan string, 16)
	go func() {
		defer resp.Body.Close()
		s := newSSE(resp.Body)
		for {
			ev, ok := s.next()
			if !ok {
				close(pings)
				return
			}
			if strings.Contains(ev.data, `"method":"ping"`) {
				pings <- ev.data
			}
		}
	}()
	select {
	case <-pings:
	case <-time.After(5 * time.Second):
		t.Fatal("no ping on the open GET stream")
	}
	// The deaf session is closed after 2 unanswered pings: its id gets 404.
	waitFor(t, 5*time.Second, "the unresponsive session to be closed", func() bool {
		r := deaf.do(deaf.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)))
		r.Body.Close()
		return r.StatusCode == http.StatusNotFound
	})
	// The wait above spanned at least 2 intervals: the others are alive.
	if m := readResponse(t, quiet.do(quiet.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)))); m.Result == nil {
		t.Errorf("session without a GET stream was closed: %+v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := answering.Ping(ctx, nil); err != nil {
		t.Errorf("session of a client that answers pings: %v", err)
	}
}

// rawCall writes one HTTP request for a tools/call on a fresh TCP
// connection, reads the status line (the server has the whole request), and
// drops the connection without reading the answer.
func rawCall(t *testing.T, base string, hdr map[string]string, body []byte) {
	t.Helper()
	u, _ := url.Parse(base)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n", u.Host, len(body))
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(append([]byte(b.String()), body...)); err != nil {
		t.Fatal(err)
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("status line %q, %v", status, err)
	}
	// Drop: close the TCP connection in the middle of the answer.
}

// TestConnectionDropDoesNotCancel: a client's TCP connection drops in the
// middle of a create (it is waiting for delivery). The call is not
// cancelled: it completes and its ticket is stored once; the retry on a new
// connection replays it. Every way in: a 2025-11-25 session, the 2026-07-28
// stateless path of the default mode, and -stateless.
func TestConnectionDropDoesNotCancel(t *testing.T) {
	cases := []struct {
		name      string
		stateless bool
		version   string
	}{
		{"session 2025-11-25", false, SessionProtocol},
		{"default mode 2026-07-28", false, StatelessProtocol},
		{"stateless 2025-11-25", true, SessionProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTenv(t)
			ts, _ := e.serve(t, Config{Stateless: tc.stateless})
			hdr := map[string]string{}
			var cs func() *mcp.ClientSession
			switch {
			case tc.version == StatelessProtocol:
				hdr["Mcp-Protocol-Version"] = StatelessProtocol
				hdr["Mcp-Method"] = "tools/call"
				hdr["Mcp-Name"] = "create_ticket"
				cs = func() *mcp.ClientSession { return connect(t, ts.URL, "", nil, nil) }
			case !tc.stateless:
				w := &wire{t: t, url: ts.URL}
				w.initialize()
				hdr["Mcp-Session-Id"] = w.session
				hdr["Mcp-Protocol-Version"] = SessionProtocol
				cs = func() *mcp.ClientSession { return connect(t, ts.URL, SessionProtocol, nil, nil) }
			default:
				hdr["Mcp-Protocol-Version"] = SessionProtocol
				cs = func() *mcp.ClientSession { return connect(t, ts.URL, SessionProtocol, nil, nil) }
			}
			rid := newRID()
			meta := ""
			if tc.version == StatelessProtocol {
				meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
			}
			body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_ticket"%s,`+
				`"arguments":{"request_id":%q,"title":"dropped","wait_for_delivery_seconds":2}}}`, meta, rid)
			rawCall(t, ts.URL, hdr, body)

			waitFor(t, 5*time.Second, "the dropped call's ticket", func() bool { return e.tickets(t) == 1 })
			retry := callCreate(t, cs(), &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": rid, "title": "dropped"}})
			if !retry.Replayed || retry.RequestID != rid {
				t.Errorf("retry after the drop: %+v, want the first call replayed", retry)
			}
			if n := e.tickets(t); n != 1 {
				t.Errorf("%d tickets, want 1", n)
			}
		})
	}
}

// TestProgressWhileWaiting: with a progress token and
// wait_for_delivery_seconds, create_ticket reports each status change as
// notifications/progress and answers with the status reached; waiting is not
// part of the request's identity, so a retry that waits replays.
func TestProgressWhileWaiting(t *testing.T) {
	for _, version := range []string{SessionProtocol, ""} {
		t.Run("version="+version, func(t *testing.T) {
			e := newTenv(t)
			ts, _ := e.serve(t, Config{})
			var (
				mu    sync.Mutex
				notes []*mcp.ProgressNotificationParams
				first = make(chan struct{}, 1)
			)
			cs := connect(t, ts.URL, version, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				notes = append(notes, r.Params)
				mu.Unlock()
				select {
				case first <- struct{}{}:
				default:
				}
			}}, nil)
			rid := newRID()
			// The first call does not wait; the retry waits and still replays.
			plain := callCreate(t, cs, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": rid, "title": "progress"}})
			go func() {
				select {
				case <-first:
				case <-time.After(10 * time.Second):
					return
				}
				e.l.RecordDelivery(context.Background(), request.Delivery{RequestID: rid, Target: "local",
					State: string(request.StatusDelivered), Attempts: 1, ExternalID: "EXT-7", ExternalURL: "https://tracker.example/7"})
			}()
			params := &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": rid, "title": "progress", "wait_for_delivery_seconds": 20}}
			params.SetProgressToken("tok-1")
			start := time.Now()
			waited := callCreate(t, cs, params)
			if !waited.Replayed || waited.TicketID != plain.TicketID || waited.Status != "delivered" || waited.ExternalID != "EXT-7" {
				t.Errorf("waiting retry %+v: want the first ticket replayed, delivered as EXT-7", waited)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("answered after %v: the wait did not end at delivery", d)
			}
			// The client runs notification handlers apart from the result:
			// the last notification may land a moment after the answer.
			testwait.Until(5*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(notes) > 0 && strings.HasPrefix(notes[len(notes)-1].Message, "delivered")
			})
			mu.Lock()
			defer mu.Unlock()
			if len(notes) < 2 || !strings.HasPrefix(notes[0].Message, "queued") || !strings.HasPrefix(notes[len(notes)-1].Message, "delivered") {
				var msgs []string
				for _, n := range notes {
					msgs = append(msgs, n.Message)
				}
				t.Fatalf("progress %q: want queued … delivered", msgs)
			}
			for i, n := range notes {
				if n.ProgressToken != "tok-1" || (i > 0 && n.Progress <= notes[i-1].Progress) {
					t.Errorf("notification %d: token %v progress %v (previous %v)", i, n.ProgressToken, n.Progress, notes[max(i-1, 0)].Progress)
				}
			}
			if n := e.tickets(t); n != 1 {
				t.Errorf("%d tickets, want 1", n)
			}
		})
	}
}

// TestWaitIsBounded: nothing delivers, so the wait ends at its bound with
// the status reached; a bound beyond the maximum is refused before anything
// is written.
func TestWaitIsBounded(t *testing.T) {
	e := newTenv(t)
	ts, _ := e.serve(t, Config{})
	cs := connect(t, ts.URL, SessionProtocol, nil, nil)
	start := time.Now()
	got := callCreate(t, cs, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": newRID(), "title": "slow", "wait_for_delivery_seconds": 1}})
	if d := time.Since(start); d < time.Second || d > 5*time.Second || got.Status != "queued" {
		t.Errorf("waited %v, status %q: want about 1 s and queued", d, got.Status)
	}
	for _, bad := range []any{mcptools.MaxWaitForDelivery + 1, -1, 1.5, "10"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": newRID(), "title": "t", "wait_for_delivery_seconds": bad}})
		cancel()
		if err != nil || !res.IsError || !strings.Contains(resultText(res), "wait_for_delivery_seconds") {
			t.Errorf("wait %v: %v %v: want a tool error naming wait_for_delivery_seconds", bad, err, res)
		}
	}
	if n := e.tickets(t); n != 1 {
		t.Errorf("%d tickets, want 1 (invalid waits write nothing)", n)
	}
}
