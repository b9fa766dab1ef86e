package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream/zendesk/zendesktest"
	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// TestCallerOnEveryTicket: mcp-front over HTTP records who asked with each
// ticket: a signed-in user's subject, name and email, a static token's
// subject. The create answer and find_request report it; the same user's
// retry from a second client, whose token names them otherwise, replays
// with the first call's caller; the dispatcher delivers to a zendesk
// target with caller: field the user as the requester, and the static
// token's caller (no email) as a footer.
func TestCallerOnEveryTicket(t *testing.T) {
	is := mcpauthtest.NewIssuer(t)
	zd := zendesktest.New(t, "bot@acme.test", "zd-token", nil)
	listen := freePort(t)
	resource := "http://" + listen + "/mcp"
	const botToken = "bot-0123456789abcdef0123456789ab"
	cfg := writeFile(t, "ticketrelay.yaml", `
targets:
  - name: support
    kind: zendesk
    endpoint: `+zd.URL()+`
    caller: field
    options: {email: bot@acme.test, token_env: ZD_TOKEN}
tools:
  - name: create_ticket
    target: support
`)
	dir := t.TempDir()
	env := newEnv("TICKETRELAY_OAUTH_ISSUER", is.URL(), "TICKETRELAY_AUTH_TOKENS", "bot:"+botToken, "ZD_TOKEN", "zd-token")
	start(t, front.Run, env, "-listen", listen, "-metrics-listen", "", "-config", cfg,
		"-auth-resource", resource, "-oauth-scopes", "tickets", "-create-db", "-db", filepath.Join(dir, "tickets.db"))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mint := func(name, client string) string {
		c := is.Claims("u-ada", resource, time.Now())
		c["name"], c["email"], c["client_id"] = name, "ada@example.com", client
		return is.Mint(c)
	}
	call := func(token, tool string, args map[string]any) map[string]any {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller-test", Version: "0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: resource, HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	callerOf := func(ans map[string]any) ticket.Caller {
		t.Helper()
		b, _ := json.Marshal(ans["caller"])
		var c ticket.Caller
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("caller %s: %v", b, err)
		}
		return c
	}
	ada := ticket.Caller{Subject: mcpauth.Principal{Issuer: is.URL(), Subject: "u-ada"}.ID(), Name: "Ada Lovelace", Email: "ada@example.com"}
	args := map[string]any{"request_id": "r-1", "title": "Printer on fire", "body": "Third floor."}

	first := call(mint("Ada Lovelace", "desktop"), "create_ticket", args)
	if got := callerOf(first); got != ada {
		t.Fatalf("create's caller %+v, want %+v", got, ada)
	}
	again := call(mint("Ada (phone)", "phone"), "create_ticket", args)
	if again["replayed"] != true || again["ticket_id"] != first["ticket_id"] || callerOf(again) != ada {
		t.Fatalf("retry from a second client: %v; want a replay of %v with the first call's caller", again, first["ticket_id"])
	}
	bot := call(botToken, "create_ticket", map[string]any{"request_id": "r-1", "title": "Nightly build broke", "body": "See CI."})
	if got := callerOf(bot); got != (ticket.Caller{Subject: "bot"}) {
		t.Fatalf("static token's caller %+v, want its subject only", got)
	}

	start(t, dispatcher.Run, env, dispatcherArgs(dir, "-config", cfg)...)
	for _, token := range []string{mint("Ada Lovelace", "desktop"), botToken} {
		testwait.For(t, 30*time.Second, "delivery", func() bool {
			return call(token, "find_request", map[string]any{"request_id": "r-1"})["status"] == "delivered"
		})
	}
	if got := callerOf(call(mint("Ada Lovelace", "desktop"), "find_request", map[string]any{"request_id": "r-1"})); got != ada {
		t.Errorf("find_request's caller %+v, want %+v", got, ada)
	}
	byTitle := map[string]zendesktest.Ticket{}
	for _, tk := range zd.Tickets() {
		byTitle[tk.Subject] = tk
	}
	if tk := byTitle["Printer on fire"]; tk.Requester == nil || *tk.Requester != (zendesktest.Requester{Name: ada.Name, Email: ada.Email}) || tk.Desc != "Third floor." {
		t.Errorf("the user's ticket reached Zendesk as %+v (requester %+v)", tk, tk.Requester)
	}
	if tk := byTitle["Nightly build broke"]; tk.Requester != nil || tk.Desc != "See CI.\n\n---\nFiled by an agent for bot via ticketrelay" {
		t.Errorf("the static token's ticket reached Zendesk as %+v", tk)
	}
}

// TestStatusNamesTheCaller: dispatcher status names who asked for each
// uncertain request (the operator may have to ask them whether the ticket
// arrived), escaped, and -json carries the caller object.
func TestStatusNamesTheCaller(t *testing.T) {
	a := newAdminDB(t)
	ctx := context.Background()
	caller := ticket.Caller{Subject: "idp.example.com/u1", Name: "Ada", Email: "ada@example.com"}
	req := ticket.Request{RequestID: "req-unc", Subject: caller.Subject, Caller: caller, Tool: "create_ticket", Target: "alerts", Title: "Pager"}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.l.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	d := request.Delivery{RequestID: req.Scoped(), Target: "alerts", State: string(request.StatusUncertain), Attempts: 1, LastError: "attempt 1 ended without an answer"}
	if err := a.l.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	out, err := a.admin(t, "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "caller idp.example.com/u1 (ada@example.com)") {
		t.Errorf("status does not name the caller:\n%s", out)
	}
	js, err := a.admin(t, "status", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var s ledger.Summary
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Uncertain) != 1 || s.Uncertain[0].Caller == nil || *s.Uncertain[0].Caller != caller {
		t.Errorf("status -json's uncertain requests carry no caller:\n%s", js)
	}
}
