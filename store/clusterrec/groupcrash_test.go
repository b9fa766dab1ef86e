package clusterrec_test

import (
	"context"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// report is a fingerprinted create of the fingerprint "checkout-500".
func report(id string) ticket.Request {
	r := newRequest(id, "checkout returns 500")
	r.Fingerprint = "checkout-500"
	return r
}

// claimCut claims r on h as a report, then h is lost before it decided
// the report's group: the claim holds the plain create.
func claimCut(t *testing.T, ctx context.Context, h *host, r ticket.Request) clusterrec.Claim {
	t.Helper()
	tk := ticket.Ticket{Request: r, ID: r.TicketID(), CreatedAt: time.Now().UTC()}
	c, err := h.store.ClaimUndecided(ctx, tk, r.Hash(), grouping)
	if err != nil || !c.Mine {
		t.Fatalf("claim %s on %s: %+v, %v", r.RequestID, h.id, c, err)
	}
	return c
}

// adopt runs a's heartbeat rounds until a's ledger holds id, which lost
// host b claimed.
func adopt(t *testing.T, ctx context.Context, a *host, ha *clusterrec.Hosts, id string) request.Report {
	t.Helper()
	var st request.Report
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		var err error
		st, err = a.l.Find(ctx, "", id)
		return err == nil && st.Status != request.StatusUnknown
	}) {
		t.Fatalf("a never adopted %s", id)
	}
	return st
}

// A report cut between its claim and its group's decision, while another
// host's report opens the group: the host that adopts the lost one
// decides the group before committing, so the report becomes an
// occurrence of the one ticket. Before, adoption committed the plain
// create: a second ticket for the fingerprint.
func TestAdoptionDecidesACutReportsGroup(t *testing.T) {
	ctx := ctxT(t)
	a, b, ha, hb := twoHosts(t)
	if err := hb.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	claimCut(t, ctx, b, report("cut"))
	first, err := a.front.Group(ctx, report("first"), grouping)
	if err != nil || first.Grouped {
		t.Fatalf("the first report on a: %+v, %v; want a ticket", first, err)
	}
	st := adopt(t, ctx, a, ha, "cut")
	if st.Kind != ticket.KindComment || !st.Grouped || st.TicketID != first.TicketID {
		t.Fatalf("the adopted report: %+v; want an occurrence on %s", st, first.TicketID)
	}
	rec, _, _, err := a.store.Get(ctx, "cut")
	if err != nil || rec.Group == nil || rec.Group.On != "first" || rec.Group.Occurrences != 2 || rec.Grouping != nil ||
		rec.Phase != clusterrec.PhaseAccepted || rec.Host != "host-a" {
		t.Fatalf("the adopted report's record: %+v (group %+v), %v; want occurrence 2 on first, accepted by a", rec, rec.Group, err)
	}
	// A retry of the cut report replays it, on either host.
	for _, h := range []*host{a, b} {
		if res, err := h.front.Group(ctx, report("cut"), grouping); err != nil || !res.Replayed || !res.Grouped || res.Occurrences != 2 {
			t.Fatalf("a retry of the cut report on %s: %+v, %v; want a replay of occurrence 2", h.id, res, err)
		}
	}
}

// A report counted by its group, its host lost before the report's claim
// was rewritten into the occurrence: the adopting host finds its number in
// the group and keeps it, though another report was counted meanwhile,
// so the count stays exact. Before, adoption counted it again.
func TestAdoptionKeepsACountedReportsNumber(t *testing.T) {
	ctx := ctxT(t)
	a, b, ha, hb := twoHosts(t)
	if err := hb.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.front.Group(ctx, report("r-1"), grouping); err != nil {
		t.Fatal(err)
	}
	c := claimCut(t, ctx, b, report("r-2"))
	// The group counts r-2; the rewrite of its claim is lost (here: it
	// expects a revision the claim never had).
	c.Rev += 1000
	if _, err := b.store.DecideGroup(ctx, c, grouping); err == nil {
		t.Fatal("the rewrite of a claim at a wrong revision succeeded")
	}
	third, err := a.front.Group(ctx, report("r-3"), grouping)
	if err != nil || third.Occurrences != 3 {
		t.Fatalf("r-3: %+v, %v; want occurrence 3", third, err)
	}
	adopt(t, ctx, a, ha, "r-2")
	rec, _, _, err := a.store.Get(ctx, "r-2")
	if err != nil || rec.Group == nil || rec.Group.Occurrences != 2 {
		t.Fatalf("the adopted r-2: %+v, %v; want occurrence 2", rec.Group, err)
	}
	if fourth, err := a.front.Group(ctx, report("r-4"), grouping); err != nil || fourth.Occurrences != 4 {
		t.Fatalf("r-4: %+v, %v; want occurrence 4: every report counted once", fourth, err)
	}
}
