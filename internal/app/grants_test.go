package app_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/internal/app/front"
	"ticketrelay/store"
	"ticketrelay/store/ledger"
)

// grantsConfig grants every tool to the scope tickets.write, find_request
// to the scope tickets, create_incident to the group oncall, the tools of
// the target local to the static subject bot and find_request to the
// static subject viewer.
const grantsConfig = `
targets:
  - name: local
    kind: local
tools:
  - name: create_ticket
    target: local
  - name: create_incident
    target: local
grants:
  - scope: tickets.write
    tools: all
  - scope: tickets
    tools: read-only
  - group: oncall
    tools: [create_incident]
  - subject: bot
    targets: [local]
  - subject: viewer
    tools: read-only
`

// recordingRT adds a bearer token to every request and keeps the status
// and WWW-Authenticate of the last answer that was not a success.
type recordingRT struct {
	token string
	mu    sync.Mutex
	last  *http.Response
}

func (rt *recordingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rt.token)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && resp.StatusCode >= 300 {
		rt.mu.Lock()
		rt.last = &http.Response{StatusCode: resp.StatusCode, Header: resp.Header.Clone()}
		rt.mu.Unlock()
	}
	return resp, err
}

func (rt *recordingRT) refused() *http.Response {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.last
}

// TestFrontGrants: with grants, mcp-front over HTTP shows each caller,
// signed in (by scope or group) or with a static token (by subject), only
// the tools it may call; a call beyond its grant is a 403 insufficient_scope
// naming the scope to step up to when a scope grants the tool and the
// caller signed in, else a tool error naming what is missing; neither
// writes a row, and both are counted by tool.
func TestFrontGrants(t *testing.T) {
	is := mcpauthtest.NewIssuer(t)
	listen := freePort(t)
	resource := "http://" + listen + "/mcp"
	const (
		botToken      = "bot-0123456789abcdef0123456789ab"
		viewerToken   = "viewer-0123456789abcdef01234567"
		strangerToken = "stranger-0123456789abcdef012345"
	)
	db := filepath.Join(t.TempDir(), "t.db")
	env := newEnv("TICKETRELAY_OAUTH_ISSUER", is.URL(),
		"TICKETRELAY_AUTH_TOKENS", "bot:"+botToken+",viewer:"+viewerToken+",stranger:"+strangerToken)
	r := start(t, front.Run, env, "-listen", listen, "-metrics-listen", "127.0.0.1:0", "-config", writeFile(t, "grants.yaml", grantsConfig),
		"-auth-resource", resource, "-oauth-scopes", "tickets", "-create-db", "-db", db)
	metricsAddr := r.addrs["metrics"]
	if !strings.Contains(r.stderr.String(), `grants="scope tickets.write->create_incident+create_ticket+find_request+search_tickets, scope tickets->find_request+search_tickets, `) {
		t.Errorf("the start-up log does not list the grants:\n%s", r.stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mint := func(sub, scope string, groups ...string) string {
		c := is.Claims(sub, resource, time.Now())
		c["scope"] = scope
		if groups != nil {
			c["groups"] = groups
		}
		return is.Mint(c)
	}
	connect := func(token string) (*mcp.ClientSession, *recordingRT) {
		t.Helper()
		rt := &recordingRT{token: token}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "grants-test", Version: "0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: resource, HTTPClient: &http.Client{Transport: rt}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs, rt
	}
	listed := func(cs *mcp.ClientSession) string {
		t.Helper()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		slices.Sort(names)
		return strings.Join(names, ",")
	}
	create := func(cs *mcp.ClientSession, tool, id string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"request_id": id, "title": "Printer on fire"}})
	}
	text := func(res *mcp.CallToolResult) string {
		if res == nil || len(res.Content) == 0 {
			return ""
		}
		tc, _ := res.Content[0].(*mcp.TextContent)
		if tc == nil {
			return ""
		}
		return tc.Text
	}

	for _, c := range []struct {
		name, token, tools string
		allowed, denied    []string
		stepUp             bool // a denied create is answered 403 naming tickets.write
	}{
		{name: "reader", token: mint("ada", "tickets"), tools: "find_request,search_tickets",
			denied: []string{"create_ticket", "create_incident"}, stepUp: true},
		{name: "on call", token: mint("bea", "tickets", "oncall"), tools: "add_comment,create_incident,find_request,search_tickets,update_ticket",
			allowed: []string{"create_incident"}, denied: []string{"create_ticket"}, stepUp: true},
		{name: "writer", token: mint("cy", "tickets tickets.write"), tools: "add_comment,create_incident,create_ticket,find_request,search_tickets,update_ticket",
			allowed: []string{"create_ticket", "create_incident"}},
		{name: "static bot", token: botToken, tools: "add_comment,create_incident,create_ticket,find_request,search_tickets,update_ticket",
			allowed: []string{"create_ticket"}},
		{name: "static viewer", token: viewerToken, tools: "find_request,search_tickets",
			denied: []string{"create_ticket", "create_incident"}},
	} {
		cs, _ := connect(c.token)
		if got := listed(cs); got != c.tools {
			t.Errorf("%s: tools/list %q, want %q", c.name, got, c.tools)
		}
		id := strings.ReplaceAll(c.name, " ", "-")
		for _, tool := range c.allowed {
			if res, err := create(cs, tool, id+"-"+tool); err != nil || res.IsError {
				t.Errorf("%s: %s: %v %s", c.name, tool, err, text(res))
			}
		}
		for _, tool := range c.denied {
			if c.stepUp {
				// The go-sdk client ends its session on a 403: a client
				// steps up by signing in again and reconnecting.
				cs, rt := connect(c.token)
				_, err := create(cs, tool, id+"-denied-"+tool)
				resp := rt.refused()
				if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden ||
					!strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) ||
					!strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="tickets tickets.write"`) {
					t.Errorf("%s: %s: want a 403 insufficient_scope step-up to tickets.write; got %v, %+v", c.name, tool, err, resp)
				}
				continue
			}
			res, err := create(cs, tool, id+"-denied-"+tool)
			if err != nil || !res.IsError || !strings.Contains(text(res), `scope "tickets.write"`) || !strings.Contains(text(res), "nothing was done") {
				t.Errorf("%s: %s: want a tool error naming the scope; got %v %q", c.name, tool, err, text(res))
			}
		}
		if c.stepUp {
			continue
		}
		// The session survives a refusal: find_request still answers.
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_request", Arguments: map[string]any{"request_id": "x"}}); err != nil || res.IsError {
			t.Errorf("%s: find_request after the refusals: %v %s", c.name, err, text(res))
		}
	}

	// A static subject no grant names sees no tool and may call none.
	cs, _ := connect(strangerToken)
	if got := listed(cs); got != "" {
		t.Errorf("stranger: tools/list %q, want none", got)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_request", Arguments: map[string]any{"request_id": "x"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "find_request is not granted to subject stranger") {
		t.Errorf("stranger: find_request: %v %q", err, text(res))
	}

	// Only the allowed creates wrote: on call 1, writer 2, bot 1.
	ldb, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer ldb.Close()
	if n, err := ledger.New(ldb, nil, time.Now).CountRequests(ctx); err != nil || n != 4 {
		t.Errorf("requests in the ledger: %d (%v), want 4: a refused call writes nothing", n, err)
	}
	for sample, want := range map[string]float64{
		`ticketrelay_tool_calls_refused_total{tool="create_ticket"}`:   3, // reader and on call (403), viewer (tool error)
		`ticketrelay_tool_calls_refused_total{tool="create_incident"}`: 2, // reader (403), viewer
		`ticketrelay_tool_calls_refused_total{tool="find_request"}`:    1, // stranger
		`ticketrelay_http_refused_total{reason="insufficient_scope"}`:  3, // reader twice, on call
	} {
		if v := scrapeValue(t, metricsAddr, sample); v != want {
			t.Errorf("%s = %v, want %v", sample, v, want)
		}
	}
}
