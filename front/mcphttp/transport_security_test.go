package mcphttp

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/rpcguard"
	"ticketrelay/testkit/testio"
)

const (
	aliceToken = "alice-0123456789abcdef0123456789abcdef"
	bobToken   = "bob-fedcba9876543210fedcba9876543210"
)

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func authed(token string) *http.Client {
	return &http.Client{Transport: bearer{token, http.DefaultTransport}}
}

// TestBearerTokens: without a valid token every request gets 401 with a
// Bearer challenge (naming the protected-resource metadata when configured)
// and nothing happens; with one, calls work; a session belongs to the
// subject that opened it (another subject gets 403); no token is logged.
func TestBearerTokens(t *testing.T) {
	tokens, err := ParseTokens("test", "# two subjects\nalice:"+aliceToken+"\nbob:"+bobToken)
	if err != nil {
		t.Fatal(err)
	}
	var logs testio.Buffer
	e := newTenv(t)
	ts, _ := e.serve(t, Config{
		Auth:   &AuthConfig{Tokens: tokens, Resource: "https://tickets.example/mcp", AuthorizationServers: []string{"https://auth.example"}},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})

	for _, tc := range []struct{ name, header string }{
		{"no header", ""},
		{"wrong token", "Bearer " + strings.Repeat("z", 40)},
		{"token of another scheme", "Basic " + aliceToken},
		{"prefix of a token", "Bearer " + aliceToken[:20]},
	} {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			c := &wire{t: t, url: ts.URL, header: http.Header{}}
			if tc.header != "" {
				c.header.Set("Authorization", tc.header)
			}
			var body []byte
			if method == http.MethodPost {
				body = createBody(1, newRID(), "unauthenticated", "")
			}
			resp := c.do(c.req(method, body))
			resp.Body.Close()
			challenge := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer ") ||
				!strings.Contains(challenge, `resource_metadata="https://tickets.example/.well-known/oauth-protected-resource/mcp"`) {
				t.Errorf("%s, %s: HTTP %d, WWW-Authenticate %q", tc.name, method, resp.StatusCode, challenge)
			}
		}
	}
	if n := e.tickets(t); n != 0 {
		t.Fatalf("unauthenticated requests wrote %d tickets", n)
	}

	alice := connect(t, ts.URL, SessionProtocol, nil, authed(aliceToken))
	got := callCreate(t, alice, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": newRID(), "title": "as alice"}})
	if got.Status != "queued" {
		t.Fatalf("alice's create: %+v", got)
	}
	// Bob, with his own valid token, cannot use alice's session.
	bob := &wire{t: t, url: ts.URL, version: SessionProtocol, session: alice.ID(), header: http.Header{"Authorization": {"Bearer " + bobToken}}}
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		var body []byte
		if method == http.MethodPost {
			body = createBody(5, newRID(), "hijack", "")
		}
		resp := bob.do(bob.req(method, body))
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("bob on alice's session, %s: HTTP %d, want 403", method, resp.StatusCode)
		}
	}
	// Alice's session survived bob's DELETE.
	ctx := t.Context()
	if err := alice.Ping(ctx, nil); err != nil {
		t.Errorf("alice's session after bob's attempts: %v", err)
	}
	// The 2026-07-28 path is authenticated too.
	bobNew := connect(t, ts.URL, "", nil, authed(bobToken))
	if v := bobNew.InitializeResult().ProtocolVersion; v != StatelessProtocol {
		t.Errorf("bob negotiated %s", v)
	}
	if n := e.tickets(t); n != 1 {
		t.Errorf("%d tickets, want alice's only", n)
	}
	out := logs.String()
	for _, secret := range []string{aliceToken, bobToken, aliceToken[:20], strings.Repeat("z", 40)} {
		if strings.Contains(out, secret) {
			t.Errorf("a token appears in the logs")
		}
	}
	if !strings.Contains(out, "unauthenticated request refused") {
		t.Errorf("refusals are not logged")
	}
}

