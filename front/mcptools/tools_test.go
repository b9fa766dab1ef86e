package mcptools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/ticket"
)

func listTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	return tools
}

// TestToolTitles: a create tool's title says what it does in the words of
// the system it files into, with the target's name when that is not just
// the kind's, so that a user reading a client's list of tools knows which
// is which. The embedded local target reads as the local ticket file.
func TestToolTitles(t *testing.T) {
	e := newEnv(t)
	tools := listTools(t, e.connect(t))
	for tool, want := range map[string]string{
		keyedTool:   "Create a ticket in the local ticket file",
		unkeyedTool: "Create a ticket via webhook",
	} {
		if got := tools[tool].Annotations.Title; got != want {
			t.Errorf("%s: title %q, want %q", tool, got, want)
		}
	}
	bindings := []mcptools.Binding{
		{Tool: "a", Target: "zendesk", Kind: "zendesk"},
		{Tool: "b", Target: "ops", Kind: "jira"},
		{Tool: "c", Target: "archive", Kind: "local"},
		{Tool: "d", Target: "GitHub", Kind: "github"},
		{Tool: "e", Target: "tracker"}, // kind not given
	}
	srv, err := mcptools.New(mcptools.Config{Bindings: bindings}, e.l, metrics.NewFront(prometheus.NewRegistry()), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	tools = listTools(t, e.connect(t))
	for tool, want := range map[string]string{
		"a": "Create a Zendesk ticket",
		"b": "Create a Jira issue (ops)",
		"c": "Create a ticket in the local ticket file (archive)",
		"d": "Create a GitHub issue",
		"e": "Create a ticket in tracker",
	} {
		if got := tools[tool].Annotations.Title; got != want {
			t.Errorf("%s: title %q, want %q", tool, got, want)
		}
	}
}

func TestToolsListAnnotations(t *testing.T) {
	e := newEnv(t)
	tools := listTools(t, e.connect(t))
	if len(tools) != 3 {
		t.Fatalf("tools/list returned %d tools, want 3 (two create tools and find_request): %v", len(tools), tools)
	}

	keyed := tools[keyedTool]
	if keyed == nil || keyed.Annotations == nil {
		t.Fatalf("%s missing or without annotations: %+v", keyedTool, keyed)
	}
	a := keyed.Annotations
	if !a.IdempotentHint {
		t.Errorf("%s: idempotentHint = false, want true (target has a dedupe key)", keyedTool)
	}
	if a.DestructiveHint == nil {
		t.Errorf("%s: destructiveHint absent; clients then assume destructive", keyedTool)
	} else if *a.DestructiveHint {
		t.Errorf("%s: destructiveHint = true, want false", keyedTool)
	}
	if a.ReadOnlyHint {
		t.Errorf("%s: readOnlyHint = true, want false", keyedTool)
	}
	if a.OpenWorldHint == nil || !*a.OpenWorldHint {
		t.Errorf("%s: openWorldHint = %v, want true", keyedTool, a.OpenWorldHint)
	}
	kd := strings.ToLower(keyed.Description)
	for _, want := range []string{"fresh uuid", "same request_id", "same arguments", "retry"} {
		if !strings.Contains(kd, want) {
			t.Errorf("%s description lacks %q: %q", keyedTool, want, keyed.Description)
		}
	}
	if strings.Contains(kd, "do not retry") {
		t.Errorf("%s description forbids retries although the target dedupes: %q", keyedTool, keyed.Description)
	}

	unkeyed := tools[unkeyedTool]
	if unkeyed == nil || unkeyed.Annotations == nil {
		t.Fatalf("%s missing or without annotations: %+v", unkeyedTool, unkeyed)
	}
	if unkeyed.Annotations.IdempotentHint {
		t.Errorf("%s: idempotentHint = true for a target without dedupe key", unkeyedTool)
	}
	if unkeyed.Annotations.DestructiveHint == nil || *unkeyed.Annotations.DestructiveHint {
		t.Errorf("%s: destructiveHint = %v, want explicit false", unkeyedTool, unkeyed.Annotations.DestructiveHint)
	}
	ud := strings.ToLower(unkeyed.Description)
	for _, want := range []string{"fresh uuid", "do not retry", "find_request", "same request_id"} {
		if !strings.Contains(ud, want) {
			t.Errorf("%s description lacks %q: %q", unkeyedTool, want, unkeyed.Description)
		}
	}
	// find_request must come before any retry in the advice.
	if i, j := strings.Index(ud, "find_request"), strings.LastIndex(ud, "retry only"); i < 0 || j < 0 || i > j {
		t.Errorf("%s description does not tell to call find_request before retrying: %q", unkeyedTool, unkeyed.Description)
	}

	find := tools[mcptools.FindRequestTool]
	if find == nil || find.Annotations == nil {
		t.Fatalf("find_request missing or without annotations: %+v", find)
	}
	if !find.Annotations.ReadOnlyHint {
		t.Errorf("find_request: readOnlyHint = false, want true")
	}
}

func TestCreateInputSchema(t *testing.T) {
	e := newEnv(t)
	tools := listTools(t, e.connect(t))
	for _, name := range []string{keyedTool, unkeyedTool} {
		b, err := json.Marshal(tools[name].InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Type                 string   `json:"type"`
			AdditionalProperties *bool    `json:"additionalProperties"`
			Required             []string `json:"required"`
			Properties           map[string]struct {
				Type      string   `json:"type"`
				MaxLength *int     `json:"maxLength"`
				MinLength *int     `json:"minLength"`
				MaxItems  *int     `json:"maxItems"`
				Enum      []string `json:"enum"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s input schema %s: %v", name, b, err)
		}
		if s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: schema type %q additionalProperties %v, want object/false", name, s.Type, s.AdditionalProperties)
		}
		for _, r := range []string{"request_id", "title"} {
			if !slices.Contains(s.Required, r) {
				t.Errorf("%s: %q not required: %v", name, r, s.Required)
			}
		}
		maxLen := map[string]int{"request_id": ticket.MaxRequestIDLen, "title": ticket.MaxTitleLen, "body": ticket.MaxBodyLen}
		for p, want := range maxLen {
			got := s.Properties[p].MaxLength
			if got == nil || *got != want {
				t.Errorf("%s: %s.maxLength = %v, want %d", name, p, got, want)
			}
		}
		if got := s.Properties["labels"].MaxItems; got == nil || *got != ticket.MaxLabels {
			t.Errorf("%s: labels.maxItems = %v, want %d", name, got, ticket.MaxLabels)
		}
		if got := s.Properties["priority"].Enum; !slices.Equal(got, ticket.Priorities) {
			t.Errorf("%s: priority enum = %v, want %v", name, got, ticket.Priorities)
		}
	}
}

func TestCreateReplayConflict(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	id := newID()
	args := map[string]any{
		"request_id": id, "title": "Printer on fire", "body": "Third floor.\nSmoke visible.",
		"priority": "high", "labels": []string{"facilities", "urgent-ish"},
	}

	first := structured[createResult](t, call(t, cs, keyedTool, args))
	if first.RequestID != id {
		t.Errorf("request_id = %q, want %q", first.RequestID, id)
	}
	if !strings.HasPrefix(first.TicketID, "tkt_") || first.TicketID != ticket.IDFor(id) {
		t.Errorf("ticket_id = %q, want %q", first.TicketID, ticket.IDFor(id))
	}
	if first.Status != "queued" {
		t.Errorf("status = %q, want queued", first.Status)
	}
	if first.Replayed == nil || *first.Replayed {
		t.Errorf("replayed = %v on the first call, want false", first.Replayed)
	}
	if first.Target != keyedTarget || first.CreatedAt.IsZero() {
		t.Errorf("target %q created_at %v", first.Target, first.CreatedAt)
	}
	if got := e.rows(t); got != (rows{1, 1, 1}) {
		t.Fatalf("after create: rows %+v, want one ledger row, ticket and outbox row", got)
	}

	// The retry comes on a new connection, with the labels in another order
	// (the same request once normalized).
	cs2 := e.connect(t)
	args2 := map[string]any{
		"request_id": id, "title": "Printer on fire", "body": "Third floor.\nSmoke visible.",
		"priority": "high", "labels": []string{"urgent-ish", "facilities"},
	}
	replay := structured[createResult](t, call(t, cs2, keyedTool, args2))
	if replay.Replayed == nil || !*replay.Replayed {
		t.Errorf("replayed = %v on the retry, want true", replay.Replayed)
	}
	if replay.TicketID != first.TicketID || replay.Status != first.Status || !replay.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("replay %+v differs from first result %+v", replay, first)
	}
	if got := e.rows(t); got != (rows{1, 1, 1}) {
		t.Fatalf("after replay: rows %+v, want unchanged", got)
	}

	args3 := map[string]any{"request_id": id, "title": "Printer on fire again", "priority": "high"}
	conflict := call(t, cs, keyedTool, args3)
	if !conflict.IsError {
		t.Fatalf("conflicting reuse of request_id was accepted: %s", text(conflict))
	}
	msg := text(conflict)
	if !strings.HasPrefix(msg, "idempotency_key_conflict") || !strings.Contains(msg, first.TicketID) {
		t.Errorf("conflict message %q: want prefix idempotency_key_conflict and ticket %s", msg, first.TicketID)
	}
	if !strings.Contains(msg, "nothing was written") {
		t.Errorf("conflict message %q does not say nothing was written", msg)
	}
	if got := e.rows(t); got != (rows{1, 1, 1}) {
		t.Fatalf("after conflict: rows %+v, want unchanged", got)
	}

	// The same request_id on the other create tool is a conflict too (tool
	// and target are part of the request).
	other := call(t, cs, unkeyedTool, args)
	if !other.IsError || !strings.HasPrefix(text(other), "idempotency_key_conflict") {
		t.Errorf("same request_id on %s: IsError=%v %q, want a conflict", unkeyedTool, other.IsError, text(other))
	}

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"replays", testutil.ToFloat64(e.m.Replays.WithLabelValues(keyedTool)), 1},
		{"conflicts", testutil.ToFloat64(e.m.Conflicts.WithLabelValues(keyedTool)), 1},
		{"conflicts other tool", testutil.ToFloat64(e.m.Conflicts.WithLabelValues(unkeyedTool)), 1},
		{"calls created", testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, metrics.CallCreated)), 1},
		{"calls replayed", testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, metrics.CallReplayed)), 1},
		{"calls conflict", testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, metrics.CallConflict)), 1},
		{"calls error", testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, metrics.CallError)), 0},
		{"call duration series", float64(testutil.CollectAndCount(e.m.CallDuration)), 2},
	} {
		if c.got != c.want {
			t.Errorf("metric %s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestCreateLimitsAccepted checks the boundaries of the validation table
// from the inside: values exactly at each limit are accepted.
func TestCreateLimitsAccepted(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	labels := make([]string, ticket.MaxLabels)
	for i := range labels {
		labels[i] = fmt.Sprintf("l%02d", i)
	}
	args := map[string]any{
		"request_id": strings.Repeat("r", ticket.MaxRequestIDLen),
		"title":      strings.Repeat("é", ticket.MaxTitleLen), // characters, not bytes
		"body":       strings.Repeat("b", ticket.MaxBodyLen),
		"priority":   "urgent",
		"labels":     labels,
	}
	res := structured[createResult](t, call(t, cs, keyedTool, args))
	if res.Status != "queued" {
		t.Fatalf("status %q", res.Status)
	}
	var title, body, lbls string
	if err := e.db.Reader().QueryRow(`SELECT title, body, labels FROM tickets WHERE request_id = ?`,
		args["request_id"]).Scan(&title, &body, &lbls); err != nil {
		t.Fatal(err)
	}
	if title != args["title"] || body != args["body"] || strings.Count(lbls, `"l`) != ticket.MaxLabels {
		t.Errorf("stored ticket differs: title %d bytes, body %d bytes, labels %s", len(title), len(body), lbls)
	}
}

func TestCreateValidation(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	many := make([]string, ticket.MaxLabels+1)
	for i := range many {
		many[i] = fmt.Sprintf("label-%d", i)
	}
	valid := func(extra map[string]any) map[string]any {
		m := map[string]any{"request_id": newID(), "title": "A valid title"}
		for k, v := range extra {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	cases := []struct {
		name   string
		args   any
		names  string // the message must name this
		metric string // argument label of invalid_calls_total
	}{
		{"missing request_id", valid(map[string]any{"request_id": nil}), "request_id", "request_id"},
		{"request_id with space", valid(map[string]any{"request_id": "abc def"}), "request_id", "request_id"},
		{"request_id with control char", valid(map[string]any{"request_id": "abc\x01def"}), "request_id", "request_id"},
		{"request_id 256 bytes", valid(map[string]any{"request_id": strings.Repeat("a", 256)}), "request_id", "request_id"},
		{"request_id non-ASCII", valid(map[string]any{"request_id": "réquest-1"}), "request_id", "request_id"},
		{"request_id number", valid(map[string]any{"request_id": 12345}), "request_id", "request_id"},
		{"title missing", valid(map[string]any{"title": nil}), "title", "title"},
		{"title number", valid(map[string]any{"title": 42}), "title", "title"},
		{"title empty", valid(map[string]any{"title": ""}), "title", "title"},
		{"title whitespace", valid(map[string]any{"title": " \u00a0  "}), "title", "title"},
		{"title 513 characters", valid(map[string]any{"title": strings.Repeat("é", ticket.MaxTitleLen+1)}), "title", "title"},
		{"title with newline", valid(map[string]any{"title": "two\nlines"}), "title", "title"},
		{"body over 64 KiB", valid(map[string]any{"body": strings.Repeat("x", ticket.MaxBodyLen+1)}), "body", "body"},
		{"body as object", valid(map[string]any{"body": map[string]any{"text": "hi"}}), "body", "body"},
		{"priority critical", valid(map[string]any{"priority": "critical"}), "priority", "priority"},
		{"labels as string", valid(map[string]any{"labels": "a,b"}), "labels", "labels"},
		{"21 labels", valid(map[string]any{"labels": many}), "labels", "labels"},
		{"empty label", valid(map[string]any{"labels": []string{"ok", "  "}}), `"labels[1]"`, "labels"},
		{"unknown argument foo", valid(map[string]any{"foo": "bar"}), `"foo"`, "arguments"},
		{"arguments null", json.RawMessage(`null`), "request_id", "request_id"},
		{"arguments array", []any{"request_id", "title"}, "arguments", "arguments"},
		{"arguments string", "request_id=1", "arguments", "arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.rows(t)
			rejected := testutil.ToFloat64(e.m.Rejected.WithLabelValues(keyedTool, c.metric))
			res := call(t, cs, keyedTool, c.args)
			msg := text(res)
			if !res.IsError {
				t.Fatalf("accepted: %s", msg)
			}
			if !strings.Contains(msg, c.names) {
				t.Errorf("message %q does not name %s", msg, c.names)
			}
			if !strings.Contains(msg, "nothing was written") {
				t.Errorf("message %q does not say nothing was written", msg)
			}
			if got := e.rows(t); got != before {
				t.Errorf("rows %+v after the rejected call, want %+v", got, before)
			}
			if got := testutil.ToFloat64(e.m.Rejected.WithLabelValues(keyedTool, c.metric)); got != rejected+1 {
				t.Errorf("invalid_calls_total{argument=%q} = %v, want %v", c.metric, got, rejected+1)
			}
		})
	}
	if got := e.rows(t); got != (rows{}) {
		t.Errorf("rows after all rejected calls: %+v, want none", got)
	}
	if got, want := testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, metrics.CallInvalid)), float64(len(cases)); got != want {
		t.Errorf("tool_calls_total{outcome=invalid} = %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(keyedTool, metrics.CallCreated)); got != 0 {
		t.Errorf("tool_calls_total{outcome=created} = %v, want 0", got)
	}
}

func TestFindRequest(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	id := newID()

	unknown := structured[findResult](t, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": id}))
	if unknown.Status != "unknown" || unknown.RequestID != id {
		t.Errorf("before create: %+v, want status unknown", unknown)
	}
	// True while a first call is still being stored: it sends the agent
	// back to the same request_id, never to a new one.
	for _, want := range []string{"still being stored", "SAME request_id and arguments is always safe", "do not use a new request_id"} {
		if !strings.Contains(unknown.Detail, want) {
			t.Errorf("unknown detail %q lacks %q", unknown.Detail, want)
		}
	}
	if strings.Contains(unknown.Detail, keyedTool) {
		t.Errorf("unknown detail %q names a tool; tools are named by configuration", unknown.Detail)
	}
	if got := e.rows(t); got != (rows{}) {
		t.Fatalf("find_request wrote: %+v", got)
	}

	created := structured[createResult](t, call(t, cs, unkeyedTool, map[string]any{"request_id": id, "title": "Disk full"}))
	found := structured[findResult](t, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": id}))
	if found.Status != "queued" || found.TicketID != created.TicketID || found.Target != unkeyedTgt {
		t.Errorf("after create: %+v, want queued ticket %s on %s", found, created.TicketID, unkeyedTgt)
	}
	if found.Detail == "" {
		t.Errorf("queued status has no detail")
	}

	for _, bad := range []any{
		map[string]any{"request_id": "has space"},
		map[string]any{"request_id": ""},
		map[string]any{},
		map[string]any{"request_id": id, "extra": 1},
	} {
		res := call(t, cs, mcptools.FindRequestTool, bad)
		if !res.IsError {
			t.Errorf("find_request %v: accepted: %s", bad, text(res))
			continue
		}
		if msg := text(res); !strings.Contains(msg, "request_id") && !strings.Contains(msg, "extra") {
			t.Errorf("find_request %v: message %q names no argument", bad, msg)
		}
	}
	if got := testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(mcptools.FindRequestTool, metrics.CallOK)); got != 2 {
		t.Errorf("find_request ok calls = %v, want 2", got)
	}
	if got := testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(mcptools.FindRequestTool, metrics.CallInvalid)); got != 4 {
		t.Errorf("find_request invalid calls = %v, want 4", got)
	}
}

func TestNewWithoutBindings(t *testing.T) {
	e := newEnv(t)
	if _, err := mcptools.New(mcptools.Config{}, e.l, e.m, testLogger()); err == nil {
		t.Fatal("New with no bindings succeeded")
	}
}

// TestCallsCountedByMiddleware: the middleware counts the calls a handler
// of ours answered, the no-op twin's under its own name, and nothing for a
// call the SDK refused before any handler ran (an unknown tool).
func TestCallsCountedByMiddleware(t *testing.T) {
	e := newEnv(t)
	noop := mcptools.AddNoopTool(e.srv, mcptools.Binding{Tool: keyedTool, Target: keyedTarget, Kind: "local"}, testLogger())
	cs := e.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a call of an unknown tool succeeded")
	}
	if n := testutil.CollectAndCount(e.m.ToolCalls); n != 0 {
		t.Errorf("%d tool_calls_total series after a call of an unknown tool, want none", n)
	}
	structured[createResult](t, call(t, cs, noop, map[string]any{"request_id": newID(), "title": "noop"}))
	call(t, cs, noop, map[string]any{"request_id": newID()}) // no title: invalid
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"noop created", testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(noop, metrics.CallCreated)), 1},
		{"noop invalid", testutil.ToFloat64(e.m.ToolCalls.WithLabelValues(noop, metrics.CallInvalid)), 1},
		{"noop rejected title", testutil.ToFloat64(e.m.Rejected.WithLabelValues(noop, "title")), 1},
		{"noop durations", float64(testutil.CollectAndCount(e.m.CallDuration)), 1},
		{"rows written", float64(e.rows(t).requests), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}
