package mcptools_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcphttp"
	"ticketrelay/front/mcptools"
)

const rawProtocolVersion = "2025-06-18"

func (e *env) httpServer(t *testing.T, cfg mcphttp.Config) *httptest.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	h := mcphttp.NewHandler(e.srv, cfg)
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); h.Close() })
	return ts
}

func connectHTTP(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-http-client", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect over streamable HTTP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// rawClient speaks JSON-RPC over streamable HTTP by hand, so that the test
// sees exactly the bytes on the wire and can send bytes the Go client would
// never produce.
type rawClient struct {
	t       *testing.T
	url     string
	session string
	id      int
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func newRawClient(t *testing.T, url string) *rawClient {
	c := &rawClient{t: t, url: url}
	resp := c.post([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+rawProtocolVersion+
		`","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`), nil)
	r := c.read(resp)
	if r.Error != nil || r.Result == nil {
		t.Fatalf("initialize: %+v", r)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	if c.session == "" {
		t.Fatalf("initialize: no Mcp-Session-Id header")
	}
	resp = c.post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: HTTP %d", resp.StatusCode)
	}
	return c
}

func (c *rawClient) request(method string, body []byte, hdr http.Header) *http.Request {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", rawProtocolVersion)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	return req
}

func (c *rawClient) do(req *http.Request) *http.Response {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	c.t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp
}

func (c *rawClient) post(body []byte, hdr http.Header) *http.Response {
	return c.do(c.request(http.MethodPost, body, hdr))
}

// read returns the JSON-RPC response in resp, which is either a JSON body or
// an SSE stream whose data lines carry JSON-RPC messages.
func (c *rawClient) read(resp *http.Response) rpcResponse {
	c.t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var r rpcResponse
	switch ct {
	case "application/json":
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			c.t.Fatalf("decode JSON response: %v", err)
		}
		return r
	case "text/event-stream":
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			r = rpcResponse{}
			if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &r); err != nil {
				c.t.Fatalf("SSE data %q: %v", data, err)
			}
			if r.Result != nil || r.Error != nil {
				return r
			}
		}
		c.t.Fatalf("SSE stream ended without a response (err %v)", sc.Err())
	default:
		c.t.Fatalf("unexpected Content-Type %q", resp.Header.Get("Content-Type"))
	}
	return r
}

func (c *rawClient) rpc(method string, params []byte) rpcResponse {
	c.t.Helper()
	c.id++
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":`, c.id, method)
	body = append(append(body, params...), '}')
	return c.read(c.post(body, nil))
}

