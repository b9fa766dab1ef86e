package torture

// Fingerprinted creates in the load (issue 35, decision 0195): a caller
// keeps a small pool of fingerprints, each bound to one target, and files
// some of its creates with one of them, so that several requests share a
// fingerprint. The first of a group files the ticket; the others become
// occurrence comments on it, until a closing update_ticket of that ticket
// is accepted (the load's updates close tickets now and then). The run is
// far shorter than the default group_window (24 h): no group expires.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"ticketrelay/ticket"
)

// fingerprintShare is the share of a caller's creates filed with a
// fingerprint; poolSize the number of fingerprints a caller keeps.
const (
	fingerprintShare = 0.3
	poolSize         = 2
)

// fingerprint is one fingerprint of a caller's pool and the target its
// reports go to (a group is per target).
type fingerprint struct{ name, kind string }

// fingerprinted gives r, a new create, one of the caller's fingerprints
// (and its target) now and then.
func (c *caller) fingerprinted(r Request) Request {
	if !c.l.fingerprints || c.rng.Float64() >= fingerprintShare {
		return r
	}
	if c.pool == nil {
		// Slack is left out: a message posted through its incoming webhook
		// has no ts, so occurrences could not reach it.
		kinds := slices.DeleteFunc(slices.Clone(Kinds), func(k string) bool { return k == "slack" })
		for i := range poolSize {
			kind := kinds[c.rng.IntN(len(kinds))]
			c.pool = append(c.pool, fingerprint{name: fmt.Sprintf("fp-%s-c%02d-%d", c.l.prefix, c.id, i), kind: kind})
		}
	}
	fp := c.pool[c.rng.IntN(len(c.pool))]
	r.Fingerprint, r.Kind, r.Target, r.Tool, r.Keyed = fp.name, fp.kind, fp.kind, ToolFor(fp.kind), keyed(fp.kind)
	return r
}

// groupOf is the key of r's fingerprint group: its target and fingerprint
// (the run has one subject).
func groupOf(r Request) string { return r.Kind + "/" + r.Fingerprint }

// occurrences turns every fingerprinted create the ledger stored as an
// occurrence into the comment it is, on the ticket the ledger grouped it
// on, so that comments-once, answers-agree and records-agree hold it to a
// comment's guarantee; oneTicketPerFingerprint then checks the grouping.
func (c *checker) occurrences() {
	c.occurrence = map[string]bool{}
	for id, r := range c.reqs {
		row := c.in.DB.Rows[id]
		if r.Fingerprint == "" || row == nil || row.Kind != ActionComment {
			continue
		}
		r.Action, r.OnRequest, r.Keyed = ActionComment, row.OnRequest, commentsExactlyOnce(r.Kind)
		c.reqs[id] = r
		c.occurrence[id] = true
	}
}

// span is when a request's decision may have been taken, on one axis:
// one host's ledger order (a point: its requests.id), or across hosts
// from when the harness made the request up to its last call's end (in
// nanoseconds), since the hosts' ledgers share no order.
type span struct{ lo, hi int64 }

// point is the span of a request decided at seq.
func point(seq int64) span { return span{seq, seq} }

// before reports whether a was surely decided before b.
func (a span) before(b span) bool { return a.hi < b.lo }

// mayPrecede reports whether a may have been decided before b: b was not
// surely decided before a.
func (a span) mayPrecede(b span) bool { return !b.before(a) }

// groupEvent is one ledger row of a fingerprint's history: a create of the
// group, an occurrence, or a closing update of one of its tickets.
type groupEvent struct {
	at   span
	id   string
	what string // "create", "occurrence" or "close"
	on   string // an occurrence's or a close's ticket (its create's id)
}

