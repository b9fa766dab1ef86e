package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"ticketrelay/request"
	"ticketrelay/ticket"
)

// PriorDeliveries answers each id of one query with what PriorDelivery
// answers for it alone, in the order asked, repeated ids included; more
// than MaxPriorBatch ids is an error that reads nothing.
func TestPriorDeliveries(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("req-%02d", i)
		ids = append(ids, id)
		if i%3 == 0 {
			continue // never accepted
		}
		if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(request.StatusRetrying), Attempts: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids = append(ids, "req-02", "req-01") // a second copy's id
	ps, errs, err := e.l.PriorDeliveries(ctx, ids)
	if err != nil || len(ps) != len(ids) || len(errs) != len(ids) {
		t.Fatalf("PriorDeliveries: %d answers, %d errors, %v; want %d", len(ps), len(errs), err, len(ids))
	}
	for i, id := range ids {
		one, err := e.l.PriorDelivery(ctx, id)
		if err != nil || errs[i] != nil {
			t.Fatalf("%s: %v, %v", id, err, errs[i])
		}
		p := ps[i]
		if p.Delivery.RequestID != id || p.Accepted != one.Accepted || p.Found != one.Found || p.Delivery != one.Delivery ||
			p.Ticket.RequestID != one.Ticket.RequestID || p.Ticket.ID != one.Ticket.ID || p.Ticket.Body != one.Ticket.Body {
			t.Errorf("%s: batch read %+v, alone %+v", id, p, one)
		}
		if p.Accepted && p.Ticket.ID != ticket.IDFor(id) {
			t.Errorf("%s: ticket %+v", id, p.Ticket)
		}
	}
	if _, _, err := e.l.PriorDeliveries(ctx, make([]string, request.MaxPriorBatch+1)); err == nil {
		t.Error("PriorDeliveries of more than MaxPriorBatch ids: no error")
	}
}
