package app_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream/jira/jiratest"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/testwait"
)

// TestToolFields: a create tool's configured fields through the real
// front over HTTP, the ledger, NATS and the forwarder, to a Jira fake
// that checks each field's shape as the create API documents it:
//
//   - tools/list shows the fields' arguments, typed, with their enum and
//     which are required;
//   - a value outside the enum, or a required one missing, is refused,
//     naming the argument, and nothing is stored;
//   - a ticket's fields (fixed and from arguments) reach Jira in the
//     API's shape, the tool's issue type over the target's;
//   - the arguments are part of the request: the same ones replay, another
//     value under the same request_id is idempotency_key_conflict.
func TestToolFields(t *testing.T) {
	ji := jiratest.New(t, "bot@acme.test", "jira-token", "OPS", 0, nil)
	listen := freePort(t)
	cfg := writeFile(t, "ticketrelay.yaml", `
targets:
  - {name: ops, kind: jira, endpoint: '`+ji.URL()+`', options: {email: bot@acme.test, token_env: JIRA_TOKEN, project: OPS}}
tools:
  - name: report_bug
    target: ops
    fields:
      - {field: issuetype, value: Bug}
      - {field: components, value: [Backend]}
      - field: customfield_10010
        argument: team
        enum: [ops, web]
        required: true
        wrap: value
        description: The team that owns the bug.
      - {field: assignee, argument: owner, description: The accountId of whoever fixes it.}
`)
	dir := t.TempDir()
	env := newEnv("JIRA_TOKEN", "jira-token")
	start(t, front.Run, env, "-listen", listen, "-metrics-listen", "", "-config", cfg, "-create-db", "-db", filepath.Join(dir, "tickets.db"))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fields-test", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + listen + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	raw := func(args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "report_bug", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	find := func(id string) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_request", Arguments: map[string]any{"request_id": id}})
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "report_bug" })
	if i < 0 {
		t.Fatal("report_bug is not listed")
	}
	b, _ := json.Marshal(tools.Tools[i].InputSchema)
	var schema struct {
		Required   []string
		Properties map[string]struct {
			Type        string
			Enum        []string
			Description string
		}
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	team, owner := schema.Properties["team"], schema.Properties["owner"]
	if team.Type != "string" || !slices.Equal(team.Enum, []string{"ops", "web"}) || team.Description != "The team that owns the bug." ||
		!slices.Contains(schema.Required, "team") || owner.Type != "string" || slices.Contains(schema.Required, "owner") {
		t.Fatalf("report_bug's input schema: %s", b)
	}
	if _, fixed := schema.Properties["issuetype"]; fixed {
		t.Errorf("a fixed field is shown as an argument: %s", b)
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"request_id": "bad-1", "title": "Checkout 500", "team": "sales"}, `invalid argument "team": is "sales"; expected one of "ops", "web"`},
		{map[string]any{"request_id": "bad-2", "title": "Checkout 500"}, `invalid argument "team": is required`},
		{map[string]any{"request_id": "bad-3", "title": "Checkout 500", "team": "ops", "owner": 7}, `invalid argument "owner": must be of type string`},
		{map[string]any{"request_id": "bad-4", "title": "Checkout 500", "team": "ops", "Owner": "x"}, `unknown argument "Owner" (names are case-sensitive: "owner")`},
	} {
		text, isErr := raw(c.args)
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("%v: %v %s; want an error containing %q", c.args, isErr, text, c.want)
		}
		if st := find(c.args["request_id"].(string))["status"]; st != "unknown" {
			t.Errorf("%v was refused, but find_request says %v", c.args, st)
		}
	}

	args := map[string]any{"request_id": "f-1", "title": "Checkout 500", "team": "ops", "owner": jiratest.Users[0]}
	if text, isErr := raw(args); isErr {
		t.Fatal(text)
	}
	if text, _ := raw(args); !strings.Contains(text, `"replayed":true`) {
		t.Errorf("the same call again: %s; want replayed", text)
	}
	other := map[string]any{"request_id": "f-1", "title": "Checkout 500", "team": "web", "owner": jiratest.Users[0]}
	if text, isErr := raw(other); !isErr || !strings.HasPrefix(text, "idempotency_key_conflict") {
		t.Errorf("f-1 with another team: %v %s; want idempotency_key_conflict", isErr, text)
	}

	disp := start(t, dispatcher.Run, env, dispatcherArgs(dir, "-config", cfg)...)
	var st map[string]any
	if !testwait.Until(60*time.Second, func() bool { st = find("f-1"); return st["status"] == "delivered" || st["status"] == "failed" }) ||
		st["status"] != "delivered" {
		t.Fatalf("f-1: %v\ndispatcher:\n%s", st, disp.stderr)
	}
	issues := ji.Issues()
	if len(issues) != 1 {
		t.Fatalf("Jira has %d issues, want 1", len(issues))
	}
	is := issues[0]
	extra, _ := json.Marshal(is.Extra)
	if is.Type != "Bug" || string(is.Extra["customfield_10010"]) != `{"value":"ops"}` || string(is.Extra["components"]) != `[{"name":"Backend"}]` ||
		string(is.Extra["assignee"]) != `{"accountId":"`+jiratest.Users[0]+`"}` {
		t.Errorf("the issue: type %s, fields %s", is.Type, extra)
	}
}