func TestParseTokens(t *testing.T) {
	secret := "s3cr3t-value-that-must-not-leak"
	for _, bad := range []string{
		"short",                             // too short
		"alice:" + secret + " extra",        // space in token
		"al ice:" + secret,                  // bad subject
		"a:" + secret + "\nb:" + secret,     // same token twice
		"a:" + secret[:10] + "\u00e9\u00e9", // not b64token
	} {
		_, err := ParseTokens("file", bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), secret[:10]) {
			t.Errorf("error %q shows the token", err)
		}
	}
	tk, err := ParseTokens("env", secret+", bob:"+bobToken)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := tk.Verify(secret); !ok || !strings.HasPrefix(s, "token-") {
		t.Errorf("bare token: subject %q, %v", s, ok)
	}
	if s, ok := tk.Verify(bobToken); !ok || s != "bob" {
		t.Errorf("bob: %q %v", s, ok)
	}
	if _, ok := tk.Verify(bobToken + "x"); ok {
		t.Error("a longer token verified")
	}
	if strings.Contains(tk.String(), secret) {
		t.Error("String shows a token")
	}
}

func TestResourceMetadata(t *testing.T) {
	tokens, _ := ParseTokens("t", aliceToken)
	cfg := &AuthConfig{Tokens: tokens, Resource: "https://tickets.example/mcp", AuthorizationServers: []string{"https://auth.example"}}
	u, path, err := ResourceMetadataLocation(cfg.Resource)
	if err != nil || path != "/.well-known/oauth-protected-resource/mcp" || u != "https://tickets.example"+path {
		t.Fatalf("location %q %q %v", u, path, err)
	}
	w := &wire{t: t}
	srv := http.NewServeMux()
	srv.Handle(path, ResourceMetadataHandler(cfg))
	ts := newLoopback(t, srv)
	w.url = ts + path
	resp := w.do(w.req(http.MethodGet, nil))
	defer resp.Body.Close()
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&md); err != nil || md.Resource != cfg.Resource || len(md.AuthorizationServers) != 1 {
		t.Errorf("metadata %+v, %v", md, err)
	}
}

// TestRateLimit: a client over its budget gets 429 with Retry-After and a
// JSON-RPC error, and its call does nothing; other clients and the same
// client after the refill are served.
func TestRateLimit(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tokens, _ := ParseTokens("t", "alice:"+aliceToken+",bob:"+bobToken)
	e := newTenv(t)
	ts, _ := e.serve(t, Config{Stateless: true, RateLimit: RateLimit{PerSecond: 1, Burst: 3}, Now: clock, Auth: &AuthConfig{Tokens: tokens}})
	alice := &wire{t: t, url: ts.URL, header: http.Header{"Authorization": {"Bearer " + aliceToken}}}
	bob := &wire{t: t, url: ts.URL, header: http.Header{"Authorization": {"Bearer " + bobToken}}}
	for i := range 3 {
		if m := readResponse(t, alice.do(alice.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)))); m.Result == nil {
			t.Fatalf("request %d within the burst: %+v", i, m)
		}
	}
	resp := alice.do(alice.req(http.MethodPost, createBody(9, newRID(), "over the limit", "")))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(b), `"code":-32000`) || !strings.Contains(string(b), "rate limit exceeded") {
		t.Fatalf("over the limit: HTTP %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if n := e.tickets(t); n != 0 {
		t.Fatalf("a rate-limited create wrote %d tickets", n)
	}
	if m := readResponse(t, bob.do(bob.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)))); m.Result == nil {
		t.Errorf("bob throttled by alice's traffic: %+v", m)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if m := readResponse(t, alice.do(alice.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)))); m.Result == nil {
		t.Errorf("alice after a second: %+v", m)
	}
}

