package mcptools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/front/mcptools"
	"ticketrelay/request"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// record writes a delivery record as the forwarder would.
func (e *env) record(t *testing.T, d request.Delivery) {
	t.Helper()
	if cur, found, err := e.l.Delivery(context.Background(), d.RequestID); err != nil {
		t.Fatal(err)
	} else if found {
		d.Version = cur.Version
	}
	if err := e.l.RecordDelivery(context.Background(), d); err != nil {
		t.Fatalf("RecordDelivery %+v: %v", d, err)
	}
}

// A create repeated with the same request_id and arguments answers the
// status the request has now, as find_request does, not the "queued" of
// its acceptance; the first call answers queued with a detail that says
// delivery is asynchronous.
func TestReplayAnswersLiveStatus(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	find := func(id string) findResult {
		t.Helper()
		return structured[findResult](t, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": id}))
	}
	cases := []struct {
		name string
		d    request.Delivery
	}{
		{"delivered", request.Delivery{State: string(request.StatusDelivered), Attempts: 1, ExternalID: "line-7", ExternalURL: "file:///srv/t.jsonl#L7"}},
		{"failed", request.Delivery{State: string(request.StatusFailed), Attempts: 10,
			LastError: "10 attempts exhausted; last error: transient error (HTTP 503): unavailable"}},
		{"uncertain", request.Delivery{State: string(request.StatusUncertain), Attempts: 1,
			LastError: "attempt 1 may have created the item (transient error (HTTP 500): oops) and local has no consistent lookup"}},
		{"retrying", request.Delivery{State: string(request.StatusRetrying), Attempts: 2, NextAttemptAt: time.Now().Add(time.Minute),
			LastError: "transient error (HTTP 503): busy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := newID()
			args := map[string]any{"request_id": id, "title": "Replay " + c.name}
			first := structured[createResult](t, call(t, cs, keyedTool, args))
			if first.Status != "queued" || *first.Replayed {
				t.Fatalf("first call: %+v", first)
			}
			if want := "Accepted and stored; delivery to local is asynchronous: find_request (or wait_for_delivery_seconds) " +
				"reports when it is delivered and its id/URL. Do not create it again."; first.Detail != want {
				t.Errorf("first call detail %q, want %q", first.Detail, want)
			}
			c.d.RequestID, c.d.Target = id, keyedTarget
			e.record(t, c.d)
			replays := testutil.ToFloat64(e.m.Replays.WithLabelValues(keyedTool))
			rows := e.rows(t)

			replay := structured[createResult](t, call(t, e.connect(t), keyedTool, args))
			st := find(id)
			if replay.Replayed == nil || !*replay.Replayed {
				t.Errorf("replayed = %v, want true", replay.Replayed)
			}
			if replay.Status != c.name || replay.Status != st.Status {
				t.Errorf("replay status %q, want %q (find_request says %q)", replay.Status, c.name, st.Status)
			}
			if replay.Detail != st.Detail || replay.Detail == "" {
				t.Errorf("replay detail %q, want find_request's %q", replay.Detail, st.Detail)
			}
			if replay.ExternalID != c.d.ExternalID || replay.ExternalURL != c.d.ExternalURL {
				t.Errorf("replay external id/url %q %q, want %q %q", replay.ExternalID, replay.ExternalURL, c.d.ExternalID, c.d.ExternalURL)
			}
			if replay.TicketID != first.TicketID || !replay.CreatedAt.Equal(first.CreatedAt) || replay.RequestID != id {
				t.Errorf("replay %+v is not the first call's ticket %+v", replay, first)
			}
			if got := testutil.ToFloat64(e.m.Replays.WithLabelValues(keyedTool)); got != replays+1 {
				t.Errorf("replays = %v, want %v", got, replays+1)
			}
			if got := e.rows(t); got != rows {
				t.Errorf("replay wrote: rows %+v, want %+v", got, rows)
			}
		})
	}
}

// schemaOf resolves a schema as advertised in tools/list.
func schemaOf(t *testing.T, tool string, s any) *jsonschema.Resolved {
	t.Helper()
	if s == nil {
		t.Fatalf("%s advertises no output schema", tool)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var sc jsonschema.Schema
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatalf("%s output schema %s: %v", tool, b, err)
	}
	rs, err := sc.Resolve(nil)
	if err != nil {
		t.Fatalf("%s output schema does not resolve: %v", tool, err)
	}
	for name, p := range sc.Properties {
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("%s output schema: %s has no description", tool, name)
		}
	}
	return rs
}