// oneTicketPerFingerprint: per fingerprint group the ledger files one
// ticket per interval in which the group is open, the fakes hold exactly
// one ticket of each of the group's creates (at most one where the target
// takes no key), every acknowledged answer to a report names its ticket
// and says grouped exactly when the report is an occurrence, and each
// occurrence comment is held at most once, exactly once where the target
// takes a key or its lookup is consistent. A group ends when a closing
// update of its ticket is accepted or its create ended without a ticket;
// the ledger's acceptance order (requests.id) orders reports and closes.
func (c *checker) oneTicketPerFingerprint() Property {
	return c.fingerprintProperty(c.groupHistories(func(id string) (span, bool) {
		if row := c.in.DB.Rows[id]; row != nil {
			return point(row.Seq), true
		}
		return span{}, false
	}))
}

// groupHistories are the ledger's rows of each fingerprint group (a
// request without a span is left out), with the closing updates of the
// groups' tickets, ordered by the start of their spans.
func (c *checker) groupHistories(spanOf func(id string) (span, bool)) map[string][]groupEvent {
	groups, creates := map[string][]groupEvent{}, map[string]string{} // create id → group
	for _, id := range c.ids {
		r := c.reqs[id]
		s, ok := spanOf(id)
		if r.Fingerprint == "" || !ok {
			continue
		}
		e := groupEvent{at: s, id: id, what: "create"}
		if c.occurrence[id] {
			e.what, e.on = "occurrence", r.OnRequest
		} else {
			creates[id] = groupOf(r)
		}
		groups[groupOf(r)] = append(groups[groupOf(r)], e)
	}
	for _, id := range c.ids {
		r := c.reqs[id]
		g, isCreate := creates[r.OnRequest]
		s, ok := spanOf(id)
		if r.Action != ActionUpdate || !isCreate || r.Set.Status != "closed" || !ok {
			continue
		}
		groups[g] = append(groups[g], groupEvent{at: s, id: id, what: "close", on: r.OnRequest})
	}
	for _, es := range groups {
		slices.SortFunc(es, func(a, b groupEvent) int { return cmp.Or(cmp.Compare(a.at.lo, b.at.lo), cmp.Compare(a.at.hi, b.at.hi)) })
	}
	return groups
}

// fingerprintProperty checks groups' histories. Two tickets of a group
// may not be open at once: one of them must have been closed (or have
// ended without a ticket) before the other may have been filed. An
// occurrence must join a ticket of its group that may have been filed
// before it, was not surely closed before it, and was not surely followed
// by another ticket before it. On one host the spans are points and this
// is the ledger's order; across hosts, requests whose spans overlap may
// have been decided in either order.
func (c *checker) fingerprintProperty(groups map[string][]groupEvent) Property {
	var v []string
	reports, tickets, occ, closed, comments := 0, 0, 0, 0, map[string]int{}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		var filed []groupEvent              // the group's creates so far
		spans := map[string]span{}          // the group's tickets
		closes := map[string][]groupEvent{} // by ticket
		for _, e := range groups[g] {
			switch e.what {
			case "create":
				spans[e.id] = e.at
			case "close":
				closes[e.on] = append(closes[e.on], e)
			}
		}
		closed += len(closes)
		// closedBy is a close of ticket t that may (surely: must) have
		// taken effect before s; "" if none.
		closedBy := func(t string, s span, surely bool) string {
			for _, x := range closes[t] {
				if surely && x.at.before(s) || !surely && x.at.mayPrecede(s) {
					return x.id
				}
			}
			return ""
		}
		for _, e := range groups[g] {
			switch e.what {
			case "close":
				continue
			case "create":
				reports++
				tickets++
				for _, t := range filed {
					switch {
					case closedBy(t.id, e.at, false) != "" || closedBy(e.id, t.at, false) != "",
						c.noTicket(t.id) && t.at.mayPrecede(e.at), c.noTicket(e.id) && e.at.mayPrecede(t.at):
						continue
					}
					v = append(v, fmt.Sprintf("%s (%s): filed a second ticket while the group's ticket of %s was open", e.id, g, t.id))
					break
				}
				filed = append(filed, e)
				v = append(v, c.groupTicketHeld(e.id)...)
			case "occurrence":
				reports++
				occ++
				v = append(v, c.occurrenceJoined(g, e, spans, closedBy)...)
				k, r := len(c.comments[e.id]), c.reqs[e.id]
				comments[fmt.Sprintf("%d", k)]++
				if k > 1 || k == 0 && r.Keyed && c.final(e.id) == "delivered" {
					v = append(v, fmt.Sprintf("%s (%s): an occurrence ended %s, %s holds its comment %d times", e.id, g, c.final(e.id), r.Kind, k))
				}
				if k := len(c.recs[e.id]); k > 0 {
					v = append(v, fmt.Sprintf("%s (%s): an occurrence, but %s holds %d tickets of it", e.id, g, r.Kind, k))
				}
			}
			v = append(v, c.groupAnswers(e)...)
		}
	}
	summary := fmt.Sprintf("%d fingerprint groups: %d reports, %d tickets filed, %d occurrences (comments held per occurrence %s), %d groups closed by an update",
		len(groups), reports, tickets, occ, brief(comments), closed)
	return property("one-ticket-per-fp", v, "%s; %d violations", summary, len(v))
}

