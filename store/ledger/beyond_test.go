package ledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// A database written before requests had a kind (schema ActionsVersion-1)
// keeps its rows as creates: the forwarder reads each as a create, the
// tickets view still shows it, a comment resolves to it and is listed
// under it, and the comment is not shown as a ticket.
func TestMigrationKeepsCreatesWithoutAKind(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	old := atSchema(t, path, ledger.ActionsVersion-1)
	req := newRequest("req-old")
	insertPublished(t, old, 10, req, ticket.IDFor(req.RequestID))

	e := openEnv(t, path)
	if got := userVersion(t, path); got < ledger.ActionsVersion {
		t.Fatalf("user_version = %d after Open, want at least %d", got, ledger.ActionsVersion)
	}
	p, err := e.l.PriorDelivery(ctx, "req-old")
	if err != nil || !p.Accepted || p.Ticket.Kind != ticket.KindCreate || p.Ticket.On != "" || p.Ticket.Set != nil {
		t.Fatalf("PriorDelivery(req-old) after migration = %+v, %v; want a create", p, err)
	}
	tk, found, err := e.l.TicketOf(ctx, "", ticket.IDFor("req-old"))
	if err != nil || !found || tk.Scoped() != "req-old" || tk.Target != req.Target {
		t.Fatalf("TicketOf(its ticket id) = %+v, %v, %v", tk, found, err)
	}

	c := ticket.Request{RequestID: "cmt-1", Tool: "add_comment", Target: req.Target, Body: "more", Action: ticket.Action{On: tk.Scoped()}}
	if err := c.NormalizeComment(); err != nil {
		t.Fatal(err)
	}
	res, err := e.l.Create(ctx, c)
	if err != nil || res.TicketID != ticket.IDFor("req-old") {
		t.Fatalf("comment: %+v, %v; want the ticket's id", res, err)
	}
	if _, found, _ := e.l.TicketOf(ctx, "", "cmt-1"); found {
		t.Error("a comment resolved as a ticket")
	}
	if n := fixture.Count(t, fixture.Raw(t, path), `SELECT count(*) FROM tickets`); n != 1 {
		t.Errorf("the tickets view shows %d rows, want the one create", n)
	}
	p, err = e.l.PriorDelivery(ctx, "cmt-1")
	if err != nil || p.Ticket.Kind != ticket.KindComment || p.Ticket.On != "req-old" || !p.OnAccepted || p.OnDelivery.State != "" {
		t.Fatalf("PriorDelivery(cmt-1) = %+v, %v; want a comment on req-old, whose create has no record yet", p, err)
	}
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "req-old", Target: req.Target, State: string(request.StatusDelivered), Attempts: 1, ExternalID: "line-1"}); err != nil {
		t.Fatal(err)
	}
	if p, _ = e.l.PriorDelivery(ctx, "cmt-1"); p.OnDelivery.State != string(request.StatusDelivered) || p.OnDelivery.ExternalID != "line-1" {
		t.Fatalf("the create's record as the comment reads it: %+v", p.OnDelivery)
	}
	st, err := e.find(ctx, "", "req-old")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st.Comments)
	if string(b) != `[{"request_id":"cmt-1","status":"queued"}]` || st.Updates != nil || st.Kind != "" {
		t.Errorf("find req-old: comments %s, updates %v, kind %q", b, st.Updates, st.Kind)
	}
	// The comment's message names its kind; a create's does not.
	var payload string
	if err := fixture.Raw(t, path).QueryRow(`SELECT payload FROM outbox WHERE request_id = 'cmt-1'`).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var ref ticket.Ref
	if err := json.Unmarshal([]byte(payload), &ref); err != nil || ref.Kind != ticket.KindComment {
		t.Errorf("the comment's message %s: want kind comment", payload)
	}
}

// A create hashes as it did before requests had a kind: a retry of a
// create accepted by an older binary replays, not conflicts.
func TestCreateHashWithoutAKind(t *testing.T) {
	r := newRequest("req-hash")
	b, _ := json.Marshal(&r)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind", "on", "ref", "set"} {
		if _, ok := m[k]; ok {
			t.Errorf("a create's JSON carries %q: %s", k, b)
		}
	}
}

// An update reads whether an update of its ticket accepted before it is
// still unsettled: the forwarder holds it back until none is, so that the
// last update accepted is the last applied (decision 0184).
func TestPriorSaysAnEarlierUpdateIsUnsettled(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	create := newRequest("req-1")
	if _, err := e.l.Create(ctx, create); err != nil {
		t.Fatal(err)
	}
	update := func(id, set string) {
		t.Helper()
		u := ticket.Request{RequestID: id, Tool: "update_ticket", Target: create.Target, Action: ticket.Action{On: "req-1", Set: []byte(set)}}
		if err := u.NormalizeUpdate(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	update("upd-1", `{"status":"closed"}`)
	update("upd-2", `{"status":"open"}`)
	update("upd-3", `{"priority":"low"}`)
	other := newRequest("req-2")
	if _, err := e.l.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	earlier := func(id string) bool {
		t.Helper()
		p, err := e.l.PriorDelivery(ctx, id)
		if err != nil || !p.Accepted {
			t.Fatalf("PriorDelivery(%s) = %+v, %v", id, p, err)
		}
		return p.EarlierUpdate
	}
	record := func(id string, st request.Status) {
		t.Helper()
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: create.Target, State: string(st), Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if earlier("req-1") || earlier("upd-1") || earlier("req-2") || !earlier("upd-2") || !earlier("upd-3") {
		t.Fatalf("nothing settled: want only upd-2 and upd-3 held back")
	}
	record("upd-1", request.StatusRetrying)
	if !earlier("upd-2") {
		t.Fatal("upd-2 not held back while upd-1 retries")
	}
	record("upd-1", request.StatusDelivered)
	if earlier("upd-2") || !earlier("upd-3") {
		t.Fatal("upd-1 delivered: want upd-2 free, upd-3 held back by upd-2")
	}
	record("upd-2", request.StatusFailed)
	if earlier("upd-3") {
		t.Fatal("upd-2 failed: upd-3 is still held back")
	}
}
