package clusterrec_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/testclock"
)

var grouping = request.Grouping{Window: time.Hour, Comments: true}

// Concurrent first reports of one fingerprint on two hosts file one
// ticket: the group record's create decides, and the losers are
// rewritten into occurrences of the winner's ticket before they commit,
// whichever host holds it. A repeat replays; after the ticket is closed
// the fingerprint files a new one.
func TestGroupAcrossHosts(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	const n = 12
	results := make([]request.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Go(func() {
			r := newRequest(fmt.Sprintf("g-%d", i), "checkout returns 500")
			r.Fingerprint = "checkout-500"
			results[i], errs[i] = h.front.Group(ctx, r, grouping)
		})
	}
	wg.Wait()
	tickets, numbers := map[string]bool{}, map[int]bool{}
	first := ""
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("g-%d: %v", i, errs[i])
		}
		tickets[r.TicketID] = true
		if r.Grouped {
			numbers[r.Occurrences] = true
		} else {
			first = r.RequestID
		}
	}
	if len(tickets) != 1 || len(numbers) != n-1 || numbers[1] {
		t.Fatalf("tickets %v, occurrence numbers %v; want one ticket and occurrences 2..%d", tickets, numbers, n)
	}
	for i, r := range results {
		if r.Grouped && r.GroupedOn != first {
			t.Fatalf("g-%d grouped on %q, want %q", i, r.GroupedOn, first)
		}
	}
	// Each host committed its own calls: one create among them all.
	creates := 0
	for _, h := range []*host{a, b} {
		for i := range n {
			if st, err := h.l.Find(ctx, "", fmt.Sprintf("g-%d", i)); err == nil && st.Status != request.StatusUnknown && st.Kind == "" {
				creates++
			}
		}
	}
	if creates != 1 {
		t.Fatalf("%d creates committed across the hosts, want 1", creates)
	}

	r := newRequest("g-1", "checkout returns 500")
	r.Fingerprint = "checkout-500"
	if again, err := a.front.Group(ctx, r, grouping); err != nil || !again.Replayed || again.TicketID != results[1].TicketID ||
		again.Grouped != results[1].Grouped || again.Occurrences != results[1].Occurrences {
		t.Fatalf("g-1 again on the other host: %+v, %v; want a replay of %+v", again, err, results[1])
	}
	if err := b.front.CloseGroup(ctx, first); err != nil {
		t.Fatal(err)
	}
	r = newRequest("g-after", "checkout returns 500")
	r.Fingerprint = "checkout-500"
	if res, err := a.front.Group(ctx, r, grouping); err != nil || res.Grouped || tickets[res.TicketID] {
		t.Fatalf("after the ticket was closed: %+v, %v; want a new ticket", res, err)
	}
}

// A group's window is read on the front's clock; a target without
// comments records the occurrence settled, with nothing to deliver.
func TestGroupWindowAndRecordedOccurrence(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a := newHost(t, js, "host-a", clusterrec.Config{})
	clock := testclock.New(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC))
	f := clusterrec.NewFront(archetype.Archetype{Logger: discard(), Now: clock.Now}, a.store, a.l)
	report := func(id string) request.Result {
		t.Helper()
		r := newRequest(id, "disk full")
		r.Fingerprint = "disk"
		res, err := f.Group(ctx, r, request.Grouping{Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := report("w-1")
	clock.Add(59 * time.Minute)
	second := report("w-2")
	if !second.Grouped || second.TicketID != first.TicketID {
		t.Fatalf("within the window: %+v; want grouped onto %s", second, first.TicketID)
	}
	if st, err := f.Find(ctx, "", "w-2"); err != nil || st.Status != request.StatusDelivered || !st.Grouped {
		t.Fatalf("the recorded occurrence: %+v, %v; want settled, grouped", st, err)
	}
	clock.Add(time.Minute)
	if third := report("w-3"); third.Grouped || third.TicketID == first.TicketID {
		t.Fatalf("at the window's end: %+v; want a new ticket", third)
	}
}
