package clusterrec_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
)

// A delivery recorded by one host's forwarder is what every host reads:
// the ticket comes from the record, versions work as the ledger's, a
// settled request is seen settled everywhere, and the accepting host's
// audit takes the outcome into its own ledger.
func TestDeliveryRecordedOnOneHostIsSeenByAll(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	req := newRequest("req-d", "delivered elsewhere")
	res, err := a.front.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// b holds no ledger row, yet its forwarder gets the ticket as a's
	// forwarder would from a's ledger.
	pb, err := b.deliv.PriorDelivery(ctx, "req-d")
	if err != nil || !pb.Accepted || pb.Found {
		t.Fatalf("prior on b = %+v, %v", pb, err)
	}
	pa, err := a.l.PriorDelivery(ctx, "req-d")
	if err != nil {
		t.Fatal(err)
	}
	if pb.Ticket.ID != res.TicketID || pb.Ticket.RequestID != pa.Ticket.RequestID || pb.Ticket.Title != pa.Ticket.Title ||
		!pb.Ticket.CreatedAt.Equal(pa.Ticket.CreatedAt) || pb.Ticket.Subject != pa.Ticket.Subject {
		t.Fatalf("b's ticket %+v differs from a's ledger's %+v: a downstream would see two items", pb.Ticket, pa.Ticket)
	}
	// Versions: b claims an attempt; a copy on a that read version 0 is stale.
	attempting := request.Delivery{RequestID: "req-d", Target: "local", State: request.DeliveryAttempting, Attempts: 1}
	if err := b.deliv.RecordDelivery(ctx, attempting); err != nil {
		t.Fatal(err)
	}
	if err := a.deliv.RecordDelivery(ctx, attempting); !errors.Is(err, request.ErrStale) {
		t.Fatalf("a second claim at version 0: %v, want ErrStale", err)
	}
	done := make(chan error, 1)
	if err := b.deliv.RecordDeliveryThen(ctx, request.Delivery{RequestID: "req-d", Target: "local", State: "delivered",
		Attempts: 1, Version: 1, ExternalID: "ext-1"}, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A delivery is a fact: a late retry record does not undo it.
	if err := a.deliv.RecordDelivery(ctx, request.Delivery{RequestID: "req-d", Target: "local", State: "retrying", Version: 1}); !errors.Is(err, request.ErrStale) {
		t.Errorf("a retry over a delivery: %v, want ErrStale", err)
	}
	for _, h := range []*host{a, b} {
		st, err := h.front.Find(ctx, "", "req-d")
		if err != nil || st.Status != request.StatusDelivered || st.ExternalID != "ext-1" {
			t.Errorf("find on %s = %+v, %v", h.id, st, err)
		}
		p, err := h.deliv.PriorDelivery(ctx, "req-d")
		if err != nil || !p.Found || !p.Delivery.Settled() {
			t.Errorf("prior on %s = %+v, %v: a redelivery there must see it settled", h.id, p, err)
		}
	}
	// a's ledger did not hear of it; its audit, once the row is due,
	// takes it from the record.
	raw, err := sql.Open("sqlite", "file:"+a.path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE outbox SET published_at = ?, stream_seq = 1`, time.Now().Add(-time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.l.Find(ctx, "", "req-d"); st.Status == request.StatusDelivered {
		t.Fatalf("a's ledger knew the delivery before its audit: %+v", st)
	}
	ps, err := clusterrec.NewAuditStore(a.store, a.l, time.Minute, time.Now).PublishedAfter(context.Background(), 0, 10)
	if err != nil || len(ps) != 1 || !ps[0].Settled() {
		t.Fatalf("audit rows on a = %+v, %v; want req-d settled", ps, err)
	}
	if st, err := a.l.Find(ctx, "", "req-d"); err != nil || st.Status != request.StatusDelivered || st.ExternalID != "ext-1" {
		t.Errorf("a's ledger after its audit = %+v, %v", st, err)
	}
}

// A delivery record write that ends a call carries it, compactly: its
// start, latency, HTTP status and class under one-letter keys, its error
// only where the record's last error says something else; a write that
// ends none carries nothing.
func TestDeliveryRecordCarriesTheCall(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a := newHost(t, js, "host-a", clusterrec.Config{})
	if _, err := a.front.Create(ctx, newRequest("req-call", "called")); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 7, 10, 0, 0, 123, time.UTC)
	call := &request.Attempt{At: start, HTTPStatus: 503, Class: "transient", Error: "HTTP 503: busy", Latency: 60 * time.Millisecond, Host: "box-a"}
	rec := request.Delivery{RequestID: "req-call", Target: "local", State: "retrying", Attempts: 1, LastError: "HTTP 503: busy", Attempt: call}
	if err := a.deliv.RecordDelivery(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := a.store.Get(ctx, "req-call")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got.Delivery.Call)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"t":1796637600000000123,"ns":60000000,"s":503,"c":"transient"}`; string(b) != want {
		t.Errorf("the call in the record: %s, want %s", b, want)
	}
	if at := got.Delivery.Call.Attempt(got.Delivery); !at.At.Equal(start) || at.HTTPStatus != 503 || at.Error != "HTTP 503: busy" ||
		at.Host != "host-a" || at.Attempt != 1 || at.Outcome != "retrying" || at.Latency != 60*time.Millisecond {
		t.Errorf("the call read back: %+v", at)
	}

	// The limit reached: the record says so, the call keeps its own error.
	rec.Version, rec.State, rec.Attempts, rec.LastError = 1, "failed", 2, "2 attempts; last error: HTTP 503: busy"
	rec.Attempt = &request.Attempt{At: start.Add(time.Second), HTTPStatus: 503, Class: "transient", Error: "HTTP 503: busy", Latency: time.Millisecond}
	if err := a.deliv.RecordDelivery(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, _, _, _ = a.store.Get(ctx, "req-call")
	if c := got.Delivery.Call; c == nil || c.Error != "HTTP 503: busy" || c.Attempt(got.Delivery).Error != "HTTP 503: busy" {
		t.Errorf("the last call's error: %+v", c)
	}

	// A write that ends no call (a redrive's reset) carries none.
	rec.Version, rec.State, rec.Attempts, rec.LastError, rec.Attempt = 2, "retrying", 0, "", nil
	if err := a.deliv.RecordDelivery(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if got, _, _, _ = a.store.Get(ctx, "req-call"); got.Delivery.Call != nil {
		t.Errorf("a write without a call carries %+v", got.Delivery.Call)
	}
}
