package clusterrec_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"ticketrelay/installation"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// A ticket_id names its ticket on every host: host b resolves the ticket
// id a's create answered (a hash of the create's scoped id, which b's
// ledger does not hold and the record's key cannot be derived from), for
// the create's subject only.
func TestTicketIDResolvedOnAnotherHost(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	req := newRequest("req-c", "checkout returns 500")
	req.Subject = "alice"
	created, err := a.front.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tk, found, err := b.front.TicketOf(ctx, "alice", created.TicketID)
	if err != nil || !found || tk.Scoped() != req.Scoped() || tk.ID != created.TicketID || tk.Target != "local" {
		t.Fatalf("b resolves %s: %+v, %v, %v; want a's create %s", created.TicketID, tk, found, err, req.Scoped())
	}
	if _, found, err := b.front.TicketOf(ctx, "mallory", created.TicketID); found || err != nil {
		t.Fatalf("another subject resolved %s: %v, %v", created.TicketID, found, err)
	}
	if _, found, err := b.front.TicketOf(ctx, "alice", ticket.IDFor("alice/never-created")); found || err != nil {
		t.Fatalf("a ticket id no create answered resolved: %v, %v", found, err)
	}
	// A repeat of the create on b (a replay) leaves the index as it was.
	if res, err := b.front.Create(ctx, req); err != nil || !res.Replayed || res.TicketID != created.TicketID {
		t.Fatalf("replay on b: %+v, %v", res, err)
	}
	if tk, found, err := b.front.TicketOf(ctx, "alice", created.TicketID); err != nil || !found || tk.Scoped() != req.Scoped() {
		t.Fatalf("after the replay b resolves %s: %+v, %v, %v", created.TicketID, tk, found, err)
	}
}

// A ticket id whose index key already names another request (a collision
// of the 13 bytes it holds) is refused: the create is not committed, and
// the ticket id keeps naming the first.
func TestTicketIDCollisionRefused(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a := newHost(t, js, "host-a", clusterrec.Config{})
	req := newRequest("req-x", "checkout returns 500")
	kv, err := js.KeyValue(ctx, installation.Name("test").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(map[string]any{"v": 1, "scoped": "someone/else"})
	if _, err := kv.Create(ctx, "t."+req.TicketID(), other); err != nil {
		t.Fatal(err)
	}
	if res, err := a.front.Create(ctx, req); !errors.Is(err, clusterrec.ErrIndexTaken) {
		t.Fatalf("create under a taken ticket id: %+v, %v; want ErrIndexTaken", res, err)
	}
	if st, err := a.l.Find(ctx, "", "req-x"); err != nil || st.Status != request.StatusUnknown {
		t.Fatalf("the ledger holds the refused create: %+v, %v", st, err)
	}
	if e, err := kv.Get(ctx, "t."+req.TicketID()); err != nil || string(e.Value()) != string(other) {
		t.Fatalf("the index key was rewritten: %v", err)
	}
}

// A claim cut before its index key (a host lost between its two writes,
// made here by claiming without the front): the host that adopts it
// writes the key, so the ticket id resolves on every host.
func TestAdoptionWritesTheTicketIDKey(t *testing.T) {
	ctx := ctxT(t)
	a, b, ha, hb := twoHosts(t)
	if err := hb.RunOnce(ctx); err != nil { // b beats once, then it is gone
		t.Fatal(err)
	}
	req := newRequest("cut-1", "claimed by b, never indexed")
	tk := ticket.Ticket{Request: req, ID: req.TicketID(), CreatedAt: time.Now().UTC()}
	if _, err := b.store.Claim(ctx, tk, req.Hash(), nil); err != nil {
		t.Fatal(err)
	}
	if _, found, err := a.front.TicketOf(ctx, "", tk.ID); found || err != nil {
		t.Fatalf("%s resolved before the adoption wrote its key: %v, %v", tk.ID, found, err)
	}
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		rec, _, _, err := a.store.Get(ctx, "cut-1")
		return err == nil && rec.Host == "host-a"
	}) {
		t.Fatal("a never adopted cut-1")
	}
	// Not in a's ledger by ticket id alone: b's front answers from the key.
	if got, found, err := b.front.TicketOf(ctx, "", tk.ID); err != nil || !found || got.Scoped() != "cut-1" {
		t.Fatalf("%s after the adoption: %+v, %v, %v", tk.ID, got, found, err)
	}
}
