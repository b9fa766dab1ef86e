package github_test

import (
	"context"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/github/githubtest"
)

// An issue that carries another request's key label (a label put there by
// hand, or by a ticket accepted before such labels were refused) is not that
// request's issue: its body lacks that ticket's footer. Find neither takes
// it for the delivery nor concludes that nothing was created.
func TestFindNeedsTheFooterBesidesTheLabel(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	victim := downstreamtest.NewDelivery("req-victim")
	forger := downstreamtest.NewDelivery("req-forger")
	// Bypasses ticket.Normalize, which refuses the label now.
	forger.Ticket.Labels = append(forger.Ticket.Labels, github.KeyLabel(victim.Key))
	deliver(t, tg, forger)

	r, found, err := tg.Find(context.Background(), victim)
	if found {
		t.Fatalf("Find(%s) took the forger's issue %+v for the victim's", victim.Key, r)
	}
	e := downstream.Classify(err)
	if err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "#1") || !strings.Contains(err.Error(), victim.Ticket.ID) {
		t.Fatalf("Find(%s) = %v; want a permanent error naming issue #1 and ticket %s", victim.Key, err, victim.Ticket.ID)
	}

	// The victim's own issue, once it exists, is found (it is listed
	// second: created later).
	want := deliver(t, tg, victim)
	if got, found, err := tg.Find(context.Background(), victim); err != nil || !found || got != want {
		t.Fatalf("Find(%s) = %+v, %v, %v; want %+v", victim.Key, got, found, err, want)
	}
	// The forger's own lookup is unaffected.
	if got, found, err := tg.Find(context.Background(), forger); err != nil || !found || got.ExternalID != "1" {
		t.Fatalf("Find(%s) = %+v, %v, %v; want issue 1", forger.Key, got, found, err)
	}
}
