package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/app/front"
)

// searchConfig has two targets; alice and bob may file to ops, carol to
// web, viewer only reads.
const searchConfig = `
targets:
  - name: ops
    kind: local
    options: {path: ops.jsonl}
  - name: web
    kind: local
    options: {path: web.jsonl}
tools:
  - name: create_ops
    target: ops
  - name: create_web
    target: web
grants:
  - subject: alice
    targets: [ops]
  - subject: bob
    targets: [ops]
  - subject: carol
    targets: [web]
  - subject: viewer
    tools: read-only
`

const (
	aliceToken  = "alice-0123456789abcdef0123456789"
	bobToken    = "bob-0123456789abcdef0123456789ab"
	carolToken  = "carol-0123456789abcdef0123456789"
	viewerTokn  = "viewer-0123456789abcdef01234567"
	searchUsers = "alice:" + aliceToken + ",bob:" + bobToken + ",carol:" + carolToken + ",viewer:" + viewerTokn
)

type searchHit struct {
	TicketID    string `json:"ticket_id"`
	RequestID   string `json:"request_id"`
	Target      string `json:"target"`
	Title       string `json:"title"`
	Status      string `json:"status"`
	CreatedAt   string `json:"created_at"`
	ExternalURL string `json:"external_url"`
	Snippet     string `json:"snippet"`
	Mine        bool   `json:"mine"`
}

type searchAnswer struct {
	Results    []searchHit `json:"results"`
	NextCursor string      `json:"next_cursor"`
}

// searchFront starts mcp-front over HTTP with static tokens and extra
// configuration, and returns a connect function for a token.
func searchFront(t *testing.T, ctx context.Context, extra string) func(token string) *mcp.ClientSession {
	t.Helper()
	listen := freePort(t)
	dir := t.TempDir()
	start(t, front.Run, newEnv("TICKETRELAY_AUTH_TOKENS", searchUsers), "-listen", listen, "-metrics-listen", "127.0.0.1:0",
		"-config", writeFile(t, "search.yaml", searchConfig+extra), "-create-db", "-db", filepath.Join(dir, "t.db"))
	return func(token string) *mcp.ClientSession {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "search-test", Version: "0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + listen + "/mcp",
				HTTPClient: &http.Client{Transport: &recordingRT{token: token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
}

func fileTicket(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool, id, title, body string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"request_id": id, "title": title, "body": body}})
	if err != nil || res.IsError {
		t.Fatalf("%s %s: %v %+v", tool, id, err, res)
	}
}

