package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/internal/testio"
)

// go-sdk gets WARN and above of an INFO logger (it logs lines of its own
// for every stateless request), everything of a DEBUG one.
func TestSDKLogger(t *testing.T) {
	for _, c := range []struct {
		level     slog.Level
		wantInfo  bool
		wantDebug bool
	}{
		{slog.LevelInfo, false, false},
		{slog.LevelDebug, true, true},
	} {
		var buf bytes.Buffer
		log := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})).With("component", "mcp"))
		log.Debug("sdk debug")
		log.Info("sdk info")
		log.WithGroup("g").Warn("sdk warn", "k", "v")
		out := buf.String()
		if strings.Contains(out, "sdk info") != c.wantInfo || strings.Contains(out, "sdk debug") != c.wantDebug ||
			!strings.Contains(out, "sdk warn") || !strings.Contains(out, "component=mcp") || !strings.Contains(out, "g.k=v") {
			t.Errorf("level %v: logged %q", c.level, out)
		}
		if log.Enabled(context.Background(), slog.LevelInfo) != c.wantInfo {
			t.Errorf("level %v: Enabled(INFO) = %v", c.level, !c.wantInfo)
		}
	}
}

// Each distinct message of the SDK at WARN and above goes through at most
// once a minute, whatever its attributes; the next one counts those
// dropped. Below WARN (logged only at DEBUG) nothing is dropped. The map of
// messages is bounded.
func TestSDKLoggerDropsRepeats(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var buf testio.Buffer
	log := sdkLoggerAt(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), clock)
	lines := func(s string) int { return strings.Count(buf.String(), s) }
	for i := range 50 {
		log.Error("method invalid during initialization", "method", fmt.Sprintf("m%d", i))
		log.With("session", i).Warn("other message")
		log.Debug("sdk debug")
	}
	if n := lines("method invalid during initialization"); n != 1 {
		t.Errorf("%d lines for 50 identical errors within a minute, want 1:\n%s", n, buf.String())
	}
	if n := lines("other message"); n != 1 {
		t.Errorf("%d lines for 50 identical warnings, want 1", n)
	}
	if n := lines("sdk debug"); n != 50 {
		t.Errorf("%d debug lines of 50 at DEBUG, want all", n)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	log.Error("method invalid during initialization", "method", "again")
	if n := lines("method invalid during initialization"); n != 2 || lines("method=again dropped_since_last_line=49") != 1 {
		t.Errorf("a minute later: want a second line counting the 49 dropped:\n%s", buf.String())
	}

	g := log.Handler().(repeatGate).gate
	for i := range 3 * maxSDKMessages {
		log.Error(fmt.Sprintf("calling x: error %d", i))
	}
	if n := len(g.keys); n > maxSDKMessages {
		t.Errorf("%d messages remembered, bound %d", n, maxSDKMessages)
	}
}

// Over HTTP: a client that sends POSTs without a session that are not
// initialize used to make go-sdk open a session for each, answer it with
// code 0 and log an ERROR. They are refused before the SDK now: 400 with a
// JSON-RPC error to their id, no session, nothing in the log.
func TestNoSessionPOSTRefused(t *testing.T) {
	e := newTenv(t)
	var buf testio.Buffer
	srv, err := New(Config{Version: "test", Bindings: []Binding{e.bind}}, e.l, e.m,
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	h := NewHTTPHandler(srv, HTTPConfig{Logger: quietLog(), Refused: func(r string) {
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
			m.Error.Code != CodeInvalidRequest || string(m.ID) != fmt.Sprint(i+1) || resp.Header.Get("Mcp-Session-Id") != "" {
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
