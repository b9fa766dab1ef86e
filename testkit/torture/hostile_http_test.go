package torture_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

type httpRow struct {
	name   string
	body   []byte
	header map[string]string // set ("" deletes) on top of a valid session's headers
	// The exact answer: status, media type, and body (JSON compared as
	// values; for an event stream, the JSON-RPC message it carries).
	status int
	media  string
	want   string
	auth   string // the WWW-Authenticate header, if any
}

func TestHostileHTTP(t *testing.T) {
	f := startHTTPFront(t)
	rows := []httpRow{
		{name: "garbage JSON", body: []byte(`{"jsonrpc":"2.0","id":1,"method":`),
			status: 400, media: "application/json", want: rpcError(nil, -32700, "Parse error: the body is not valid JSON")},
		{name: "not an object", body: []byte(`"tools/list"`),
			status: 400, media: "application/json", want: rpcError(nil, -32600, "Invalid Request: the body must be a JSON-RPC 2.0 message object")},
		{name: "empty body", body: []byte(" \n"),
			status: 400, media: "application/json", want: rpcError(nil, -32600, "Invalid Request: empty body")},
		{name: "JSON-RPC 1.0", body: []byte(`{"jsonrpc":"1.0","id":2,"method":"ping"}`),
			status: 400, media: "application/json", want: rpcError(2, -32600, `Invalid Request: "jsonrpc" must be "2.0", got "1.0"`)},
		{name: "batch", body: batch, status: 400, media: "application/json", want: rpcError(nil, -32600, "Invalid Request: batch requests are not supported")},
		{name: "empty batch", body: []byte(`[]`), status: 400, media: "application/json", want: rpcError(nil, -32600, "Invalid Request: batch requests are not supported")},
		// Nesting past encoding/json's limit (10000) is not valid JSON; past
		// 1000 levels it is refused as over stdio.
		{name: "deep JSON 20000", body: deep(3, 20000),
			status: 400, media: "application/json", want: rpcError(nil, -32700, "Parse error: the body is not valid JSON")},
		{name: "deep JSON 2000", body: deep(4, 2000),
			status: 400, media: "application/json", want: rpcError(4, -32600, "Invalid Request: nested deeper than 1000 levels")},
		{name: "deep JSON 500", body: deep(5, 500),
			status: 200, media: "text/event-stream", want: toolError(5, `invalid argument "title": must be of type string, got array; nothing was written`)},
		{name: "unknown tool", body: unknownTool,
			status: 200, media: "text/event-stream", want: rpcError(32, -32602, `unknown tool "delete_everything"`)},
		// The SDK's own answer here is a plain-text 400; mcp-front makes it
		// the JSON-RPC error stdio answers.
		{name: "unknown method", body: unknownMeth,
			status: 400, media: "application/json", want: rpcError(34, -32601, `method not found: "tickets/drop"`)},
		{name: "notification with an id", body: rpc(52, "notifications/initialized", `{}`),
			status: 400, media: "application/json", want: rpcError(52, -32600, `Invalid Request: unexpected id for "notifications/initialized"`)},
		{name: "call without params", body: []byte(`{"jsonrpc":"2.0","id":53,"method":"tools/call"}`),
			status: 400, media: "application/json", want: rpcError(53, -32600, `Invalid Request: missing required "params"`)},
		// The SDK would open a session for it and answer code 0.
		{name: "call without a session", body: rpc(54, "tools/list", `{}`), header: map[string]string{"Mcp-Session-Id": "", "Mcp-Protocol-Version": ""},
			status: 400, media: "application/json", want: rpcError(54, -32600, msgNoSession)},
		{name: "second initialize", body: rpc(55, "initialize", initParams),
			status: 400, media: "application/json", want: rpcError(55, -32600, msgReinit)},
		{name: "foreign Host", body: rpc(56, "ping", `{}`), header: map[string]string{"Host": "evil.example"},
			status: 403, media: "text/plain", want: `Forbidden: invalid Host header "evil.example"` + "\n"},
		{name: "foreign Host with a port", body: rpc(57, "ping", `{}`), header: map[string]string{"Host": "rebind.example:8080"},
			status: 403, media: "text/plain", want: `Forbidden: invalid Host header "rebind.example:8080"` + "\n"},
		{name: "localhost Host", body: rpc(58, "ping", `{}`), header: map[string]string{"Host": "localhost:8080"},
			status: 200, media: "text/event-stream", want: `{"jsonrpc":"2.0","id":58,"result":{}}`},
		{name: "RLO in title", body: rloTitle, status: 200, media: "text/event-stream", want: toolError(59, msgRLOTitle)},
		{name: "isolate in label", body: lriLabel, status: 200, media: "text/event-stream", want: toolError(60, msgLRILabel)},
		{name: "tag characters in title", body: tagTitle, status: 200, media: "text/event-stream", want: toolError(61, msgTagTitle)},
		{name: "params not an object", body: paramsString,
			status: 200, media: "text/event-stream", want: rpcError(35, -32602, msgParams)},
		{name: "arguments not an object", body: argsString, status: 200, media: "text/event-stream", want: toolError(36, msgArgsString)},
		{name: "wrong type", body: wrongType, status: 200, media: "text/event-stream", want: toolError(37, msgWrongType)},
		{name: "control character in request_id", body: ctrlID, status: 200, media: "text/event-stream", want: toolError(33, msgCtrlID)},
		{name: "invalid UTF-8", body: badUTF8, status: 200, media: "text/event-stream", want: toolError(38, msgBadUTF8)},
		{name: "huge field", body: bigField, status: 200, media: "text/event-stream", want: toolError(40, msgBigField)},
		{name: "huge body", body: hugeBody,
			status: 413, media: "application/json", want: rpcError(nil, -32600, "Invalid Request: the body exceeds 1048576 bytes")},
		{name: "wrong content type", body: rpc(6, "ping", `{}`), header: map[string]string{"Content-Type": "text/plain"},
			status: 415, media: "text/plain", want: "Content-Type must be 'application/json'\n"},
		{name: "foreign Origin", body: rpc(7, "ping", `{}`), header: map[string]string{"Origin": "https://evil.example"},
			status: 403, media: "text/plain", want: "Forbidden: Origin https://evil.example is not allowed\n"},
		{name: "Origin null", body: rpc(8, "ping", `{}`), header: map[string]string{"Origin": "null"},
			status: 403, media: "text/plain", want: "Forbidden: Origin null is not allowed\n"},
		{name: "loopback Origin", body: rpc(9, "ping", `{}`), header: map[string]string{"Origin": "http://localhost:5173"},
			status: 200, media: "text/event-stream", want: `{"jsonrpc":"2.0","id":9,"result":{}}`},
		{name: "no Origin", body: rpc(10, "ping", `{}`), header: map[string]string{"Origin": ""},
			status: 200, media: "text/event-stream", want: `{"jsonrpc":"2.0","id":10,"result":{}}`},
		{name: "no token", body: rpc(11, "ping", `{}`), header: map[string]string{"Authorization": ""},
			status: 401, media: "application/json", want: `{"error":"invalid_token","error_description":"no bearer token"}`,
			auth: `Bearer realm="ticketrelay"`},
		{name: "bad token", body: rpc(12, "ping", `{}`), header: map[string]string{"Authorization": "Bearer " + strings.Repeat("x", 32)},
			status: 401, media: "application/json", want: `{"error":"invalid_token","error_description":"invalid bearer token"}`,
			auth: `Bearer realm="ticketrelay", error="invalid_token"`},
		{name: "not a bearer token", body: rpc(13, "ping", `{}`), header: map[string]string{"Authorization": "Basic YWxpY2U6cHc="},
			status: 401, media: "application/json", want: `{"error":"invalid_token","error_description":"the Authorization header is not a bearer token"}`,
			auth: `Bearer realm="ticketrelay", error="invalid_token"`},
		{name: "another subject's session", body: rpc(14, "ping", `{}`), header: map[string]string{"Authorization": "Bearer " + malloryToken},
			status: 403, media: "text/plain", want: "session user mismatch\n"},
		{name: "unknown session", body: rpc(15, "ping", `{}`), header: map[string]string{"Mcp-Session-Id": "NOSUCHSESSION"},
			status: 404, media: "text/plain", want: "session not found\n"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			status, media, body, auth := f.post(t, r.body, r.header)
			got := body
			if media == "text/event-stream" {
				got = sseMessage(t, body)
			}
			if status != r.status || media != r.media || !sameAnswer(got, r.want) || auth != r.auth {
				t.Errorf("got HTTP %d %s %q WWW-Authenticate %q\nwant HTTP %d %s %q WWW-Authenticate %q",
					status, media, clip(got), auth, r.status, r.media, clip(r.want), r.auth)
			}
		})
	}
	// None of it wrote anything, and the session still works.
	if n := countRequests(t, f.db); n != 0 {
		t.Errorf("hostile requests wrote %d ledger rows", n)
	}
	status, _, body, _ := f.post(t, toolCall(50, "create_ticket", `{"request_id":"after-hostile","title":"still works"}`), nil)
	if msg := sseMessage(t, body); status != 200 || !strings.Contains(msg, `"replayed":false`) {
		t.Fatalf("a valid create after the hostile rows: HTTP %d %s", status, msg)
	}
	if n := countRequests(t, f.db); n != 1 {
		t.Errorf("a valid create wrote %d ledger rows, want 1", n)
	}
}