// searchCall calls search_tickets; a tool error comes back as its text.
func searchCall(t *testing.T, ctx context.Context, cs *mcp.ClientSession, args map[string]any) (searchAnswer, string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_tickets", Arguments: args})
	if err != nil {
		t.Fatalf("search_tickets %v: %v", args, err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError {
		return searchAnswer{}, text
	}
	var a searchAnswer
	if err := json.Unmarshal([]byte(text), &a); err != nil {
		t.Fatalf("search_tickets answer %q: %v", text, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if !json.Valid(b) || !strings.Contains(string(b), `"results"`) {
		t.Fatalf("search_tickets: structured content %s", b)
	}
	return a, ""
}

func requestIDs(a searchAnswer) []string {
	var out []string
	for _, h := range a.Results {
		out = append(out, h.RequestID)
	}
	return out
}

// TestSearchTickets: over HTTP with the go-sdk client, search_tickets
// finds the tickets of the targets a caller may file to and its own,
// best match first, pages with a cursor, and refuses bad arguments with a
// tool error; every grant includes it.
func TestSearchTickets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := searchFront(t, ctx, "")
	alice, bob, carol, viewer := connect(aliceToken), connect(bobToken), connect(carolToken), connect(viewerTokn)

	tools, err := viewer.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Name == "search_tickets" && (tool.Annotations == nil || !tool.Annotations.ReadOnlyHint || tool.OutputSchema == nil) {
			t.Errorf("search_tickets: annotations %+v, output schema %v", tool.Annotations, tool.OutputSchema)
		}
	}
	if strings.Join(names, ",") != "find_request,search_tickets" {
		t.Errorf("a read-only caller lists %v", names)
	}

	fileTicket(t, ctx, alice, "create_ops", "a-title", "Checkout returns 500", "seen on every run of the nightly job")
	fileTicket(t, ctx, alice, "create_ops", "a-body", "Payments slow", "the checkout page returns 500 under load")
	fileTicket(t, ctx, carol, "create_web", "c-web", "Checkout returns 500 on web", "x")

	// Bob finds alice's ops tickets (title match first), not carol's web one.
	a, errText := searchCall(t, ctx, bob, map[string]any{"query": "checkout 500"})
	if errText != "" || fmt.Sprint(requestIDs(a)) != "[a-title a-body]" {
		t.Fatalf("bob: %v %s", requestIDs(a), errText)
	}
	h := a.Results[0]
	if h.Mine || h.Target != "ops" || h.Title != "Checkout returns 500" || h.Status != "queued" || !strings.HasPrefix(h.TicketID, "tkt_") ||
		h.CreatedAt == "" || h.ExternalURL != "" || a.NextCursor != "" {
		t.Errorf("bob's first hit: %+v (next %q)", h, a.NextCursor)
	}
	if s := a.Results[1].Snippet; !strings.Contains(s, "[checkout]") || !strings.Contains(s, "[500]") {
		t.Errorf("snippet %q lacks the marked matches", s)
	}
	// Alice's own are hers; carol finds only hers; the read-only viewer none.
	if a, _ := searchCall(t, ctx, alice, map[string]any{"query": "checkout"}); len(a.Results) != 2 || !a.Results[0].Mine {
		t.Errorf("alice: %+v", a)
	}
	if a, _ := searchCall(t, ctx, carol, map[string]any{"query": "checkout"}); fmt.Sprint(requestIDs(a)) != "[c-web]" {
		t.Errorf("carol: %v", requestIDs(a))
	}
	if a, errText := searchCall(t, ctx, viewer, map[string]any{"query": "checkout"}); errText != "" || len(a.Results) != 0 {
		t.Errorf("viewer: %+v %s", a, errText)
	}

	// The query's punctuation is never syntax: FTS5 operators, quotes,
	// column filters and prefixes only separate the words.
	for _, q := range []string{`"checkout" (500*`, `checkout:500`, `checkout^ -500`, `{checkout}: 500`, `checkout" + "500`} {
		if a, errText := searchCall(t, ctx, bob, map[string]any{"query": q}); errText != "" || len(a.Results) == 0 {
			t.Errorf("query %q: %v %s", q, requestIDs(a), errText)
		}
	}

	// Pages: every ticket once, in order, then no cursor.
	for i := range 5 {
		fileTicket(t, ctx, bob, "create_ops", fmt.Sprintf("exp-%d", i), "Export failed", fmt.Sprintf("run %d", i))
	}
	var paged []string
	args := map[string]any{"query": "export failed", "limit": 2}
	for range 5 {
		a, errText := searchCall(t, ctx, alice, args)
		if errText != "" {
			t.Fatal(errText)
		}
		paged = append(paged, requestIDs(a)...)
		if a.NextCursor == "" {
			break
		}
		args = map[string]any{"query": "export failed", "limit": 2, "cursor": a.NextCursor}
	}
	sorted := slices.Clone(paged)
	slices.Sort(sorted)
	if len(paged) != 5 || len(slices.Compact(sorted)) != 5 {
		t.Errorf("pages = %v, want the 5 export tickets once each", paged)
	}

	// Bad arguments: a tool error that names the argument.
	first, _ := searchCall(t, ctx, alice, map[string]any{"query": "export", "limit": 2})
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"query": `"*()`}, `invalid argument "query": has no words`},
		{map[string]any{"query": "x", "limit": 0}, `invalid argument "limit": is 0`},
		{map[string]any{"query": "x", "status": "open"}, `invalid argument "status": "open" is not one of`},
		{map[string]any{"query": "x", "cursor": "nonsense!"}, `invalid argument "cursor": is not a cursor`},
		{map[string]any{"query": "other", "limit": 2, "cursor": first.NextCursor}, `invalid argument "cursor": belongs to a search with other arguments`},
		{map[string]any{"query": "x", "owner": "f"}, `unknown argument "owner"`},
		{map[string]any{}, `invalid argument "query": is missing: give words to find, a fingerprint, or both`},
		{map[string]any{"query": "", "fingerprint": "fp"}, `invalid argument "query"`},
	} {
		if _, errText := searchCall(t, ctx, alice, c.args); !strings.Contains(errText, c.want) {
			t.Errorf("%v: error %q, want it to contain %q", c.args, errText, c.want)
		}
	}
}

// TestSearchScopeOwn: with search_scope: own, a caller finds only its own
// tickets, even on a target it shares.
func TestSearchScopeOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := searchFront(t, ctx, "search_scope: own\n")
	alice, bob := connect(aliceToken), connect(bobToken)
	fileTicket(t, ctx, alice, "create_ops", "a1", "Disk full on db-1", "x")
	fileTicket(t, ctx, bob, "create_ops", "b1", "Disk full on db-2", "x")
	if a, errText := searchCall(t, ctx, bob, map[string]any{"query": "disk full"}); errText != "" || fmt.Sprint(requestIDs(a)) != "[b1]" {
		t.Errorf("bob with search_scope own: %v %s", requestIDs(a), errText)
	}
}
