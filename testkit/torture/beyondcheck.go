package torture

// The properties of comments and updates (issue 35).

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"ticketrelay/ticket"
)

// wantTicket is the ticket id an accepted answer to r must carry: its own
// for a create, its create's for a comment or an update on a ticket the
// run filed, none on a ticket ticketrelay did not file.
func wantTicket(r Request) string {
	switch {
	case r.Action == "":
		return ticket.IDFor(r.ID)
	case r.OnRequest != "":
		return ticket.IDFor(r.OnRequest)
	}
	return ""
}

// actionAccepted says what is wrong with action id's acceptance: a client
// saw it accepted but the ledger has no row, or the row is not of its
// kind or on its ticket. "" if nothing.
func (c *checker) actionAccepted(id string) string {
	r, row := c.reqs[id], c.in.DB.Rows[id]
	switch {
	case row == nil && c.seenAccepted(id):
		return fmt.Sprintf("%s (%s): a client saw it accepted, but the ledger has no row", id, r.Tool)
	case row == nil:
		return ""
	case row.Kind != r.Action:
		return fmt.Sprintf("%s: the ledger row is a %q, the caller sent a %s", id, row.Kind, r.Action)
	case row.OnRequest != r.OnRequest:
		return fmt.Sprintf("%s: the ledger row acts on %q, the caller named the ticket of %q", id, row.OnRequest, r.OnRequest)
	}
	return ""
}

// noTicket reports whether create id ended without a ticket to act on.
func (c *checker) noTicket(id string) bool {
	st := c.final(id)
	return st == "failed" || st == "uncertain" || c.in.DB.Rows[id] == nil
}

// commentsOnce: every comment the ledger accepted reaches its ticket once
// where the target takes a key or its marker's lookup is consistent (ends
// delivered with exactly one comment), at most once elsewhere (Slack: ends
// delivered with one, or uncertain with none or one); one on a ticket
// whose create ended without a ticket ends failed with none. Never twice,
// never on another ticket, never a comment of no request.
func (c *checker) commentsOnce() Property {
	var v []string
	counts := map[string]int{}
	for _, id := range c.ids {
		r := c.reqs[id]
		if r.Action != ActionComment {
			continue
		}
		if why := c.actionAccepted(id); why != "" {
			v = append(v, why)
		}
		cs := c.comments[id]
		for _, x := range cs {
			if x.OnRequest != r.OnRequest || x.Thread != (r.OnRequest == "") {
				v = append(v, fmt.Sprintf("%s: its comment is on %s, want %s", id, onName(x.OnRequest, x.Thread), onName(r.OnRequest, r.OnRequest == "")))
			}
		}
		k, st := len(cs), c.final(id)
		if k > 1 {
			v = append(v, fmt.Sprintf("%s: %s holds the comment %d times", id, r.Kind, k))
		}
		if c.in.DB.Rows[id] == nil {
			if k > 0 {
				v = append(v, fmt.Sprintf("%s: %s holds a comment the ledger never accepted", id, r.Kind))
			}
			continue
		}
		switch {
		case st == "delivered" && k == 1:
			counts["delivered"]++
		case st == "uncertain" && !r.Keyed && k <= 1:
			counts[fmt.Sprintf("uncertain-%d", k)]++
		case st == "failed" && r.OnRequest != "" && c.noTicket(r.OnRequest) && k == 0:
			counts["no-ticket"]++
		case st == "delivered" || st == "uncertain" || st == "failed":
			v = append(v, fmt.Sprintf("%s (%s, exactly once: %t): ended %s with %d comments at the target", id, r.Kind, r.Keyed, st, k))
		default:
			v = append(v, fmt.Sprintf("%s (%s): final status %s", id, r.Kind, st))
		}
	}
	for _, p := range c.strayComments {
		v = append(v, fmt.Sprintf("%s holds a comment of no comment request (%q) on %s", p.Target, p.RequestID, onName(p.OnRequest, p.Thread)))
	}
	return property("comments-once", v, "%d comments accepted %s (uncertain-N: on Slack, N at the target); %d violations",
		sum(counts), brief(counts), len(v))
}