type rawToolResult struct {
	IsError bool `json:"isError"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

func (c *rawClient) callTool(args []byte) rawToolResult {
	c.t.Helper()
	params := append(append([]byte(`{"name":"`+keyedTool+`","arguments":`), args...), '}')
	r := c.rpc("tools/call", params)
	if r.Error != nil {
		c.t.Fatalf("tools/call: JSON-RPC error %d %s", r.Error.Code, r.Error.Message)
	}
	var res rawToolResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		c.t.Fatalf("tools/call result %s: %v", r.Result, err)
	}
	return res
}

func TestHTTPToolsListOnTheWire(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{})
	c := newRawClient(t, ts.URL)
	r := c.rpc("tools/list", []byte(`{}`))
	if r.Error != nil {
		t.Fatalf("tools/list: %+v", r.Error)
	}
	var list struct {
		Tools []struct {
			Name        string                     `json:"name"`
			Annotations map[string]json.RawMessage `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &list); err != nil {
		t.Fatalf("tools/list result %s: %v", r.Result, err)
	}
	want := map[string]map[string]string{
		keyedTool:                {"destructiveHint": "false", "idempotentHint": "true", "readOnlyHint": "false", "openWorldHint": "true"},
		unkeyedTool:              {"destructiveHint": "false", "idempotentHint": "false", "readOnlyHint": "false", "openWorldHint": "true"},
		mcptools.FindRequestTool: {"readOnlyHint": "true", "idempotentHint": "true"},
	}
	seen := 0
	for _, tl := range list.Tools {
		w, ok := want[tl.Name]
		if !ok {
			continue
		}
		seen++
		for k, v := range w {
			got, present := tl.Annotations[k]
			if !present {
				t.Errorf("%s: %q is not on the wire (annotations %v)", tl.Name, k, rawMap(tl.Annotations))
				continue
			}
			if string(got) != v {
				t.Errorf("%s: %s = %s on the wire, want %s", tl.Name, k, got, v)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("tools/list has %d of the %d expected tools: %s", seen, len(want), r.Result)
	}
}

func rawMap(m map[string]json.RawMessage) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func TestHTTPCreateAndReplay(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{})
	id := newID()
	args := map[string]any{"request_id": id, "title": "VPN down"}
	first := structured[createResult](t, call(t, connectHTTP(t, ts.URL), keyedTool, args))
	// A retry on a fresh connection (new session) replays.
	again := structured[createResult](t, call(t, connectHTTP(t, ts.URL), keyedTool, args))
	if first.Replayed == nil || *first.Replayed || again.Replayed == nil || !*again.Replayed || again.TicketID != first.TicketID {
		t.Errorf("first %+v, retry %+v: want replayed false then true with the same ticket", first, again)
	}
	if got := e.rows(t); got != (rows{1, 1, 1}) {
		t.Errorf("rows %+v, want one of each", got)
	}
}

func TestHTTPStateless(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{Stateless: true})
	cs := connectHTTP(t, ts.URL)
	id := newID()
	res := structured[createResult](t, call(t, cs, keyedTool, map[string]any{"request_id": id, "title": "Stateless works"}))
	if res.Status != "queued" || res.TicketID == "" {
		t.Fatalf("stateless create: %+v", res)
	}
	found := structured[findResult](t, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": id}))
	if found.Status != "queued" {
		t.Errorf("stateless find_request: %+v", found)
	}
	if got := e.rows(t); got != (rows{1, 1, 1}) {
		t.Errorf("rows %+v, want one of each", got)
	}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + rawProtocolVersion +
	`","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

func TestHTTPOrigin(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{AllowedOrigins: []string{"https://console.example.com"}})
	c := newRawClient(t, ts.URL) // a live session, so GET and DELETE would otherwise succeed

	t.Run("foreign origin forbidden", func(t *testing.T) {
		for _, origin := range []string{"http://evil.example", "http://localhost.evil.example", "null", "file://", "https://console.example.com:8443"} {
			for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
				body := []byte(nil)
				if method == http.MethodPost {
					body = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":%q,"arguments":{"request_id":%q,"title":"from a web page"}}}`, keyedTool, newID())
				}
				resp := c.do(c.request(method, body, http.Header{"Origin": {origin}}))
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s with Origin %s: HTTP %d, want 403", method, origin, resp.StatusCode)
				}
			}
		}
		if got := e.rows(t); got != (rows{}) {
			t.Errorf("a forbidden request wrote: %+v", got)
		}
	})
	// The session survived the forbidden DELETEs.
	if r := c.rpc("ping", []byte(`{}`)); r.Error != nil {
		t.Fatalf("session gone after forbidden DELETE: %+v", r.Error)
	}

	t.Run("allowed origins", func(t *testing.T) {
		for _, origin := range []string{"", "http://localhost:1234", "http://127.0.0.1", "http://[::1]:3000", "https://console.example.com"} {
			hdr := http.Header{"Origin": {origin}, "Mcp-Session-Id": nil, "Mcp-Protocol-Version": nil}
			if origin == "" {
				hdr["Origin"] = nil
			}
			resp := c.do(c.request(http.MethodPost, []byte(initializeBody), hdr))
			r := c.read(resp)
			if r.Error != nil || r.Result == nil {
				t.Errorf("Origin %q: initialize failed: %+v", origin, r)
			}
			if resp.Header.Get("Mcp-Session-Id") == "" {
				t.Errorf("Origin %q: no session created", origin)
			}
		}
	})
}

func TestHTTPHostHeaderRebinding(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{})
	c := &rawClient{t: t, url: ts.URL}
	req := c.request(http.MethodPost, []byte(initializeBody), nil)
	req.Host = "evil.example"
	resp := c.do(req)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Host evil.example on a loopback listener: HTTP %d %s, want 403", resp.StatusCode, b)
	}
	// The same request with a loopback Host is served.
	req = c.request(http.MethodPost, []byte(initializeBody), nil)
	req.Host = "localhost" + ts.URL[strings.LastIndex(ts.URL, ":"):]
	if r := c.read(c.do(req)); r.Result == nil {
		t.Fatalf("Host %s refused: %+v", req.Host, r)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{})
	c := newRawClient(t, ts.URL)

	for _, body := range []string{`{not json`, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"` + keyedTool + `","arguments":{"request_id":"x","title":"t"}`} {
		resp := c.post([]byte(body), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("body %q: HTTP %d %s", body, resp.StatusCode, bytes.TrimSpace(b))
		switch {
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
		case resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"code":-32700`)):
		default:
			t.Errorf("garbage body %q: HTTP %d %s, want 4xx or a JSON-RPC parse error", body, resp.StatusCode, b)
		}
	}

	resp := c.post([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":%q,"arguments":{"request_id":%q,"title":"t"}}}`, keyedTool, newID())),
		http.Header{"Content-Type": {"text/plain"}})
	resp.Body.Close()
	t.Logf("Content-Type text/plain: HTTP %d", resp.StatusCode)
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Errorf("Content-Type text/plain: HTTP %d, want 4xx", resp.StatusCode)
	}
	if got := e.rows(t); got != (rows{}) {
		t.Errorf("bad requests wrote: %+v", got)
	}
	// The session still works.
	if r := c.rpc("ping", []byte(`{}`)); r.Error != nil {
		t.Errorf("ping after bad requests: %+v", r.Error)
	}
}

