package clusterrec_test

import (
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// A request accepted on host b and adopted by host a when b's dispatcher is
// lost carries the same caller everywhere: in a's ledger (what a's
// find_request answers), in what a's forwarder reads to deliver it, and in
// b's replay from the cluster record.
func TestAdoptedRequestKeepsItsCaller(t *testing.T) {
	ctx := ctxT(t)
	a, b, ha, hb := twoHosts(t)
	if err := hb.RunOnce(ctx); err != nil { // b beats once, then its dispatcher is gone
		t.Fatal(err)
	}
	caller := ticket.Caller{Subject: "idp.example.com/u1", Name: "Ada", Email: "ada@example.com"}
	req := newRequest("with-caller", "accepted by b")
	req.Subject, req.Caller = caller.Subject, caller
	if _, err := b.front.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	var st request.Report
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		var err error
		st, err = a.l.Find(ctx, caller.Subject, "with-caller")
		return err == nil && st.Status != request.StatusUnknown
	}) {
		t.Fatal("a never adopted the request")
	}
	if st.Caller == nil || *st.Caller != caller {
		t.Errorf("the adopting host's ledger has caller %+v, want %+v", st.Caller, caller)
	}
	p, err := a.deliv.PriorDelivery(ctx, req.Scoped())
	if err != nil {
		t.Fatal(err)
	}
	if p.Ticket.Caller != caller {
		t.Errorf("the adopting host delivers caller %+v, want %+v", p.Ticket.Caller, caller)
	}
	retry := req
	retry.Caller.Name = "Ada (phone)"
	if res, err := b.front.Create(ctx, retry); err != nil || !res.Replayed || res.Live == nil || res.Live.Caller == nil || *res.Live.Caller != caller {
		t.Errorf("replay on b: %+v, %v; want the first call's caller %+v", res, err, caller)
	}
}