// conforms checks a real answer against the schema its tool advertises,
// and that it holds no field the schema does not declare.
func conforms(t *testing.T, what string, rs *jsonschema.Resolved, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if res.IsError {
		t.Fatalf("%s: tool error %s", what, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: structured content %s: %v", what, b, err)
	}
	if err := rs.Validate(v); err != nil {
		t.Errorf("%s: answer %s does not validate against the advertised output schema: %v", what, b, err)
	}
	for k := range v {
		if _, ok := rs.Schema().Properties[k]; !ok {
			t.Errorf("%s: answer field %q is not in the output schema", what, k)
		}
	}
	return v
}

// Every answer validates against the output schema its tool advertises:
// a first call, a replay, a call that waited for delivery, and find_request
// in every status.
func TestAnswersValidateAgainstOutputSchemas(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	tools := listTools(t, cs)
	create := schemaOf(t, keyedTool, tools[keyedTool].OutputSchema)
	find := schemaOf(t, mcptools.FindRequestTool, tools[mcptools.FindRequestTool].OutputSchema)
	if tools[unkeyedTool].OutputSchema == nil {
		t.Errorf("%s has no output schema", unkeyedTool)
	}
	ctx := context.Background()

	// The schemas hold what the tools can answer: every status, every field.
	want := []any{"unknown", "queued", "published", "delivered", "retrying", "failed", "uncertain"}
	for name, rs := range map[string]*jsonschema.Resolved{keyedTool: create, mcptools.FindRequestTool: find} {
		if st := rs.Schema().Properties["status"]; st == nil || !slices.Equal(st.Enum, want) {
			t.Errorf("%s: status %+v, want an enum %v", name, st, want)
		}
	}
	for _, f := range []string{"external_id", "external_url", "detail", "created_at", "target"} {
		if _, ok := create.Schema().Properties[f]; !ok {
			t.Errorf("create output schema lacks %s", f)
		}
	}
	onWire := wireNames(reflect.TypeFor[mcptools.RequestStatus]())
	for _, name := range onWire {
		if _, ok := find.Schema().Properties[name]; !ok {
			t.Errorf("find_request output schema lacks RequestStatus field %s", name)
		}
	}
	if len(find.Schema().Properties) != len(onWire) {
		t.Errorf("find_request output schema has %d properties, RequestStatus %d fields on the wire", len(find.Schema().Properties), len(onWire))
	}

	id := newID()
	args := map[string]any{"request_id": id, "title": "Schema check", "labels": []string{"a"}}
	conforms(t, "find unknown", find, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": id}))
	first := conforms(t, "first call", create, call(t, cs, keyedTool, args))
	if first["detail"] == nil {
		t.Errorf("first call has no detail: %v", first)
	}
	conforms(t, "replay, queued", create, call(t, cs, keyedTool, args))
	conforms(t, "find queued", find, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": id}))

	steps := []struct {
		status string
		d      request.Delivery
	}{
		{"published", request.Delivery{State: request.DeliveryAttempting, Attempts: 1}}, // in_progress
		{"retrying", request.Delivery{State: string(request.StatusRetrying), Attempts: 3, Throttled: 2,
			NextAttemptAt: time.Now().Add(time.Minute), LastError: "transient error (HTTP 429): slow down"}},
		{"failed", request.Delivery{State: string(request.StatusFailed), Attempts: 1, LastError: "permanent error (HTTP 400): bad title"}},
		{"uncertain", request.Delivery{State: string(request.StatusUncertain), Attempts: 1,
			LastError: "attempt 1 ended without an answer and local has no consistent lookup"}},
		{"delivered", request.Delivery{State: string(request.StatusDelivered), Attempts: 1, ExternalID: "line-1", ExternalURL: "file:///x#L1"}},
	}
	for i, s := range steps {
		sid := fmt.Sprintf("%s-%d", id, i)
		sargs := map[string]any{"request_id": sid, "title": "Schema check " + s.status}
		conforms(t, "first call", create, call(t, cs, keyedTool, sargs))
		s.d.RequestID, s.d.Target = sid, keyedTarget
		e.record(t, s.d)
		got := conforms(t, "find "+s.status, find, call(t, cs, mcptools.FindRequestTool, map[string]any{"request_id": sid}))
		if got["status"] != s.status {
			t.Errorf("find %s: status %v", s.status, got["status"])
		}
		if s.status == "published" && got["in_progress"] != true {
			t.Errorf("find published: in_progress %v, want true", got["in_progress"])
		}
		if s.status == "retrying" && got["throttled"] != float64(2) {
			t.Errorf("find retrying: throttled %v, want 2", got["throttled"])
		}
		got = conforms(t, "replay "+s.status, create, call(t, cs, keyedTool, sargs))
		if got["status"] != s.status || got["replayed"] != true {
			t.Errorf("replay %s: status %v replayed %v", s.status, got["status"], got["replayed"])
		}
	}

	// A first call that waits while the request is delivered meanwhile.
	wid := newID()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !testwait.Until(10*time.Second, func() bool {
			st, err := e.l.Find(ctx, "", wid)
			return err == nil && st.Status == request.StatusQueued
		}) {
			t.Errorf("request %s never became queued", wid)
			return
		}
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: wid, Target: keyedTarget,
			State: string(request.StatusDelivered), Attempts: 1, ExternalID: "line-9", ExternalURL: "file:///x#L9"}); err != nil {
			t.Errorf("RecordDelivery: %v", err)
		}
	}()
	got := conforms(t, "waited delivered", create, call(t, cs, keyedTool,
		map[string]any{"request_id": wid, "title": "Wait for it", "wait_for_delivery_seconds": 10}))
	<-done
	if got["status"] != "delivered" || got["external_id"] != "line-9" || got["replayed"] != false {
		t.Errorf("waited call: %v, want delivered line-9, not replayed", got)
	}
}