// TestHTTPRawInvalidUTF8 sends bytes the Go client would re-encode: raw
// invalid UTF-8 and a lone surrogate escape.
func TestHTTPRawInvalidUTF8(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{})
	c := newRawClient(t, ts.URL)

	args := append([]byte(`{"request_id":"`+newID()+`","title":"bad `), 0xff, 0xfe)
	args = append(args, []byte(` bytes"}`)...)
	res := c.callTool(args)
	if !res.IsError || len(res.Content) == 0 {
		t.Fatalf("title with bytes 0xff 0xfe accepted: %+v", res)
	}
	t.Logf("raw 0xff 0xfe in title: %q", res.Content[0].Text)
	if msg := res.Content[0].Text; !strings.Contains(msg, `"title": is not valid UTF-8`) || !strings.Contains(msg, "nothing was written") {
		t.Errorf("invalid UTF-8: message %q should name the title, UTF-8 and say nothing was written", msg)
	}
	// The message names the argument that holds the bytes, or the arguments
	// as a whole when the bytes are in a name.
	for _, tc := range []struct{ args, want string }{
		{`{"request_id":"` + newID() + `","title":"t","labels":["ok","x` + "\xc3\x28" + `"]}`, `"labels": is not valid UTF-8`},
		{`{"request_id":"` + newID() + `","title":"t","body":"` + "\xed\xa0\x80" + `"}`, `"body": is not valid UTF-8`},
		{`{"request_id":"` + newID() + `","title":"t","ti` + "\xff" + `tle":"x"}`, `"arguments": are not valid UTF-8`},
	} {
		res := c.callTool([]byte(tc.args))
		if !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, tc.want) {
			t.Errorf("%q: want an error saying %s, got %+v", tc.args, tc.want, res)
		}
	}
	if got := e.rows(t); got != (rows{}) {
		t.Fatalf("invalid UTF-8 wrote: %+v", got)
	}

	// "\ud800" is valid JSON syntax but no character: a JSON decoder turns it
	// into U+FFFD. It must be rejected, not stored as U+FFFD.
	for _, field := range []string{"title", "body"} {
		args = []byte(`{"request_id":"` + newID() + `","title":"ok","` + field + `":"lone \ud800 surrogate"}`)
		if field == "title" {
			args = []byte(`{"request_id":"` + newID() + `","title":"lone \ud800 surrogate"}`)
		}
		res = c.callTool(args)
		if !res.IsError || len(res.Content) == 0 {
			t.Errorf("%s with a lone surrogate accepted: %+v", field, res)
			continue
		}
		t.Logf("lone surrogate in %s: %q", field, res.Content[0].Text)
		if msg := res.Content[0].Text; !strings.Contains(msg, field) || !strings.Contains(msg, "U+FFFD") {
			t.Errorf("lone surrogate in %s: message %q should name %s and U+FFFD", field, msg, field)
		}
	}
	var fffd int
	if err := e.db.Reader().QueryRow(`SELECT count(*) FROM tickets WHERE instr(title, char(65533)) > 0 OR instr(body, char(65533)) > 0`).Scan(&fffd); err != nil {
		t.Fatal(err)
	}
	if got := e.rows(t); got != (rows{}) || fffd != 0 {
		t.Errorf("lone surrogates wrote: %+v (%d with U+FFFD)", got, fffd)
	}

	// Control: the same raw path accepts a valid escaped character pair.
	res = c.callTool([]byte(`{"request_id":"` + newID() + `","title":"emoji \ud83d\udd25 ok"}`))
	if res.IsError {
		t.Fatalf("valid surrogate pair rejected: %+v", res)
	}
	var title string
	if err := e.db.Reader().QueryRow(`SELECT title FROM tickets`).Scan(&title); err != nil {
		t.Fatal(err)
	}
	if title != "emoji \U0001F525 ok" {
		t.Errorf("stored title %q", title)
	}
}

// TestHTTPArgumentNamesAreExact: encoding/json alone would read "Title" as
// title and keep the last of two request_ids, so the call would mean
// something other than what a reader of it sees. Both are refused and write
// nothing.
func TestHTTPArgumentNamesAreExact(t *testing.T) {
	e := newEnv(t)
	ts := e.httpServer(t, mcphttp.Config{})
	c := newRawClient(t, ts.URL)
	for _, tc := range []struct{ args, want string }{
		{`{"request_id":"` + newID() + `","request_id":"` + newID() + `","title":"t"}`, `"request_id": is given more than once`},
		{`{"request_id":"` + newID() + `","title":"a","title":"b"}`, `"title": is given more than once`},
		{`{"request_id":"` + newID() + `","Title":"t"}`, `unknown argument "Title" (names are case-sensitive: "title")`},
		{`{"REQUEST_ID":"` + newID() + `","title":"t"}`, `unknown argument "REQUEST_ID"`},
	} {
		res := c.callTool([]byte(tc.args))
		if !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, tc.want) {
			t.Errorf("%s: %+v, want a tool error saying %s", tc.args, res, tc.want)
		}
	}
	if got := e.rows(t); got != (rows{}) {
		t.Errorf("refused arguments wrote: %+v", got)
	}
	// Control: the same names, each once and exact, are accepted.
	if res := c.callTool([]byte(`{"request_id":"` + newID() + `","title":"t"}`)); res.IsError {
		t.Errorf("exact names refused: %+v", res)
	}
}
