package clusterrec_test

import (
	"testing"

	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/ticket"
)

// A comment accepted on one host on a ticket created on another: the
// front resolves the create's request_id in the cluster record, the
// record carries the comment's action to every host, and any host's
// forwarder reads the create's delivery from its record, so the comment
// waits for it and then names its external id.
func TestCommentOnAnotherHostsTicket(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	created, err := a.front.Create(ctx, newRequest("req-c", "checkout returns 500"))
	if err != nil {
		t.Fatal(err)
	}
	tk, found, err := b.front.TicketOf(ctx, "", "req-c")
	if err != nil || !found || tk.Scoped() != "req-c" || tk.Target != "local" {
		t.Fatalf("b resolves req-c: %+v, %v, %v; want a's create", tk, found, err)
	}
	if _, found, _ := b.front.TicketOf(ctx, "someone-else", "req-c"); found {
		t.Fatal("another subject resolved req-c")
	}
	c := ticket.Request{RequestID: "req-m", Tool: "add_comment", Target: tk.Target, Body: "seen again", Action: ticket.Action{On: tk.Scoped()}}
	if err := c.NormalizeComment(); err != nil {
		t.Fatal(err)
	}
	res, err := b.front.Create(ctx, c)
	if err != nil || res.TicketID != created.TicketID {
		t.Fatalf("comment on b: %+v, %v; want ticket %s", res, err, created.TicketID)
	}
	p, err := a.deliv.PriorDelivery(ctx, "req-m")
	if err != nil || p.Ticket.Kind != ticket.KindComment || p.Ticket.On != "req-c" || !p.OnAccepted || p.OnDelivery.State != "" {
		t.Fatalf("a reads the comment as %+v, %v; want a comment on req-c, whose create has no delivery yet", p, err)
	}
	if err := a.deliv.RecordDelivery(ctx, request.Delivery{RequestID: "req-c", Target: "local", State: string(request.StatusDelivered),
		Attempts: 1, ExternalID: "line-1"}); err != nil {
		t.Fatal(err)
	}
	if p, err = b.deliv.PriorDelivery(ctx, "req-m"); err != nil || p.OnDelivery.State != string(request.StatusDelivered) || p.OnDelivery.ExternalID != "line-1" {
		t.Fatalf("b reads the create's delivery as %+v, %v", p.OnDelivery, err)
	}
}
