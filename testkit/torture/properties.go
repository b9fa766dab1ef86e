package torture

import (
	"fmt"
	"maps"
	"slices"
)

// The properties a run must keep. Each returns its verdict with the counts
// that back it, and one line per violation.

func property(name string, violations []string, format string, a ...any) Property {
	return Property{Name: name, OK: len(violations) == 0, Summary: fmt.Sprintf(format, a...), Violations: violations}
}

func (c *checker) answersAgree() Property {
	var v []string
	n, first, replays := 0, 0, 0
	for _, id := range c.ids {
		want := wantTicket(c.reqs[id])
		firsts := 0
		for _, e := range c.answers[id] {
			n++
			if e.Replayed {
				replays++
			} else {
				firsts++
			}
			if e.TicketID != want {
				v = append(v, fmt.Sprintf("%s: answered ticket %s, want %s", id, e.TicketID, want))
			}
		}
		first += firsts
		if firsts > 1 {
			v = append(v, fmt.Sprintf("%s: accepted as new %d times (replayed=false)", id, firsts))
		}
		for _, e := range c.bad[id] {
			v = append(v, fmt.Sprintf("%s: %s to a repeat with the same arguments: %s", id, e.Outcome, e.Err))
		}
	}
	return property("answers-agree", v, "%d accepted answers to %d requests (%d first acceptances, %d replays); %d disagree",
		n, len(c.answers), first, replays, len(v))
}

func (c *checker) acceptedDelivered() Property {
	var v []string
	seen, ledgerOnly, delivered, uncertain := 0, 0, 0, 0
	for _, id := range c.accepted() {
		r := c.reqs[id]
		if r.Action != "" {
			continue // comments-once, updates-last
		}
		if c.seenAccepted(id) {
			seen++
		} else {
			ledgerOnly++
		}
		if c.in.DB.Rows[id] == nil {
			v = append(v, fmt.Sprintf("%s (%s): a client saw it accepted, but the ledger has no row", id, r.Tool))
			continue
		}
		switch st := c.final(id); {
		case st == "delivered":
			delivered++
			if len(c.recs[id]) == 0 {
				v = append(v, fmt.Sprintf("%s (%s): find_request says delivered, but %s holds no item", id, r.Tool, r.Kind))
			}
		case st == "uncertain" && !r.Keyed:
			uncertain++
		default:
			want := "delivered"
			if !r.Keyed {
				want = "delivered or uncertain"
			}
			v = append(v, fmt.Sprintf("%s (%s): final status %s, want %s", id, r.Tool, st, want))
		}
	}
	return property("accepted-delivered", v, "%d requests seen accepted by a client, %d more in the ledger only: %d delivered, %d uncertain (no key), %d lost or not done",
		seen, ledgerOnly, delivered, uncertain, len(v))
}

func (c *checker) byKind(keyed bool) (ids []string, perKind map[string]int) {
	perKind = map[string]int{}
	for _, id := range c.accepted() {
		if r := c.reqs[id]; r.Keyed == keyed && r.Action == "" {
			ids = append(ids, id)
			perKind[r.Kind] += len(c.recs[id])
		}
	}
	return ids, perKind
}

func (c *checker) keyedExactlyOnce() Property {
	var v []string
	ids, perKind := c.byKind(true)
	absorbed := 0
	for _, id := range ids {
		rs := c.recs[id]
		if len(rs) != 1 {
			v = append(v, fmt.Sprintf("%s: %s received it %d times, want exactly once", id, c.reqs[id].Kind, len(rs)))
		}
		for _, r := range rs {
			absorbed += max(0, r.Applied-1)
		}
	}
	return property("keyed-exactly-once", v, "%d accepted requests to targets with a dedupe key, items held %s, %d resends absorbed by the key; %d not exactly once",
		len(ids), brief(perKind), absorbed, len(v))
}

func (c *checker) unkeyedAtMostOnce() Property {
	var v []string
	n, perKind := 0, map[string]int{}
	for _, id := range c.ids {
		r := c.reqs[id]
		if r.Keyed || r.Action != "" {
			continue
		}
		n++
		perKind[r.Kind] += len(c.recs[id])
		if k := len(c.recs[id]); k > 1 {
			v = append(v, fmt.Sprintf("%s: %s received it %d times, want at most once", id, r.Kind, k))
		}
		if k := len(c.recs[id]); k != 1 && c.final(id) == "delivered" {
			v = append(v, fmt.Sprintf("%s: find_request says delivered, %s holds %d items", id, r.Kind, k))
		}
	}
	return property("unkeyed-at-most-once", v, "%d requests to targets without a key, items held %s; %d violations", n, brief(perKind), len(v))
}

func (c *checker) ambiguousUncertain() Property {
	var v []string
	present, absent := 0, 0
	for _, id := range c.ids {
		r := c.reqs[id]
		if r.Keyed || r.Action != "" || c.in.DB.Rows[id] == nil {
			continue
		}
		st, k := c.final(id), len(c.recs[id])
		switch {
		case st == "uncertain" && k > 0:
			present++
		case st == "uncertain":
			absent++
		case st != "delivered" && k > 0:
			v = append(v, fmt.Sprintf("%s: %s holds the item but find_request says %s, want uncertain", id, r.Kind, st))
		}
	}
	return property("ambiguous-uncertain", v, "%d requests without a key are uncertain (%d reached the target, %d did not); %d unconfirmed items not uncertain",
		present+absent, present, absent, len(v))
}