type httpFront struct {
	url, db, session string
}

// startHTTPFront starts mcp-front with bearer tokens for alice and mallory
// and opens a session as alice.
func startHTTPFront(t *testing.T) *httpFront {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("alice:"+aliceToken+"\nmallory:"+malloryToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "addr.json")
	f := &httpFront{db: filepath.Join(dir, "tickets.db")}
	cmd := exec.Command(frontBin, "-create-db", "-db", f.db, "-listen", "127.0.0.1:0", "-metrics-listen", "", "-auth-tokens-file", tokens, "-addr-file", addrFile)
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Env = append(os.Environ(), "TICKETRELAY_AUTH_TOKENS=")
	logf, err := os.Create(filepath.Join(dir, "mcp-front.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mcp-front did not stop cleanly: %v", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("mcp-front still running 15s after SIGINT")
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("mcp-front stderr:\n%s", b)
		}
	})
	var b []byte
	if !testwait.Until(20*time.Second, func() bool {
		var err error
		b, err = os.ReadFile(addrFile)
		return err == nil
	}) {
		t.Fatal("mcp-front wrote no -addr-file within 20s")
	}
	var addrs map[string]string
	if err := json.Unmarshal(b, &addrs); err != nil || addrs["mcp"] == "" {
		t.Fatalf("-addr-file: %q: %v", b, err)
	}
	f.url = "http://" + addrs["mcp"] + "/mcp"
	init := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"hostile","version":"0"}}}`, protocol)
	req := f.request(t, init, map[string]string{"Mcp-Session-Id": "", "Mcp-Protocol-Version": ""})
	resp := do(t, req)
	// The result must be in before notifications/initialized is sent.
	result := readEvents(resp.Body)
	resp.Body.Close()
	f.session = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || f.session == "" || !bytes.Contains(result, []byte(`"result"`)) {
		t.Fatalf("initialize: HTTP %d, session %q: %s", resp.StatusCode, f.session, result)
	}
	if status, _, body, _ := f.post(t, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), nil); status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: HTTP %d %s", status, body)
	}
	return f
}

func (f *httpFront) request(t *testing.T, body []byte, header map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Mcp-Session-Id", f.session)
	req.Header.Set("Mcp-Protocol-Version", protocol)
	for k, v := range header {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	return req
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	return resp
}

// post sends body and returns the status, media type, body (an event
// stream is read until its first JSON-RPC response) and WWW-Authenticate.
func (f *httpFront) post(t *testing.T, body []byte, header map[string]string) (int, string, string, string) {
	t.Helper()
	resp := do(t, f.request(t, body, header))
	defer resp.Body.Close()
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var b []byte
	if media == "text/event-stream" {
		b = readEvents(resp.Body)
	} else {
		b, _ = io.ReadAll(resp.Body)
	}
	return resp.StatusCode, media, string(b), resp.Header.Get("WWW-Authenticate")
}

// readEvents reads an event stream up to the first event that carries a
// JSON-RPC response (the stream of a call stays open until then).
func readEvents(r io.Reader) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok && (strings.Contains(data, `"result"`) || strings.Contains(data, `"error"`)) {
			break
		}
	}
	return out.Bytes()
}

// sseMessage returns the JSON-RPC response an event stream carries.
func sseMessage(t *testing.T, stream string) string {
	t.Helper()
	for line := range strings.SplitSeq(stream, "\n") {
		if data, ok := strings.CutPrefix(line, "data:"); ok && strings.TrimSpace(data) != "" {
			return strings.TrimSpace(data)
		}
	}
	t.Errorf("no JSON-RPC message in the event stream %q", clip(stream))
	return ""
}
