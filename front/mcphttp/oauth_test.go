package mcphttp

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/metrics"
	"ticketrelay/testkit/testio"
)

const testResource = "https://tickets.example/mcp"

// oauthServer serves e with static tokens for alice and access tokens of
// a test issuer that must carry the scope "tickets".
func oauthServer(t *testing.T, e *tenv, logs *testio.Buffer, failures RateLimit) (*mcpauthtest.Issuer, string) {
	t.Helper()
	is := mcpauthtest.NewIssuer(t)
	v, err := mcpauth.New(mcpauth.Config{Issuer: is.URL(), Audience: testResource,
		Metrics: metrics.NewOAuth(prometheus.NewRegistry(), mcpauth.Outcomes)})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := ParseTokens("test", "alice:"+aliceToken)
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := e.serve(t, Config{
		Auth: &AuthConfig{Tokens: tokens, OAuth: v, Resource: testResource, AuthorizationServers: []string{is.URL()},
			Scopes: []string{"tickets"}, FailureLimit: failures},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return is, ts.URL
}

// TestOAuthAccessTokens: a signed-in user's access token opens sessions
// and files tickets as that user; static tokens keep working beside it;
// the request subject is the user (issuer + sub), so two clients of one
// user share their request ids and two users never do; a token without
// the needed scope gets 403 insufficient_scope naming it.
func TestOAuthAccessTokens(t *testing.T) {
	var logs testio.Buffer
	e := newTenv(t)
	is, url := oauthServer(t, e, &logs, RateLimit{PerSecond: -1})
	now := time.Now()
	token := func(sub, client, scope string) string {
		c := is.Claims(sub, testResource, now)
		c["client_id"], c["scope"] = client, scope
		return is.Mint(c)
	}
	adaDesktop, adaCLI := token("ada", "desktop", "tickets"), token("ada", "cli", "tickets openid")
	bo := token("bo", "desktop", "tickets")

	// The challenge names the scope and the metadata.
	resp := (&wire{t: t, url: url}).do((&wire{t: t, url: url}).req(http.MethodPost, createBody(1, newRID(), "x", "")))
	resp.Body.Close()
	if c := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(c, `scope="tickets"`) ||
		!strings.Contains(c, `resource_metadata="https://tickets.example/.well-known/oauth-protected-resource/mcp"`) {
		t.Errorf("no token: HTTP %d, WWW-Authenticate %q", resp.StatusCode, c)
	}

	rid := newRID()
	create := func(cs *mcp.ClientSession) created {
		return callCreate(t, cs, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": rid, "title": "Printer on fire"}})
	}
	first := create(connect(t, url, SessionProtocol, nil, authed(adaDesktop)))
	again := create(connect(t, url, "", nil, authed(adaCLI)))
	other := create(connect(t, url, SessionProtocol, nil, authed(bo)))
	static := create(connect(t, url, SessionProtocol, nil, authed(aliceToken)))
	if first.Status != "queued" || !again.Replayed || again.TicketID != first.TicketID {
		t.Errorf("one user, two clients: %+v then %+v; want the second to replay the first", first, again)
	}
	if other.Replayed || other.TicketID == first.TicketID || static.Replayed || static.TicketID == first.TicketID || static.TicketID == other.TicketID {
		t.Errorf("another user, a static token: %+v, %+v; want tickets of their own", other, static)
	}
	rows, err := e.db.Reader().Query(`SELECT subject FROM requests ORDER BY created_at`)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		subjects = append(subjects, s)
	}
	rows.Close()
	ada := mcpauth.Principal{Issuer: is.URL(), Subject: "ada"}.ID()
	boID := mcpauth.Principal{Issuer: is.URL(), Subject: "bo"}.ID()
	if strings.Join(subjects, " ") != ada+" "+boID+" alice" {
		t.Errorf("subjects %q, want %q", subjects, []string{ada, boID, "alice"})
	}

	// A valid token without the scope: 403, the scope named, nothing written.
	c := &wire{t: t, url: url, header: http.Header{"Authorization": {"Bearer " + token("ada", "desktop", "openid")}}}
	resp = c.do(c.req(http.MethodPost, createBody(1, newRID(), "no scope", "")))
	resp.Body.Close()
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="tickets"`) {
		t.Errorf("without the scope: HTTP %d, WWW-Authenticate %q", resp.StatusCode, ch)
	}
	if n := e.tickets(t); n != 3 {
		t.Errorf("%d tickets, want 3", n)
	}
	out := logs.String()
	for _, tok := range []string{adaDesktop, adaCLI, bo} {
		if strings.Contains(out, tok[len(tok)-30:]) {
			t.Error("an access token appears in the logs")
		}
	}
	for _, f := range []string{e.db.Path, e.db.Path + "-wal"} {
		b, _ := os.ReadFile(f)
		for _, tok := range []string{adaDesktop, adaCLI, bo} {
			if strings.Contains(string(b), tok[len(tok)-30:]) {
				t.Errorf("an access token is stored in %s", f)
			}
		}
	}
}

// TestOAuthBadTokens: every bad access token gets 401 with an
// invalid_token challenge, one log line saying why, and nothing written.
func TestOAuthBadTokens(t *testing.T) {
	now := time.Now()
	for name, edit := range map[string]func(map[string]any) string{
		"expired":        func(c map[string]any) string { c["exp"] = now.Add(-time.Hour).Unix(); return "expired" },
		"wrong audience": func(c map[string]any) string { c["aud"] = "https://other.example/mcp"; return "not meant for" },
		"wrong issuer":   func(c map[string]any) string { c["iss"] = "https://evil.example"; return "issuer" },
		"oversized":      func(c map[string]any) string { c["pad"] = strings.Repeat("b", 10000); return "bytes long" },
	} {
		t.Run(name, func(t *testing.T) {
			var logs testio.Buffer
			e := newTenv(t)
			is, url := oauthServer(t, e, &logs, RateLimit{PerSecond: -1})
			c := is.Claims("ada", testResource, now)
			why := edit(c)
			w := &wire{t: t, url: url, header: http.Header{"Authorization": {"Bearer " + is.Mint(c)}}}
			resp := w.do(w.req(http.MethodPost, createBody(1, newRID(), name, "")))
			resp.Body.Close()
			if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(ch, `error="invalid_token"`) {
				t.Errorf("HTTP %d, WWW-Authenticate %q", resp.StatusCode, ch)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "invalid access token") || !strings.Contains(lines[0], why) {
				t.Errorf("logged %q, want one line saying %q", lines, why)
			}
			if n := e.tickets(t); n != 0 {
				t.Errorf("a bad token wrote %d tickets", n)
			}
		})
	}
}

// TestOAuthFailuresThrottled: a client that keeps sending bad access tokens
// is throttled as one sending bad static tokens is: 429 once its failures
// are spent, before its token is even looked at.
func TestOAuthFailuresThrottled(t *testing.T) {
	var logs testio.Buffer
	e := newTenv(t)
	is, url := oauthServer(t, e, &logs, RateLimit{PerSecond: 0.001, Burst: 3})
	c := is.Claims("ada", testResource, time.Now())
	c["aud"] = "https://other.example/mcp"
	w := &wire{t: t, url: url, header: http.Header{"Authorization": {"Bearer " + is.Mint(c)}}}
	var codes []int
	for range 4 {
		resp := w.do(w.req(http.MethodPost, createBody(1, newRID(), "x", "")))
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[401 401 401 429]" {
		t.Errorf("answers %v, want three 401 then 429", codes)
	}
	// A good token from the same address waits too.
	w.header.Set("Authorization", "Bearer "+is.Mint(is.Claims("ada", testResource, time.Now())))
	resp := w.do(w.req(http.MethodPost, createBody(1, newRID(), "x", "")))
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a valid token from the throttled address: HTTP %d, want 429", resp.StatusCode)
	}
}

// TestStepUp: a tools/call whose tool AuthConfig.StepUp names a scope for
// is answered 403 insufficient_scope naming -oauth-scopes and that scope,
// on a connection that stays open, counted, and reaches no tool; a call it
// names none for goes through.
func TestStepUp(t *testing.T) {
	e := newTenv(t)
	is := mcpauthtest.NewIssuer(t)
	v, err := mcpauth.New(mcpauth.Config{Issuer: is.URL(), Audience: testResource,
		Metrics: metrics.NewOAuth(prometheus.NewRegistry(), mcpauth.Outcomes)})
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	var refused []string
	var mu sync.Mutex
	ts, _ := e.serve(t, Config{
		Auth: &AuthConfig{OAuth: v, Resource: testResource, AuthorizationServers: []string{is.URL()}, Scopes: []string{"tickets"},
			StepUp: func(ti *auth.TokenInfo, tool string) string {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, tool)
				if p, ok := mcpauth.FromTokenInfo(ti); ok && !p.HasScopes([]string{"tickets.write"}) {
					return "tickets.write"
				}
				return ""
			}},
		Refused: func(r string) { mu.Lock(); refused = append(refused, r); mu.Unlock() },
	})
	mint := func(scope string) http.Header {
		c := is.Claims("ada", testResource, time.Now())
		c["scope"] = scope
		return http.Header{"Authorization": {"Bearer " + is.Mint(c)}}
	}

	reader := &wire{t: t, url: ts.URL, header: mint("tickets")}
	reader.initialize()
	resp := reader.do(reader.req(http.MethodPost, createBody(1, newRID(), "x", "")))
	resp.Body.Close()
	if c := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(c, `error="insufficient_scope"`) || !strings.Contains(c, `scope="tickets tickets.write"`) ||
		!strings.Contains(c, `resource_metadata=`) || resp.Header.Get("Connection") == "close" {
		t.Errorf("without tickets.write: HTTP %d, WWW-Authenticate %q, Connection %q", resp.StatusCode, c, resp.Header.Get("Connection"))
	}
	if n := e.tickets(t); n != 0 {
		t.Errorf("a refused call wrote %d tickets", n)
	}

	writer := &wire{t: t, url: ts.URL, header: mint("tickets tickets.write")}
	writer.initialize()
	if m := readResponse(t, writer.do(writer.req(http.MethodPost, createBody(1, newRID(), "x", "")))); m.Result == nil {
		t.Errorf("with tickets.write: %+v", m)
	}
	if n := e.tickets(t); n != 1 {
		t.Errorf("tickets after the allowed call: %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(asked) != "[create_ticket create_ticket]" || fmt.Sprint(refused) != "[insufficient_scope]" {
		t.Errorf("StepUp asked for %v (want only the two calls, not initialize), refusals %v", asked, refused)
	}
}