func (c *checker) settled() Property {
	var v []string
	counts := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(c.in.DB.Rows)) {
		row := c.in.DB.Rows[id]
		st := c.final(id)
		counts[st]++
		if row.settled() && settledState(st) {
			continue
		}
		d := "no delivery record"
		if row.Delivery != nil {
			d = fmt.Sprintf("delivery %s after %d attempts (%s)", row.Delivery.State, row.Delivery.Attempts, row.Delivery.LastError)
		}
		v = append(v, fmt.Sprintf("%s: find_request says %s after the faults stopped; published=%t, %s", id, st, row.Published, d))
	}
	return property("settled", v, "%d ledger rows after the faults stopped %s; %d not published and settled", len(c.in.DB.Rows), brief(counts), len(v))
}

func (c *checker) recordsAgree() Property {
	var v []string
	for _, id := range slices.Sorted(maps.Keys(c.in.DB.Rows)) {
		row := c.in.DB.Rows[id]
		r, sent := c.reqs[id]
		if !sent {
			v = append(v, fmt.Sprintf("%s: ledger row of a request no caller sent", id))
			continue
		}
		// Nobody redrives here and the broker syncs every write: a republish
		// (but a parked request's, see unexplained) means the stream watch
		// or audit took a held message for lost. A
		// deletion or purge of the stream makes the watcher publish again,
		// once, what it took.
		if why := c.republishedTooOften(id, row.unexplained()); why != "" && !c.streamLost(id) {
			v = append(v, id+": "+why)
		}
		switch {
		case r.Action != "" && row.HasTicket:
			v = append(v, fmt.Sprintf("%s: a %s shown as a ticket", id, r.Action))
		case r.Action != "":
		case !row.HasTicket:
			v = append(v, id+": ledger row without a ticket")
		case row.Title != r.Title:
			v = append(v, fmt.Sprintf("%s: ticket title %q, the caller sent %q", id, row.Title, r.Title))
		}
		if row.Tool != r.Tool || row.Target != r.Target {
			v = append(v, fmt.Sprintf("%s: ledger says tool %s target %s, the caller used %s → %s", id, row.Tool, row.Target, r.Tool, r.Target))
		}
		if want := wantTicket(r); row.TicketID != want {
			v = append(v, fmt.Sprintf("%s: ledger ticket id %s, want %s", id, row.TicketID, want))
		}
		if !row.HasOutbox || row.Subject != "tickets."+row.Target {
			v = append(v, fmt.Sprintf("%s: outbox row present=%t subject %q, want tickets.%s", id, row.HasOutbox, row.Subject, row.Target))
		}
		if d := row.Delivery; d != nil {
			if d.Target != row.Target {
				v = append(v, fmt.Sprintf("%s: delivery record for target %s, ledger says %s", id, d.Target, row.Target))
			}
			if r.Action == "" && d.State == "delivered" && d.ExternalID != "" && !slices.ContainsFunc(c.recs[id], func(x Record) bool { return x.ExternalID == d.ExternalID }) {
				v = append(v, fmt.Sprintf("%s: delivered as %s, but %s holds no item with that id", id, d.ExternalID, r.Kind))
			}
		}
		if f := c.in.Final[id]; f != "" && f != row.status() {
			v = append(v, fmt.Sprintf("%s: find_request says %s, the ledger %s", id, f, row.status()))
		}
	}
	for _, o := range c.in.DB.Orphans {
		v = append(v, "orphan: "+o)
	}
	for _, p := range c.phantoms {
		v = append(v, fmt.Sprintf("%s holds an item of no request: %q", p.Kind, p.Title))
	}
	for _, id := range c.ids {
		if len(c.recs[id]) > 0 && c.in.DB.Rows[id] == nil {
			v = append(v, fmt.Sprintf("%s: %s holds an item of a request the ledger never accepted", id, c.reqs[id].Kind))
		}
	}
	return property("records-agree", v, "ledger, tickets, outbox, delivery records, find_request and %d target items; %d disagreements", len(c.in.Records), len(v))
}

func (c *checker) processes() Property {
	var v []string
	kills, fps := map[string]int{}, map[string]int{}
	for _, e := range c.in.Events {
		if e.Kind != KindKill {
			continue
		}
		switch e.Cause {
		case CauseScheduler, CauseDisarm, CausePowerCut:
			kills[e.Component]++
		case CauseFailpoint:
			fps[e.Detail]++
		default:
			v = append(v, fmt.Sprintf("%s (%s) exited on its own: %s", e.Component, e.Detail, e.Err))
		}
	}
	for _, s := range c.in.Shutdown {
		v = append(v, "at the end: "+s)
	}
	return property("processes", v, "%d SIGKILLs %s, %d failpoint kills %s; %d other exits or unclean stops",
		sum(kills), brief(kills), sum(fps), brief(fps), len(v))
}

// faultsSince counts the stream's deletions and purges after the harness
// made id up.
func (c *checker) faultsSince(id string) int {
	n := 0
	for _, at := range c.faults {
		if at.After(c.made[id]) {
			n++
		}
	}
	return n
}

// republishedTooOften says why generation republishes of id are more than
// its stream faults allow, or "" if they are not.
func (c *checker) republishedTooOften(id string, generation int) string {
	switch n := c.faultsSince(id); {
	case generation <= n:
		return ""
	case n == 0:
		return fmt.Sprintf("published again %d times, though the stream lost nothing", generation)
	default:
		return fmt.Sprintf("published again %d times, though the stream was deleted or purged %d times after it was sent", generation, n)
	}
}

// streamLost reports whether a power cut made the stream lose id's message
// (the audit then publishes it again under a new message id).
func (c *checker) streamLost(id string) bool {
	if c.in.PowerCut == nil {
		return false
	}
	_, lost := c.in.PowerCut.StreamLost[id]
	return lost
}