// find_request only reads: its argument errors say the id is malformed and
// what an id looks like, and say nothing of writes or of fresh ids.
func TestFindRequestArgumentErrors(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	for _, c := range []struct {
		args any
		want []string
	}{
		{map[string]any{"request_id": "has space"}, []string{`"request_id": contains byte 0x20 at offset 3`, "malformed",
			"1 to 255 visible ASCII characters, no spaces", "given to the create tool"}},
		{map[string]any{"request_id": ""}, []string{`"request_id": is required`, "malformed", "1 to 255 visible ASCII characters"}},
		{map[string]any{}, []string{`"request_id": is required`, "1 to 255 visible ASCII characters"}},
		{map[string]any{"request_id": strings.Repeat("x", 256)}, []string{"256 bytes long", "malformed"}},
		{map[string]any{"request_id": 7}, []string{`"request_id": must be of type string, got number`, "malformed"}},
		{map[string]any{"request_id": "abc", "extra": 1}, []string{`unknown argument "extra"`}},
	} {
		res := call(t, cs, mcptools.FindRequestTool, c.args)
		msg := text(res)
		if !res.IsError {
			t.Errorf("find_request %v accepted: %s", c.args, msg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("find_request %v: %q lacks %q", c.args, msg, w)
			}
		}
		for _, bad := range []string{"nothing was written", "fresh UUID", "each new ticket"} {
			if strings.Contains(msg, bad) {
				t.Errorf("find_request %v: %q says %q", c.args, msg, bad)
			}
		}
	}
}

