package ledger_test

import (
	"context"
	"testing"

	"ticketrelay/ticket"
)

// The caller is recorded with the ticket, in the same transaction: Find
// and the forwarder's read (PriorDelivery) give it back, and a retry of
// the same user from another client (another name on its token) replays
// with the first call's caller and changes nothing.
func TestCallerRecordedWithTheTicket(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	first := newRequest("r-caller")
	first.Subject = "idp.example.com/u1"
	first.Caller = ticket.Caller{Subject: first.Subject, Name: "Alice Example", Email: "alice@example.com"}
	if _, err := e.l.Create(ctx, first); err != nil {
		t.Fatal(err)
	}

	retry := first
	retry.Caller = ticket.Caller{Subject: first.Subject, Name: "alice (laptop)"}
	res, err := e.l.Create(ctx, retry)
	if err != nil || !res.Replayed {
		t.Fatalf("retry with another caller name = %+v, %v; want a replay (the caller is not an argument)", res, err)
	}
	if res.Live == nil || res.Live.Caller == nil || *res.Live.Caller != first.Caller {
		t.Fatalf("replay's caller = %+v, want the first call's %+v", res.Live, first.Caller)
	}

	st, err := e.l.Find(ctx, first.Subject, "r-caller")
	if err != nil {
		t.Fatal(err)
	}
	if st.Caller == nil || *st.Caller != first.Caller {
		t.Errorf("Find's caller = %+v, want %+v", st.Caller, first.Caller)
	}
	p, err := e.l.PriorDelivery(ctx, first.Scoped())
	if err != nil {
		t.Fatal(err)
	}
	if p.Ticket.Caller != first.Caller {
		t.Errorf("the forwarder reads caller %+v, want %+v", p.Ticket.Caller, first.Caller)
	}

	// The anonymous caller has none to report.
	anon := newRequest("r-anon")
	if _, err := e.l.Create(ctx, anon); err != nil {
		t.Fatal(err)
	}
	if st, err := e.l.Find(ctx, "", "r-anon"); err != nil || st.Caller != nil {
		t.Errorf("anonymous request's caller = %+v, %v; want none", st.Caller, err)
	}
}