// occurrenceJoined says what is wrong with the ticket occurrence e of
// group g joined: it must be one of the group's tickets (spans), may have
// been filed before e, not surely closed before e, and not surely
// followed by another of the group's tickets before e.
func (c *checker) occurrenceJoined(g string, e groupEvent, spans map[string]span, closedBy func(t string, s span, surely bool) string) []string {
	t, ok := spans[e.on]
	switch {
	case !ok:
		return []string{fmt.Sprintf("%s (%s): an occurrence of the ticket of %s, which is no ticket of its group", e.id, g, cmp.Or(e.on, "none"))}
	case !t.mayPrecede(e.at):
		return []string{fmt.Sprintf("%s (%s): an occurrence of the ticket of %s, filed after it", e.id, g, e.on)}
	}
	if x := closedBy(e.on, e.at, true); x != "" {
		return []string{fmt.Sprintf("%s (%s): an occurrence of the ticket of %s, whose group the update %s had closed before", e.id, g, e.on, x)}
	}
	for _, other := range slices.Sorted(maps.Keys(spans)) {
		if o := spans[other]; other != e.on && t.before(o) && o.before(e.at) {
			return []string{fmt.Sprintf("%s (%s): an occurrence of the ticket of %s, but the open ticket was %s", e.id, g, e.on, other)}
		}
	}
	return nil
}

// groupTicketHeld says what is wrong with the ticket of a group's create
// at its fake: exactly one once delivered, at most one where the target
// takes no key.
func (c *checker) groupTicketHeld(id string) []string {
	r, k, st := c.reqs[id], len(c.recs[id]), c.final(id)
	switch {
	case k > 1, k != 1 && st == "delivered", k > 0 && st == "failed":
		return []string{fmt.Sprintf("%s (%s): ended %s, %s holds %d tickets of it", id, groupOf(r), st, r.Kind, k)}
	case k == 0 && r.Keyed && st != "failed":
		return []string{fmt.Sprintf("%s (%s): ended %s, %s holds no ticket of it", id, groupOf(r), st, r.Kind)}
	}
	return nil
}

// groupAnswers says what is wrong with the answers a client saw to e's
// report: every one must name the ticket the ledger filed or grouped it
// on, and say grouped exactly when it is an occurrence.
func (c *checker) groupAnswers(e groupEvent) []string {
	want := ticket.IDFor(e.id)
	if e.what == "occurrence" {
		want = ticket.IDFor(e.on)
	}
	var v []string
	for _, a := range c.answers[e.id] {
		if a.TicketID != want || a.Grouped != (e.what == "occurrence") {
			v = append(v, fmt.Sprintf("%s: answered ticket %s grouped=%t, but the ledger holds it as a%s of %s", e.id, a.TicketID, a.Grouped,
				map[bool]string{true: "n occurrence", false: " create"}[e.what == "occurrence"], want))
		}
	}
	return v
}
