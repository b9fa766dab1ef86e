package clusterrec_test

import (
	"encoding/json"
	"testing"

	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/ticket"
)

// Updates of one ticket accepted on two hosts are ordered by their index
// keys in the bucket's stream: the later one (accepted on b after a's was
// answered) is held while a's is accepted and unsettled, on either
// host's forwarder, and not once a's settled; a's is never held by b's.
func TestUpdatesOrderedAcrossHosts(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	if _, err := a.front.Create(ctx, newRequest("req-c", "checkout returns 500")); err != nil {
		t.Fatal(err)
	}
	deliver := func(h *host, id, state string) {
		t.Helper()
		p, err := h.deliv.PriorDelivery(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.deliv.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: state, Attempts: 1,
			ExternalID: "line-1", Version: p.Delivery.Version}); err != nil {
			t.Fatal(err)
		}
	}
	deliver(a, "req-c", string(request.StatusDelivered))
	update := func(h *host, id, labels string) {
		t.Helper()
		u := ticket.Request{RequestID: id, Tool: "update_ticket", Target: "local", Action: ticket.Action{On: "req-c", Set: json.RawMessage(`{"labels":` + labels + `}`)}}
		if err := u.NormalizeUpdate(); err != nil {
			t.Fatal(err)
		}
		if _, err := h.front.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	earlier := func(h *host, id string) bool {
		t.Helper()
		p, err := h.deliv.PriorDelivery(ctx, id)
		if err != nil || p.Ticket.Kind != ticket.KindUpdate || p.OnDelivery.State != string(request.StatusDelivered) {
			t.Fatalf("%s on %s: %+v, %v", id, h.id, p, err)
		}
		return p.EarlierUpdate
	}
	update(a, "up-1", `["torture"]`)
	update(b, "up-2", `["torture","triaged"]`)
	for _, h := range []*host{a, b} {
		if !earlier(h, "up-2") {
			t.Fatalf("%s: up-2 is not held while up-1, accepted before it on another host, is unsettled", h.id)
		}
		if earlier(h, "up-1") {
			t.Fatalf("%s: up-1 is held by up-2, accepted after it", h.id)
		}
	}
	// A retry of up-1 (a replay on b) keeps its place.
	update(b, "up-1", `["torture"]`)
	if !earlier(a, "up-2") || earlier(a, "up-1") {
		t.Fatal("a replay of up-1 moved it after up-2")
	}
	// An update failed does not hold the later ones: it set nothing.
	deliver(b, "up-1", string(request.StatusFailed))
	if earlier(a, "up-2") {
		t.Fatal("up-2 is held by up-1, which failed")
	}
	update(a, "up-3", `["later"]`)
	if !earlier(b, "up-3") {
		t.Fatal("up-3 is not held while up-2 is unsettled")
	}
	deliver(a, "up-2", string(request.StatusDelivered))
	if earlier(b, "up-3") {
		t.Fatal("up-3 is held after every earlier update settled")
	}
}