func onName(on string, thread bool) string {
	switch {
	case thread:
		return "the Slack thread"
	case on == "":
		return "no ticket of the run"
	}
	return "the ticket of " + on
}

// updatesLast: the fields of every ticket at its fake are those the last
// accepted update of each field set. "Last" is the ledger's acceptance
// order per ticket: its rows' ids (requests.id, assigned at commit), which
// for one caller's updates of its own ticket, each sent only once the one
// before was acknowledged, is also the order of the acknowledgements.
// Every update of a ticket whose create was delivered must end delivered;
// one of a ticket whose create ended without a ticket ends failed.
func (c *checker) updatesLast() Property {
	return c.updatesLastBy(func(id string) int64 { return c.in.DB.Rows[id].Seq }, nil)
}

// updatesLastBy is updatesLast with the acceptance order given by order
// (the ledgers of several hosts share none); where, if not nil, says
// where an update was accepted, for a violation's line.
func (c *checker) updatesLastBy(order func(id string) int64, where func(id string) string) Property {
	var v []string
	byTicket := map[string][]*Row{}
	n := 0
	for _, id := range c.ids {
		r := c.reqs[id]
		if r.Action != ActionUpdate {
			continue
		}
		n++
		if why := c.actionAccepted(id); why != "" {
			v = append(v, why)
		}
		if row := c.in.DB.Rows[id]; row != nil {
			byTicket[r.OnRequest] = append(byTicket[r.OnRequest], row)
		}
	}
	checked, lastUnacked := 0, 0
	for _, on := range slices.Sorted(maps.Keys(byTicket)) {
		rows := byTicket[on]
		slices.SortFunc(rows, func(a, b *Row) int { return cmp.Compare(order(a.RequestID), order(b.RequestID)) })
		var want Fields
		delivered := !c.noTicket(on)
		for _, row := range rows {
			id, st := row.RequestID, c.final(row.RequestID)
			switch {
			case st == "delivered" && delivered:
				set := c.reqs[id].Set
				want.Status = cmp.Or(set.Status, want.Status)
				want.Priority = cmp.Or(set.Priority, want.Priority)
				if set.Labels != nil {
					want.Labels = set.Labels
				}
			case st == "failed" && !delivered:
			default:
				v = append(v, fmt.Sprintf("%s: an update of the ticket of %s (create %s) ended %s", id, on, c.final(on), st))
			}
		}
		if !c.seenAccepted(rows[len(rows)-1].RequestID) {
			lastUnacked++
		}
		if !delivered {
			continue
		}
		checked++
		kind := c.reqs[on].Kind
		got, ok := c.states[kind+"/"+on]
		if !ok {
			v = append(v, fmt.Sprintf("%s: %s holds no ticket of %s to compare with its %d updates", on, kind, on, len(rows)))
			continue
		}
		var diff []string
		if want.Status != "" && got.Status != want.Status {
			diff = append(diff, fmt.Sprintf("status %s, want %s", got.Status, want.Status))
		}
		if want.Priority != "" && got.Priority != want.Priority {
			diff = append(diff, fmt.Sprintf("priority %q, want %s", got.Priority, want.Priority))
		}
		if want.Labels != nil && !slices.Equal(got.Labels, cleanLabels(*want.Labels)) {
			diff = append(diff, fmt.Sprintf("labels %v, want %v", got.Labels, cleanLabels(*want.Labels)))
		}
		if len(diff) > 0 {
			at := ""
			if where != nil {
				var hosts []string
				for _, row := range rows {
					hosts = append(hosts, where(row.RequestID))
				}
				at = "; accepted on " + strings.Join(hosts, ", ")
			}
			v = append(v, fmt.Sprintf("%s (%s, %d updates, the last %s): %s%s", on, kind, len(rows), rows[len(rows)-1].RequestID, strings.Join(diff, ", "), at))
		}
	}
	return property("updates-last", v, "%d updates of %d tickets; %d tickets' fields compared with their last updates (%d tickets' last update accepted but unacknowledged); %d violations",
		n, len(byTicket), checked, lastUnacked, len(v))
}
