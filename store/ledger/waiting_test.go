package ledger_test

import (
	"context"
	"testing"

	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// A comment on an unsettled create is parked once, however often it is
// parked; the create's failure publishes it again (a new generation of its
// outbox row) and parks nothing more; a comment on a delivered create is
// not parked, and neither is a create.
func TestParkUntilTheCreateSettles(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	db := fixture.Raw(t, e.path)
	create := newRequest("create-1")
	if _, err := e.l.Create(ctx, create); err != nil {
		t.Fatal(err)
	}
	comment := func(id, on string) {
		c := ticket.Request{RequestID: id, Tool: "add_comment", Target: create.Target, Body: "again", Action: ticket.Action{On: on}}
		if err := c.NormalizeComment(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	comment("cmt-1", "create-1")
	for range 2 {
		if parked, err := e.l.Park(ctx, "cmt-1"); err != nil || !parked {
			t.Fatalf("Park(cmt-1) = %v, %v; want parked", parked, err)
		}
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM waiting`); n != 1 {
		t.Fatalf("%d rows parked, want 1", n)
	}
	if parked, err := e.l.Park(ctx, "create-1"); err != nil || parked {
		t.Errorf("Park(a create) = %v, %v; want nothing parked", parked, err)
	}
	// Still retrying: it stays parked.
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "create-1", Target: create.Target, State: string(request.StatusRetrying), Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM waiting`); n != 1 {
		t.Fatalf("a retrying create unparked its comment")
	}
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "create-1", Target: create.Target, State: string(request.StatusFailed), Attempts: 2, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM waiting`); n != 0 {
		t.Errorf("%d rows still parked after the create failed", n)
	}
	if g := fixture.Count(t, db, `SELECT o.generation FROM outbox o JOIN requests r ON r.id = o.id WHERE r.request_id = 'cmt-1' AND o.published_at IS NULL`); g != 1 {
		t.Errorf("the comment's outbox row: generation %d unpublished, want 1", g)
	}
	if parked, err := e.l.Park(ctx, "cmt-1"); err != nil || parked {
		t.Errorf("Park on a settled create = %v, %v; want nothing parked (act now)", parked, err)
	}
}
