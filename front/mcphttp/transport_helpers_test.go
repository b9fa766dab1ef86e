package mcphttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
)

// tenv is a real ledger on a real SQLite file and the MCP server on it.
type tenv struct {
	db   *sqlitedb.DB
	l    *ledger.Ledger
	srv  *mcp.Server
	bind mcptools.Binding // the server's one tool
	m    *metrics.Front
}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func newTenv(t testing.TB) *tenv {
	t.Helper()
	m := metrics.NewFront(prometheus.NewRegistry())
	f := fixture.NewLedger(t, fixture.WriterMetrics(m.Writer))
	l := f.Ledger
	bind := mcptools.Binding{Tool: "create_ticket", Target: "local",
		Capabilities: downstream.Capabilities{DedupeKey: true, Lookup: downstream.LookupConsistent}}
	srv, err := mcptools.New(mcptools.Config{Version: "test", Bindings: []mcptools.Binding{bind}}, l, m, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	return &tenv{db: f.DB, l: l, srv: srv, bind: bind, m: m}
}

// serve starts the HTTP handler on a loopback listener.
func (e *tenv) serve(t testing.TB, cfg Config) (*httptest.Server, *Handler) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
	}
	h := NewHandler(e.srv, cfg)
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); h.Close() })
	return ts, h
}

func (e *tenv) tickets(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.db.Reader().QueryRow(`SELECT count(*) FROM tickets`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}

// connect opens a go-sdk client session over streamable HTTP. version ""
// lets the client choose (it tries 2026-07-28 with server/discover first).
func connect(t testing.TB, url, version string, opts *mcp.ClientOptions, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "transport-test", Version: "0"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, so)
	if err != nil {
		t.Fatalf("connect %s (version %q): %v", url, version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type created struct {
	RequestID  string `json:"request_id"`
	TicketID   string `json:"ticket_id"`
	Status     string `json:"status"`
	Replayed   bool   `json:"replayed"`
	ExternalID string `json:"external_id"`
}

func callCreate(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) created {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if res.IsError {
		t.Fatalf("tool error: %s", resultText(res))
	}
	var c created
	if err := json.Unmarshal([]byte(resultText(res)), &c); err != nil {
		t.Fatalf("result %q: %v", resultText(res), err)
	}
	return c
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func newRID() string { return uuid.NewString() }

// wire speaks streamable HTTP by hand, to see and send exact bytes.
type wire struct {
	t       *testing.T
	url     string
	version string // MCP-Protocol-Version header; "" for none
	session string
	header  http.Header  // added to every request
	client  *http.Client // default http.DefaultClient
}

func (c *wire) req(method string, body []byte) *http.Request {
	c.t.Helper()
	r, err := http.NewRequest(method, c.url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	r.Header.Set("Accept", "application/json, text/event-stream")
	if c.version != "" {
		r.Header.Set("Mcp-Protocol-Version", c.version)
	}
	if c.session != "" {
		r.Header.Set("Mcp-Session-Id", c.session)
	}
	for k, v := range c.header {
		r.Header[k] = v
	}
	return r
}

func (c *wire) do(r *http.Request) *http.Response {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	c.t.Cleanup(cancel)
	hc := c.client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(r.WithContext(ctx))
	if err != nil {
		c.t.Fatalf("%s: %v", r.Method, err)
	}
	return resp
}

// initialize opens a 2025-11-25 session.
func (c *wire) initialize() {
	c.t.Helper()
	c.version = ""
	resp := c.do(c.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+
		SessionProtocol+`","capabilities":{},"clientInfo":{"name":"wire","version":"0"}}}`)))
	if m := readResponse(c.t, resp); m.Result == nil {
		c.t.Fatalf("initialize: %+v", m)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.version = SessionProtocol
	resp = c.do(c.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: HTTP %d", resp.StatusCode)
	}
}

// ping makes a call on the session (so it is no longer unused) and
// reports whether it was answered with a result.
func (c *wire) ping() bool {
	c.t.Helper()
	resp := c.do(c.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":90,"method":"ping"}`)))
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return false
	}
	return readResponse(c.t, resp).Result != nil
}

// use opens a session that made a call: one this layer never evicts.
func (c *wire) use() {
	c.t.Helper()
	c.initialize()
	if !c.ping() {
		c.t.Fatal("ping on a new session failed")
	}
}

type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id   string
	name string
	data string
}

// sseReader reads events from an SSE body one at a time.
type sseReader struct{ sc *bufio.Scanner }

func newSSE(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	return &sseReader{sc: sc}
}

func (s *sseReader) next() (sseEvent, bool) {
	var e sseEvent
	seen := false
	for s.sc.Scan() {
		line := s.sc.Text()
		if line == "" {
			if seen {
				return e, true
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		seen = true
		switch k {
		case "id":
			e.id = v
		case "event":
			e.name = v
		case "data":
			e.data += v
		}
	}
	return e, false
}

// readResponse returns the JSON-RPC response in a JSON or SSE body.
func readResponse(t *testing.T, resp *http.Response) rpcMsg {
	t.Helper()
	defer resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" {
		s := newSSE(resp.Body)
		for {
			e, ok := s.next()
			if !ok {
				t.Fatalf("SSE ended without a response (HTTP %d)", resp.StatusCode)
			}
			var m rpcMsg
			if e.data == "" || json.Unmarshal([]byte(e.data), &m) != nil {
				continue
			}
			if m.Result != nil || m.Error != nil {
				return m
			}
		}
	}
	b, _ := io.ReadAll(resp.Body)
	var m rpcMsg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("HTTP %d, body %q is not JSON-RPC", resp.StatusCode, b)
	}
	return m
}

func createBody(id int, rid, title string, extra string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":%q,"title":%q%s}}}`,
		id, rid, title, extra)
}

// newLoopback serves h on 127.0.0.1 and returns its base URL.
func newLoopback(t *testing.T, h http.Handler) string {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}
