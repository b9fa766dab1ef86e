package mcptools_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/front/mcptools"
)

// TestGrantsOfTheCallerWithoutToken: a caller without a token (stdio, or
// HTTP without authentication) is held to the grants only if one names it
// (anonymous); then it lists and calls only what that grant gives, and a
// call beyond it is a tool error naming what would grant it, that writes
// nothing and is counted by tool.
func TestGrantsOfTheCallerWithoutToken(t *testing.T) {
	writer := mcptools.Grant{Scope: "tickets.write", Tools: []string{keyedTool, mcptools.FindRequestTool, unkeyedTool}}

	// No grant names it: every tool, as without grants.
	e := newEnvWith(t, mcptools.NewAccess([]mcptools.Grant{writer}))
	cs := e.connect(t)
	if got := listNames(t, e); got != "create_ticket,create_webhook_ticket,find_request" {
		t.Errorf("not held: tools/list %q", got)
	}
	if res := call(t, cs, keyedTool, map[string]any{"request_id": newID(), "title": "t"}); res.IsError {
		t.Errorf("not held: create: %s", text(res))
	}

	// A grant names it: find_request and the webhook tool only.
	e = newEnvWith(t, mcptools.NewAccess([]mcptools.Grant{writer,
		{Anonymous: true, Tools: []string{mcptools.FindRequestTool, unkeyedTool}}}))
	cs = e.connect(t)
	if got := listNames(t, e); got != "create_webhook_ticket,find_request" {
		t.Errorf("held: tools/list %q", got)
	}
	res := call(t, cs, keyedTool, map[string]any{"request_id": newID(), "title": "t"})
	if !res.IsError || !strings.Contains(text(res), `create_ticket is not granted to the caller without a token`) ||
		!strings.Contains(text(res), `It is granted to scope "tickets.write"`) {
		t.Errorf("held: create_ticket: %+v %s", res, text(res))
	}
	if r := e.rows(t); r != (rows{}) {
		t.Errorf("a refused call wrote %+v", r)
	}
	if v := testutil.ToFloat64(e.m.ToolRefused.WithLabelValues(keyedTool)); v != 1 {
		t.Errorf("refusals of create_ticket: %v, want 1", v)
	}
	if v := testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, "error")); v != 0 {
		t.Errorf("a refused call counted as a tool call: %v", v)
	}
	// A name that is no tool is still the SDK's to refuse, and makes no
	// label: the tools' three, exported at 0 from the start, stay all.
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such_tool"}); err == nil && !res.IsError {
		t.Error("a call of no tool was answered")
	}
	if n := testutil.CollectAndCount(e.m.ToolRefused); n != 3 {
		t.Errorf("refusal series: %d, want 3 (one per tool)", n)
	}
	if res := call(t, cs, unkeyedTool, map[string]any{"request_id": newID(), "title": "t"}); res.IsError {
		t.Errorf("held: the granted create: %s", text(res))
	}
}

// listNames is the names of the tools a fresh session lists, in the
// order the server lists them (by name).
func listNames(t *testing.T, e *env) string {
	t.Helper()
	var names []string
	for tool, err := range e.connect(t).Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return strings.Join(names, ",")
}
