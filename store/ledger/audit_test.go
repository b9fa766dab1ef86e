package ledger_test

import (
	"context"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
)

// PublishedAfter reads rows in id order with what the audit needs, and
// RepublishLost queues a row again only if it is still as read (published,
// same generation, sequence and delivery record) and its delivery is not
// settled.
func TestPublishedAfterAndRepublishLost(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
			t.Fatal(err)
		}
	}
	db := fixture.Raw(t, e.path)
	if _, err := db.Exec(`UPDATE outbox SET published_at = 1, stream_seq = id + 100 WHERE request_id <> 'd'`); err != nil {
		t.Fatal(err)
	}
	if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: "b", Target: "local", State: string(request.StatusRetrying), Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	all, err := e.l.PublishedAfter(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("%d rows, want 4", len(all))
	}
	for i, p := range all {
		id := []string{"a", "b", "c", "d"}[i]
		published := id != "d"
		if p.RequestID != id || p.PublishedAt.IsZero() == published || (p.Seq == uint64(p.ID)+100) != published ||
			(p.Delivery == "retrying") != (id == "b") || p.DeliveryUpdated.IsZero() != (id != "b") || p.MsgID() != id {
			t.Errorf("row %d = %+v", i, p)
		}
	}
	if next, err := e.l.PublishedAfter(ctx, all[1].ID, 1); err != nil || len(next) != 1 || next[0].RequestID != "c" {
		t.Errorf("PublishedAfter(b's id, 1) = %+v, %v; want c", next, err)
	}

	a, b, c, d := all[0], all[1], all[2], all[3]
	stale := c
	stale.Seq++ // republished meanwhile at another sequence
	bNone := b
	bNone.Delivery, bNone.DeliveryUpdated = "", time.Time{} // read before its record was written
	bOlder := b
	bOlder.DeliveryUpdated = b.DeliveryUpdated.Add(-time.Second) // the record was written again since
	bSettled := b
	bSettled.Delivery = string(request.StatusDelivered)
	for _, tc := range []struct {
		name string
		p    request.Published
		want bool
	}{
		{"a delivery record was written since the read", bNone, false},
		{"the delivery record changed since the read", bOlder, false},
		{"a settled delivery", bSettled, false},
		{"not published", d, false},
		{"another sequence than read", stale, false},
		{"lost", a, true},
		{"lost and already queued again", a, false},
		{"lost, its delivery unsettled and as read", b, true},
	} {
		got, err := e.l.RepublishLost(ctx, tc.p)
		if err != nil || got != tc.want {
			t.Errorf("%s: RepublishLost = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM outbox WHERE request_id = 'a' AND published_at IS NULL AND generation = 1`); n != 1 {
		t.Error("a was not queued again under a new generation")
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM outbox WHERE generation > 0`); n != 2 {
		t.Errorf("%d rows queued again, want a and b", n)
	}
}