// A create the ledger could not confirm (here: its writer is closed) may or
// may not have been stored: the answer says so and does not claim that
// nothing was written.
func TestCreateStoreErrorMayHaveStored(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	e.w.Close()
	res := call(t, cs, keyedTool, map[string]any{"request_id": newID(), "title": "Ledger closed"})
	msg := text(res)
	if !res.IsError {
		t.Fatalf("create with a closed writer succeeded: %s", msg)
	}
	for _, w := range []string{"may not have been stored", "find_request", "same request_id and arguments", "do not use a new request_id"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
	for _, bad := range []string{"nothing was written", "was not stored"} {
		if strings.Contains(msg, bad) {
			t.Errorf("message %q claims %q", msg, bad)
		}
	}
}

// Argument errors name JSON types as JSON Schema does and name the label at
// fault by its index.
func TestArgumentErrorWording(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t)
	for _, c := range []struct {
		name   string
		extra  map[string]any
		want   string
		metric string
	}{
		{"wait as fraction", map[string]any{"wait_for_delivery_seconds": 1.5},
			`invalid argument "wait_for_delivery_seconds": must be of type integer, got number 1.5`, "wait_for_delivery_seconds"},
		{"wait as string", map[string]any{"wait_for_delivery_seconds": "5"},
			`invalid argument "wait_for_delivery_seconds": must be of type integer, got string`, "wait_for_delivery_seconds"},
		{"title as array", map[string]any{"title": []any{"a"}}, `invalid argument "title": must be of type string, got array`, "title"},
		{"label as number", map[string]any{"labels": []any{"ok", 3}}, `invalid argument "labels[1]": must be of type string, got number`, "labels"},
		{"label as number after null", map[string]any{"labels": []any{nil, "x", true}}, `invalid argument "labels[2]": must be of type string, got boolean`, "labels"},
		{"label as object", map[string]any{"labels": []any{map[string]any{}}}, `invalid argument "labels[0]": must be of type string, got object`, "labels"},
		{"labels as object", map[string]any{"labels": map[string]any{}}, `invalid argument "labels": must be of type array, got object`, "labels"},
		{"empty label", map[string]any{"labels": []string{"a", "b", "  "}}, `invalid argument "labels[2]": is empty`, "labels"},
		{"long label", map[string]any{"labels": []string{strings.Repeat("é", ticket.MaxLabelLen+1)}},
			`invalid argument "labels[0]": is 65 characters long; at most 64 are allowed`, "labels"},
		{"label with newline", map[string]any{"labels": []string{"ok", "two\nlines"}}, `invalid argument "labels[1]": contains control character U+000A`, "labels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := map[string]any{"request_id": newID(), "title": "A title"}
			for k, v := range c.extra {
				args[k] = v
			}
			rejected := testutil.ToFloat64(e.m.Rejected.WithLabelValues(keyedTool, c.metric))
			res := call(t, cs, keyedTool, args)
			msg := text(res)
			if !res.IsError || !strings.HasPrefix(msg, c.want) || !strings.HasSuffix(msg, "; nothing was written") {
				t.Errorf("IsError %v, message %q, want %q…; nothing was written", res.IsError, msg, c.want)
			}
			if got := testutil.ToFloat64(e.m.Rejected.WithLabelValues(keyedTool, c.metric)); got != rejected+1 {
				t.Errorf("invalid_calls_total{argument=%q} = %v, want %v", c.metric, got, rejected+1)
			}
		})
	}
	if got := e.rows(t); got != (rows{}) {
		t.Errorf("rows after rejected calls: %+v", got)
	}
}

// The descriptions say what the server enforces: the body limit is in bytes
// (maxLength counts characters), and find_request's "unknown" is not
// "never accepted: safe to create".
func TestSchemaAndDescriptionWording(t *testing.T) {
	e := newEnv(t)
	tools := listTools(t, e.connect(t))
	var in struct {
		Properties map[string]struct {
			Description string `json:"description"`
			Pattern     string `json:"pattern"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(tools[keyedTool].InputSchema)
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	if d := in.Properties["body"].Description; !strings.Contains(d, fmt.Sprintf("%d bytes (UTF-8)", ticket.MaxBodyLen)) {
		t.Errorf("body description %q does not give the limit in bytes (UTF-8)", d)
	}
	b, _ = json.Marshal(tools[mcptools.FindRequestTool].InputSchema)
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	if p := in.Properties["request_id"].Pattern; p != `^[!-~]+$` {
		t.Errorf("find_request request_id pattern %q: the schema must admit only what the server does (visible ASCII)", p)
	}
	d := tools[mcptools.FindRequestTool].Description
	for _, w := range []string{"still being stored", "forgotten after its retention", "SAME request_id and arguments", "always safe"} {
		if !strings.Contains(d, w) {
			t.Errorf("find_request description lacks %q: %q", w, d)
		}
	}
	if strings.Contains(d, "never accepted: safe to create") {
		t.Errorf("find_request description still says unknown is safe to create: %q", d)
	}
}

// find_request's annotations as sent on the wire (README's tool table
// lists them): go-sdk sends readOnlyHint and idempotentHint even when
// false, and a nil destructiveHint not at all.
func TestFindRequestAnnotationsOnTheWire(t *testing.T) {
	e := newEnv(t)
	tools := listTools(t, e.connect(t))
	b, err := json.Marshal(tools[mcptools.FindRequestTool].Annotations)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	delete(got, "title")
	want := map[string]any{"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("find_request annotations %s, want %v (and README's tool table with them)", b, want)
	}
}

// wireNames are the JSON names of rt's fields that reach the wire, those
// of embedded structs included, as encoding/json writes them.
func wireNames(rt reflect.Type) []string {
	var names []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			names = append(names, wireNames(f.Type)...)
		case f.IsExported() && name != "-":
			names = append(names, name)
		}
	}
	return names
}
