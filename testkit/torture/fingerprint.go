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
	"time"

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

// groupEvent is one ledger row of a fingerprint's history: a create of the
// group, an occurrence, or a closing update of one of its tickets.
type groupEvent struct {
	seq  int64
	id   string
	what string // "create", "occurrence" or "close"
	on   string // an occurrence's or a close's ticket (its create's id)
}

// oneTicketPerFingerprint: per fingerprint group the ledger files one
// ticket, the fakes hold exactly one ticket of the group's requests (at
// most one where the target takes no key), every acknowledged answer to a
// report names that ticket and says grouped exactly when the report is an
// occurrence, and each occurrence comment is held at most once, exactly
// once where the target takes a key or its lookup is consistent. A group
// ends when a closing update of its ticket is accepted or its create
// ended without a ticket; the ledger's acceptance order (requests.id)
// orders reports and closes.
func (c *checker) oneTicketPerFingerprint() Property {
	return c.fingerprintProperty(c.groupHistories(func(id string) int64 {
		if row := c.in.DB.Rows[id]; row != nil {
			return row.Seq
		}
		return 0
	}), nil, "")
}

// groupHistories are the ledger's rows of each fingerprint group, in the
// order seq gives (a row without one is left out), with the closing
// updates of the groups' tickets.
func (c *checker) groupHistories(seq func(id string) int64) map[string][]groupEvent {
	groups, creates := map[string][]groupEvent{}, map[string]string{} // create id → group
	for _, id := range c.ids {
		r := c.reqs[id]
		s := seq(id)
		if r.Fingerprint == "" || s == 0 {
			continue
		}
		e := groupEvent{seq: s, id: id, what: "create"}
		if c.occurrence[id] {
			e.what, e.on = "occurrence", r.OnRequest
		} else {
			creates[id] = groupOf(r)
		}
		groups[groupOf(r)] = append(groups[groupOf(r)], e)
	}
	for _, id := range c.ids {
		r := c.reqs[id]
		g, ok := creates[r.OnRequest]
		s := seq(id)
		if r.Action != ActionUpdate || !ok || r.Set.Status != "closed" || s == 0 {
			continue
		}
		groups[g] = append(groups[g], groupEvent{seq: s, id: id, what: "close", on: r.OnRequest})
	}
	for _, es := range groups {
		slices.SortFunc(es, func(a, b groupEvent) int { return cmp.Compare(a.seq, b.seq) })
	}
	return groups
}

// fingerprintProperty checks groups' histories. crashOK, if not nil,
// reports whether a documented crash window allows create id to file a
// second ticket while open's is open; allowed says what the summary
// reports of such tickets.
func (c *checker) fingerprintProperty(groups map[string][]groupEvent, crashOK func(id, open string) bool, allowed string) Property {
	var v []string
	reports, tickets, occ, closes, comments, allowedN := 0, 0, 0, 0, map[string]int{}, 0
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		open, crashed := "", false
		filed := map[string]bool{} // the tickets of the group since it last closed
		for _, e := range groups[g] {
			switch e.what {
			case "close":
				// The ledger closes the group when it accepts the update,
				// whatever its delivery.
				if e.on == open {
					open, crashed = "", false
					clear(filed)
					closes++
				}
				continue
			case "create":
				reports++
				tickets++
				switch {
				case open == "" || c.noTicket(open):
				case crashOK != nil && crashOK(e.id, open):
					allowedN++
					crashed = true
				default:
					v = append(v, fmt.Sprintf("%s (%s): filed a second ticket while the group's ticket of %s was open", e.id, g, open))
				}
				open, filed[e.id] = e.id, true
				v = append(v, c.groupTicketHeld(e.id)...)
			case "occurrence":
				reports++
				occ++
				// After a crash window's second ticket, a report may have
				// joined either.
				if e.on != open && !(crashed && filed[e.on]) {
					v = append(v, fmt.Sprintf("%s (%s): an occurrence of the ticket of %s, but the open ticket was %s", e.id, g, e.on, cmp.Or(open, "none")))
				}
				if k := len(c.recs[e.id]); k > 0 {
					v = append(v, fmt.Sprintf("%s (%s): an occurrence, but %s holds %d tickets of it", e.id, g, c.reqs[e.id].Kind, k))
				}
				k, r := len(c.comments[e.id]), c.reqs[e.id]
				comments[fmt.Sprintf("%d", k)]++
				if k > 1 || k == 0 && r.Keyed && c.final(e.id) == "delivered" {
					v = append(v, fmt.Sprintf("%s (%s): an occurrence ended %s, %s holds its comment %d times", e.id, g, c.final(e.id), r.Kind, k))
				}
			}
			v = append(v, c.groupAnswers(e)...)
		}
	}
	summary := fmt.Sprintf("%d fingerprint groups: %d reports, %d tickets filed, %d occurrences (comments held per occurrence %s), %d groups closed by an update",
		len(groups), reports, tickets, occ, brief(comments), closes)
	if allowed != "" {
		summary += fmt.Sprintf("; %d second tickets %s", allowedN, allowed)
	}
	return property("one-ticket-per-fp", v, "%s; %d violations", summary, len(v))
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

// oneTicketPerFingerprint across hosts. The multi-host load sends no
// updates, so no group closes during the run and each must file one
// ticket; the reports of a fingerprint go through the round-robin proxy,
// so to every host. Reports are ordered by when the harness made them
// up (the hosts' ledgers have no common order). Decision 0195 leaves one
// window for a second ticket: a claim cut between its claim and its group
// write, then adopted as a plain create. Such a ticket is allowed only if
// an mcp-front was killed or its host removed while a call of the second
// create or of the ticket it doubles was in flight, and the summary
// counts it. The other window (a host lost between counting and
// rewriting) only overcounts occurrences, which the property does not
// check.
func (m *multiChecker) oneTicketPerFingerprint() Property {
	var kills []time.Time
	for _, e := range m.in.Events {
		if e.Kind == KindKill && (e.Component == CompFront || e.Cause == CauseRemoved) {
			kills = append(kills, e.At)
		}
	}
	span := map[string][2]time.Time{} // a request's first and last call
	for _, e := range m.in.Events {
		if e.Kind != KindCall || e.Mode == ModeConflict {
			continue
		}
		s, ok := span[e.RequestID]
		if !ok {
			s[0] = m.made[e.RequestID]
		}
		s[1] = e.At
		span[e.RequestID] = s
	}
	hit := func(id string) bool {
		s := span[id]
		return slices.ContainsFunc(kills, func(k time.Time) bool { return !k.Before(s[0]) && !k.After(s[1]) })
	}
	groups := m.groupHistories(func(id string) int64 {
		if m.in.DB.Rows[id] == nil {
			return 0
		}
		return m.made[id].UnixNano()
	})
	hosts := 0
	for _, es := range groups {
		seen := map[string]bool{}
		for _, e := range es {
			for _, r := range m.routes[e.id] {
				seen[r.Component] = true
			}
		}
		if len(seen) > 1 {
			hosts++
		}
	}
	p := m.fingerprintProperty(groups, func(id, open string) bool { return hit(id) || hit(open) },
		"allowed because an mcp-front was killed or its host removed while it or the ticket it doubles was in flight (decision 0195's adoption window)")
	p.Summary = fmt.Sprintf("%d groups reached more than one host; %s", hosts, p.Summary)
	return p
}
