package e2eproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// RawSession is an MCP session over streamable HTTP driven by hand-made
// requests: what the go-sdk client cannot send, or hides.
type RawSession struct {
	URL     string
	ID      string // Mcp-Session-Id
	Version string // the protocol version it initialized with
}

// RawInitialize runs initialize (as client name, asking for version) and
// notifications/initialized by hand, and returns the session.
func RawInitialize(t testing.TB, url, version, name string) *RawSession {
	t.Helper()
	init := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,`+
		`"capabilities":{},"clientInfo":{"name":%q,"version":"1"}}}`, version, name)
	s := &RawSession{URL: url, Version: version}
	resp, body := s.Post(t, []byte(init))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %s: %s", resp.Status, body)
	}
	if s.ID = resp.Header.Get("Mcp-Session-Id"); s.ID == "" {
		t.Fatalf("initialize: no Mcp-Session-Id header (headers %v)", resp.Header)
	}
	msg := JSONRPCMessage(t, resp.Header.Get("Content-Type"), body)
	if !bytes.Contains(msg, []byte(`"result"`)) {
		t.Fatalf("initialize: %s", msg)
	}
	resp, body = s.Post(t, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s: %s", resp.Status, body)
	}
	return s
}

// Call sends one JSON-RPC request body and returns the JSON-RPC response.
func (s *RawSession) Call(t testing.TB, body []byte) []byte {
	t.Helper()
	resp, out := s.Post(t, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s: %s", s.URL, resp.Status, out)
	}
	return JSONRPCMessage(t, resp.Header.Get("Content-Type"), out)
}

// Post sends body to the session's endpoint, with its session id and
// protocol version once it has an id, and returns the answer read whole.
func (s *RawSession) Post(t testing.TB, body []byte) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.ID != "" {
		req.Header.Set("Mcp-Session-Id", s.ID)
		req.Header.Set("MCP-Protocol-Version", s.Version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", s.URL, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", s.URL, err)
	}
	return resp, out
}

// JSONRPCMessage returns the one JSON-RPC message of an answer, plain JSON
// or a server-sent event stream.
func JSONRPCMessage(t testing.TB, contentType string, body []byte) []byte {
	t.Helper()
	if strings.HasPrefix(contentType, "application/json") {
		return body
	}
	var data [][]byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:")); ok {
			if d = bytes.TrimSpace(d); len(d) > 0 {
				data = append(data, append([]byte(nil), d...))
			}
		}
	}
	if len(data) != 1 {
		t.Fatalf("want one SSE data message, got %d in %q", len(data), body)
	}
	return data[0]
}
