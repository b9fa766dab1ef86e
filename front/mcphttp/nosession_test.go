package mcphttp

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"ticketrelay/front/mcptools"
	"ticketrelay/front/rpcguard"
	"ticketrelay/testkit/testio"
)

// Over HTTP: a client that sends POSTs without a session that are not
// initialize used to make go-sdk open a session for each, answer it with
// code 0 and log an ERROR. They are refused before the SDK now: 400 with a
// JSON-RPC error to their id, no session, nothing in the log.
func TestNoSessionPOSTRefused(t *testing.T) {
	e := newTenv(t)
	var buf testio.Buffer
	srv, err := mcptools.New(mcptools.Config{Version: "test", Bindings: []mcptools.Binding{e.bind}}, e.l, e.m,
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	h := NewHandler(srv, Config{Logger: quietLog(), Refused: func(r string) {
		if r == RefusedNoSession {
			refused.Add(1)
		}
	}})
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); h.Close() })
	const n = 20
	for i := range n {
		c := &wire{t: t, url: ts.URL}
		resp := c.do(c.req(http.MethodPost, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, i+1)))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m rpcMsg
		if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != http.StatusBadRequest || m.Error == nil ||
			m.Error.Code != rpcguard.CodeInvalidRequest || string(m.ID) != fmt.Sprint(i+1) || resp.Header.Get("Mcp-Session-Id") != "" {
			t.Fatalf("tools/list without a session: HTTP %d %s (session %q); want 400, a -32600 error to id %d and no session",
				resp.StatusCode, b, resp.Header.Get("Mcp-Session-Id"), i+1)
		}
	}
	if got := refused.Load(); got != n {
		t.Errorf("Refused(%s) %d times, want %d", RefusedNoSession, got, n)
	}
	if n := liveSessions(srv); n != 0 || h.Sessions() != 0 {
		t.Errorf("%d sessions left (%d counted), want none", n, h.Sessions())
	}
	if strings.Contains(buf.String(), "initialization") {
		t.Errorf("the SDK saw the requests:\n%s", buf.String())
	}
}
