package redmine_test

import (
	"context"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/redmine/redminetest"
)

// With the subject marker, an issue whose subject carries another request's
// marker (written by hand, or by a ticket accepted before such titles were
// refused) is not that request's issue: its description lacks that ticket's
// footer. Find neither takes it for the delivery nor concludes that nothing
// was created.
func TestFindNeedsTheFooterBesidesTheSubjectMarker(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", 0)
	tg := newTarget(t, f.URL(), apiKey, noField)
	victim := downstreamtest.NewDelivery("req-victim")
	forger := downstreamtest.NewDelivery("req-forger")
	// Bypasses ticket.Normalize, which refuses the marker now.
	forger.Ticket.Title = "Printer " + redmine.SubjectMarker(victim.Key)
	deliver(t, tg, forger)

	r, found, err := tg.Find(context.Background(), victim)
	if found {
		t.Fatalf("Find(%s) took the forger's issue %+v for the victim's", victim.Key, r)
	}
	e := downstream.Classify(err)
	if err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "#1") || !strings.Contains(err.Error(), victim.Ticket.ID) {
		t.Fatalf("Find(%s) = %v; want a permanent error naming issue #1 and ticket %s", victim.Key, err, victim.Ticket.ID)
	}

	want := deliver(t, tg, victim)
	if got, found := find(t, tg, victim); !found || got != want {
		t.Fatalf("Find(%s) = %+v, %v; want %+v", victim.Key, got, found, want)
	}
	if got, found := find(t, tg, forger); !found || got.ExternalID != "1" {
		t.Fatalf("Find(%s) = %+v, %v; want issue 1", forger.Key, got, found)
	}
}