// TestGarbageChangesNothing: oversized bodies, invalid JSON, JSON that is no
// JSON-RPC message and wrong content types get HTTP errors with JSON-RPC
// bodies where the body was the problem; nothing is written and the session
// goes on.
func TestGarbageChangesNothing(t *testing.T) {
	e := newTenv(t)
	ts, _ := e.serve(t, Config{MaxBodyBytes: 4096})
	c := &wire{t: t, url: ts.URL}
	c.initialize()
	big := createBody(2, newRID(), strings.Repeat("x", 5000), "")
	for _, tc := range []struct {
		name   string
		ctype  string
		body   []byte
		status int
		code   int
	}{
		{"over the body limit", "application/json", big, http.StatusRequestEntityTooLarge, rpcguard.CodeInvalidRequest},
		{"invalid JSON", "application/json", []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call",`), http.StatusBadRequest, rpcguard.CodeParseError},
		{"not an object", "application/json", []byte(`"tools/call"`), http.StatusBadRequest, rpcguard.CodeInvalidRequest},
		{"empty", "application/json", []byte(`   `), http.StatusBadRequest, rpcguard.CodeInvalidRequest},
		{"text/plain", "text/plain", createBody(4, newRID(), "plain", ""), http.StatusUnsupportedMediaType, 0},
		{"form", "application/x-www-form-urlencoded", []byte(`a=b`), http.StatusUnsupportedMediaType, 0},
		// go-sdk would answer these under id 1 and -2^63, after the write.
		{"fractional id", "application/json", bytes.Replace(createBody(7, newRID(), "t", ""), []byte(`"id":7`), []byte(`"id":1.5`), 1), http.StatusBadRequest, rpcguard.CodeInvalidRequest},
		{"id beyond 2^53", "application/json", bytes.Replace(createBody(7, newRID(), "t", ""), []byte(`"id":7`), []byte(`"id":9223372036854775808`), 1), http.StatusBadRequest, rpcguard.CodeInvalidRequest},
		// go-sdk would turn bytes that are not UTF-8 into U+FFFD, and the
		// id into one the client never sent.
		{"invalid UTF-8 in the id", "application/json", bytes.Replace(createBody(7, newRID(), "t", ""), []byte(`"id":7`), []byte("\"id\":\"a\xff\""), 1), http.StatusBadRequest, rpcguard.CodeInvalidRequest},
	} {
		r := c.req(http.MethodPost, tc.body)
		r.Header.Set("Content-Type", tc.ctype)
		resp := c.do(r)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, resp.StatusCode, b, tc.status)
			continue
		}
		if tc.code != 0 {
			var m rpcMsg
			if json.Unmarshal(b, &m) != nil || m.Error == nil || m.Error.Code != tc.code || string(m.ID) != "null" {
				t.Errorf("%s: body %s, want JSON-RPC error %d with id null", tc.name, b, tc.code)
			}
		}
	}
	// Outside the arguments (where the tool error names the argument),
	// bytes that are not UTF-8 are a parse error, under the request's id.
	metaBody := bytes.Replace(createBody(8, newRID(), "t", ""), []byte(`"params":{`), []byte("\"params\":{\"_meta\":{\"x\":\"\xff\"},"), 1)
	if m := readResponse(t, c.do(c.req(http.MethodPost, metaBody))); m.Error == nil || m.Error.Code != rpcguard.CodeParseError || string(m.ID) != "8" {
		t.Errorf("invalid UTF-8 in _meta: %+v, want a parse error under id 8", m)
	}
	// Per-field limits hold below the body limit too.
	resp := c.do(c.req(http.MethodPost, createBody(5, newRID(), strings.Repeat("t", 600), "")))
	if m := readResponse(t, resp); m.Result == nil || !strings.Contains(string(m.Result), `"isError":true`) || !strings.Contains(string(m.Result), "title") {
		t.Errorf("over-long title: %+v %s", m.Error, m.Result)
	}
	if n := e.tickets(t); n != 0 {
		t.Errorf("garbage wrote %d tickets", n)
	}
	if m := readResponse(t, c.do(c.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)))); m.Result == nil {
		t.Errorf("session after garbage: %+v", m)
	}
}

// TestOriginAndHostOnEveryPath: the Origin and Host checks also guard the
// 2026-07-28 stateless path and the stateless mode.
func TestOriginAndHostOnEveryPath(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		e := newTenv(t)
		ts, _ := e.serve(t, Config{Stateless: stateless})
		c := &wire{t: t, url: ts.URL, version: StatelessProtocol, header: http.Header{"Mcp-Method": {"server/discover"}}}
		r := c.req(http.MethodPost, discoverBody(true))
		r.Header.Set("Origin", "https://evil.example")
		resp := c.do(r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("stateless=%v: foreign Origin: HTTP %d", stateless, resp.StatusCode)
		}
		r = c.req(http.MethodPost, discoverBody(true))
		r.Host = "evil.example"
		resp = c.do(r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("stateless=%v: foreign Host on loopback: HTTP %d", stateless, resp.StatusCode)
		}
	}
}
