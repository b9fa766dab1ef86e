package torture

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"ticketrelay/ticket"
)

// MultiInput is what the multi-host checker reads. Input.DB is the
// requests of the whole installation (merged): a ticket may live in any
// surviving host's ledger, or only in the lost host's and the cluster
// record; its delivery is the cluster record's. Input.Final is the first
// surviving host's find_request sweep.
type MultiInput struct {
	Input
	Hosts      []string                     // the surviving hosts
	Lost       string                       // the host removed for good
	Finals     map[string]map[string]string // find_request on each surviving host, by request id
	Ledgers    map[string]Snapshot          // each surviving host's SQLite file at the end
	LostLedger Snapshot                     // the lost host's, read when it was removed
	Cluster    map[string]*ClusterRecord    // the cluster record, by request id
	// NodeFaultsOnly: the fault phase had NATS node faults only
	// (Config.NodeFaultsOnly).
	NodeFaultsOnly bool `json:"node_faults_only,omitempty"`
	// HostDeadAfter is the hosts' -host-dead-after.
	HostDeadAfter time.Duration `json:"host_dead_after,omitempty"`
}

// merged is the installation's requests as one snapshot: every request a
// ledger holds or the cluster record says accepted, with the cluster
// record's delivery.
func (in MultiInput) merged() Snapshot {
	s := Snapshot{Rows: map[string]*Row{}}
	add := func(snap Snapshot) {
		for id, r := range snap.Rows {
			if cur := s.Rows[id]; cur != nil {
				cur.Published = cur.Published || r.Published
				continue
			}
			cp := *r
			s.Rows[id] = &cp
		}
		s.Orphans = append(s.Orphans, snap.Orphans...)
	}
	for _, h := range slices.Sorted(maps.Keys(in.Ledgers)) {
		add(in.Ledgers[h])
	}
	add(in.LostLedger)
	for id, cr := range in.Cluster {
		r := s.Rows[id]
		if r == nil {
			if cr.Phase != "accepted" {
				continue // claimed, committed nowhere: never acknowledged
			}
			r = cr.row(id)
			s.Rows[id] = r
		}
		r.Delivery = cr.Delivery
		r.Published = r.Published || cr.Delivery != nil
	}
	return s
}

// multiChecker is checker with what the multi-host properties add.
type multiChecker struct {
	*checker
	mi        MultiInput
	conflicts []Event            // answers to calls with other arguments
	routes    map[string][]Event // tools/call routes by request id
}

// MultiFigures are the figures of a multi-host run.
type MultiFigures struct {
	Calls, FirstAcceptances, Replays int
	ConflictCalls, ConflictsDetected int
	Duplicates, Lost, Uncertain      int
	// Kills by what they hit: n1..n3, or "h1/mcp-front"; the lost host's
	// two included.
	Kills          map[string]int
	FailpointKills map[string]int // by failpoint
	Stops, Cuts    map[string]int // SIGSTOPs and cut routes, by node
	// LostRows and LostUnpublished: the lost host's ledger when it was
	// removed.
	LostRows, LostUnpublished int
	// LongestGap is the longest time in the fault phase with no create
	// call accepted; LongestGapAfter, when it began and the faults around
	// it.
	LongestGap      time.Duration
	LongestGapAfter string
}

// CheckMulti evaluates the properties of a multi-host run.
func CheckMulti(in MultiInput) (Result, MultiFigures) {
	// The indexes of Check, without the calls made with other arguments
	// on purpose: those are checked by conflictsDetected.
	m := &multiChecker{mi: in, routes: map[string][]Event{}}
	m.checker = newChecker(in.Input, func(e Event) bool {
		switch {
		case e.Kind == KindCall && e.Mode == ModeConflict:
			if e.Outcome != OutAmbiguous && e.Outcome != OutUnavailable {
				m.conflicts = append(m.conflicts, e)
			}
			return true
		case e.Kind == KindRoute:
			m.routes[e.RequestID] = append(m.routes[e.RequestID], e)
			return true
		}
		return false
	})
	c := m.checker
	props := []Property{
		c.answersAgree(), m.acceptedDelivered(), c.keyedExactlyOnce(), c.unkeyedAtMostOnce(),
		c.ambiguousUncertain(), m.settled(), m.recordsAgree(), m.hostsAgree(), m.lostHost(), m.conflictsDetected(), m.processes(),
		c.commentsOnce(), m.updatesLast(), m.oneTicketPerFingerprint(),
	}
	if in.NodeFaultsOnly {
		props = append(props, m.noLiveHostAdopted(), m.noRefusalBeyondFailover())
	}
	fig := m.figures()
	props = append(props, Property{Name: "figures", OK: true, Summary: fig.String()})
	counts := c.counts()
	counts.FailpointKills = fig.FailpointKills
	counts.Crashes = 0
	for _, e := range in.Events {
		switch {
		case e.Kind != KindKill:
		case e.Cause == CauseRemoved:
			counts.Kills[e.Component]++
		case e.Cause == CauseCrash:
			counts.Crashes++
		}
	}
	return Result{Properties: props, Counts: counts}, fig
}

func (f MultiFigures) String() string {
	return fmt.Sprintf("calls=%d first-acceptances=%d replays=%d conflicts-detected=%d/%d duplicates=%d lost=%d uncertain=%d "+
		"kills=%s failpoint-kills=%s sigstops=%s cut-routes=%s lost-host-rows=%d (unpublished %d) longest-without-acceptance=%s (%s)",
		f.Calls, f.FirstAcceptances, f.Replays, f.ConflictsDetected, f.ConflictCalls, f.Duplicates, f.Lost, f.Uncertain,
		brief(f.Kills), brief(f.FailpointKills), brief(f.Stops), brief(f.Cuts), f.LostRows, f.LostUnpublished,
		f.LongestGap.Round(100*time.Millisecond), f.LongestGapAfter)
}

// want is the final status an accepted request must reach.
func (m *multiChecker) want(id string) string {
	if m.reqs[id].Keyed {
		return "delivered"
	}
	return "delivered or uncertain"
}

func doneStatus(keyed bool, st string) bool { return st == "delivered" || !keyed && st == "uncertain" }

// done reports whether st is where accepted request id may end: a
// comment, an update or an occurrence also fails with the ticket it acts
// on when that ticket's create ended without one.
func (m *multiChecker) done(id, st string) bool {
	r := m.reqs[id]
	return doneStatus(r.Keyed, st) || r.Action != "" && r.OnRequest != "" && st == "failed" && m.noTicket(r.OnRequest)
}

// lost lists the acknowledged requests (a create answered, first call or
// replay; or find_request knowing it) and the accepted ones (in a ledger
// or accepted in the cluster record) that some surviving host does not
// report delivered (or uncertain, without a key).
func (m *multiChecker) lostIDs() (lost []string, why map[string]string) {
	why = map[string]string{}
	for _, id := range m.accepted() {
		r := m.reqs[id]
		cr := m.mi.Cluster[id]
		var bad []string
		if cr == nil {
			bad = append(bad, "no cluster record")
		}
		for _, h := range m.mi.Hosts {
			if st := m.mi.Finals[h][id]; !m.done(id, st) {
				bad = append(bad, fmt.Sprintf("%s says %q", h, st))
			}
		}
		if len(bad) > 0 {
			lost = append(lost, id)
			why[id] = fmt.Sprintf("%s (%s, seen accepted %t): %s; want %s; %s", id, r.Tool, m.seenAccepted(id), strings.Join(bad, ", "), m.want(id), m.where(id))
		}
	}
	return lost, why
}

// where says where a request lives, for a violation's line.
func (m *multiChecker) where(id string) string {
	var parts []string
	if cr := m.mi.Cluster[id]; cr != nil {
		d := "no delivery"
		if cr.Delivery != nil {
			d = fmt.Sprintf("delivery %s after %d attempts by %s (%s)", cr.Delivery.State, cr.Delivery.Attempts, cr.By, cr.Delivery.LastError)
		}
		parts = append(parts, fmt.Sprintf("record %s by %s, %s", cr.Phase, cr.Host, d))
	} else {
		parts = append(parts, "no record")
	}
	for _, h := range slices.Sorted(maps.Keys(m.mi.Ledgers)) {
		if r := m.mi.Ledgers[h].Rows[id]; r != nil {
			parts = append(parts, fmt.Sprintf("in %s's ledger (published %t)", h, r.Published))
		}
	}
	if r := m.mi.LostLedger.Rows[id]; r != nil {
		parts = append(parts, fmt.Sprintf("in lost %s's ledger (published %t)", m.mi.Lost, r.Published))
	}
	parts = append(parts, fmt.Sprintf("%d items downstream", m.items(id)))
	return strings.Join(parts, "; ")
}

func (m *multiChecker) acceptedDelivered() Property {
	lost, why := m.lostIDs()
	var v []string
	seen, only := 0, 0
	for _, id := range m.accepted() {
		if m.seenAccepted(id) {
			seen++
		} else {
			only++
		}
	}
	for _, id := range lost {
		v = append(v, why[id])
	}
	return property("accepted-delivered", v, "%d requests seen accepted by a client, %d more accepted by the installation only; on every surviving host (%s): %d lost or not done",
		seen, only, strings.Join(m.mi.Hosts, " "), len(v))
}

func (m *multiChecker) settled() Property {
	var v []string
	counts := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(m.in.DB.Rows)) {
		cr := m.mi.Cluster[id]
		st := "no record"
		if cr != nil && cr.Delivery != nil {
			st = cr.Delivery.State
		} else if cr != nil {
			st = "no delivery"
		}
		counts[st]++
		if cr == nil || !cr.settled() {
			v = append(v, fmt.Sprintf("%s: not settled after the faults stopped: %s", id, m.where(id)))
		}
	}
	for _, h := range slices.Sorted(maps.Keys(m.mi.Ledgers)) {
		for _, id := range slices.Sorted(maps.Keys(m.mi.Ledgers[h].Rows)) {
			if !m.mi.Ledgers[h].Rows[id].Published {
				v = append(v, fmt.Sprintf("%s: never published by %s", id, h))
			}
		}
	}
	return property("settled", v, "%d accepted requests in the cluster record %s; %d not settled or not published", len(m.in.DB.Rows), brief(counts), len(v))
}

// recordsAgree checks every surviving ledger row and every cluster record
// against what the caller sent and what the fakes hold.
func (m *multiChecker) recordsAgree() Property {
	var v []string
	check := func(where, id string, r *Row) {
		req, sent := m.reqs[id]
		switch {
		case !sent:
			v = append(v, fmt.Sprintf("%s: %s holds a request no caller sent", id, where))
			return
		case req.Action != "":
			// A comment, an update, or an occurrence (a comment on the
			// ticket it joined).
			if r.HasTicket {
				v = append(v, fmt.Sprintf("%s: %s shows a %s as a ticket", id, where, req.Action))
			}
			if r.Kind != req.Action || r.OnRequest != req.OnRequest {
				v = append(v, fmt.Sprintf("%s: %s holds a %q on the ticket of %q, the caller sent a %s on %q", id, where, r.Kind, r.OnRequest, req.Action, req.OnRequest))
			}
		case !r.HasTicket:
			v = append(v, fmt.Sprintf("%s: %s has no ticket", id, where))
		case r.Title != req.Title:
			v = append(v, fmt.Sprintf("%s: %s has title %q, the caller sent %q", id, where, r.Title, req.Title))
		}
		if r.Tool != req.Tool || r.Target != req.Target {
			v = append(v, fmt.Sprintf("%s: %s says tool %s target %s, the caller used %s → %s", id, where, r.Tool, r.Target, req.Tool, req.Target))
		}
		if want := wantTicket(req); r.TicketID != want && !(m.occurrence[id] && r.TicketID == "") {
			v = append(v, fmt.Sprintf("%s: %s has ticket id %s, want %s", id, where, r.TicketID, want))
		}
	}
	rows := 0
	for _, h := range slices.Sorted(maps.Keys(m.mi.Ledgers)) {
		s := m.mi.Ledgers[h]
		for _, id := range slices.Sorted(maps.Keys(s.Rows)) {
			rows++
			r := s.Rows[id]
			check(h+"'s ledger", id, r)
			if !r.HasOutbox {
				v = append(v, fmt.Sprintf("%s: %s's ledger has no outbox row", id, h))
			}
			if why := m.republishedTooOften(id, r.unexplained()); why != "" {
				v = append(v, fmt.Sprintf("%s: %s's ledger: %s", id, h, why))
			}
			if cr := m.mi.Cluster[id]; cr == nil {
				v = append(v, fmt.Sprintf("%s: in %s's ledger, not in the cluster record", id, h))
			}
		}
		for _, o := range s.Orphans {
			v = append(v, h+": orphan: "+o)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.mi.Cluster)) {
		cr := m.mi.Cluster[id]
		check("the cluster record", id, cr.row(id))
		// A comment's or an update's delivery names no ticket.
		if d := cr.Delivery; d != nil && d.State == "delivered" && d.ExternalID != "" && m.reqs[id].Action == "" &&
			!slices.ContainsFunc(m.recs[id], func(x Record) bool { return x.ExternalID == d.ExternalID }) {
			v = append(v, fmt.Sprintf("%s: delivered as %s, but %s holds no item with that id", id, d.ExternalID, m.reqs[id].Kind))
		}
	}
	for _, p := range m.phantoms {
		v = append(v, fmt.Sprintf("%s holds an item of no request: %q", p.Kind, p.Title))
	}
	for _, id := range m.ids {
		if len(m.recs[id]) > 0 && m.in.DB.Rows[id] == nil {
			v = append(v, fmt.Sprintf("%s: %s holds an item of a request the installation never accepted: %s", id, m.reqs[id].Kind, m.where(id)))
		}
	}
	return property("records-agree", v, "%d surviving ledger rows, %d cluster records, %d target items; %d disagreements", rows, len(m.mi.Cluster), len(m.in.Records), len(v))
}

// hostsAgree: find_request on every surviving host says the same about
// every request, and what it says agrees with the downstream fakes.
func (m *multiChecker) hostsAgree() Property {
	var v []string
	for _, id := range m.ids {
		r := m.reqs[id]
		// An update leaves no item of its own: updates-last checks it.
		items, counted := m.items(id), r.Action != ActionUpdate
		var first string
		for i, h := range m.mi.Hosts {
			st := m.mi.Finals[h][id]
			if i == 0 {
				first = st
			} else if st != first {
				v = append(v, fmt.Sprintf("%s: %s says %q, %s says %q", id, m.mi.Hosts[0], first, h, st))
			}
			switch {
			case !counted:
			case st == "delivered" && items != 1:
				v = append(v, fmt.Sprintf("%s: %s says delivered, %s holds %d items", id, h, r.Kind, items))
			case st == "unknown" && items > 0:
				v = append(v, fmt.Sprintf("%s: %s says unknown, %s holds %d items", id, h, r.Kind, items))
			case items > 0 && st != "delivered" && st != "uncertain":
				v = append(v, fmt.Sprintf("%s: %s says %q, %s holds %d items", id, h, st, r.Kind, items))
			}
		}
	}
	return property("hosts-agree", v, "find_request on %d surviving hosts about %d requests against the downstream fakes; %d disagreements",
		len(m.mi.Hosts), len(m.ids), len(v))
}

// items counts what the fakes hold of id: the tickets of a create, the
// comments of a comment or an occurrence.
func (m *multiChecker) items(id string) int {
	if m.reqs[id].Action == ActionComment {
		return len(m.comments[id])
	}
	return len(m.recs[id])
}

// lostHost: every request the lost host had in its ledger when it was
// removed is delivered (or uncertain, without a key) by the others.
func (m *multiChecker) lostHost() Property {
	var v []string
	rows, unpub, adopted := 0, 0, 0
	for _, id := range slices.Sorted(maps.Keys(m.mi.LostLedger.Rows)) {
		rows++
		r := m.mi.LostLedger.Rows[id]
		if !r.Published {
			unpub++
		}
		cr := m.mi.Cluster[id]
		if cr != nil && cr.Host != m.mi.Lost {
			adopted++
		}
		for _, h := range m.mi.Hosts {
			if st := m.mi.Finals[h][id]; !m.done(id, st) {
				v = append(v, fmt.Sprintf("%s: accepted by lost %s (published %t); %s says %q, want %s; %s", id, m.mi.Lost, r.Published, h, st, m.want(id), m.where(id)))
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.mi.Cluster)) {
		if cr := m.mi.Cluster[id]; cr.Host == m.mi.Lost && !cr.settled() {
			v = append(v, fmt.Sprintf("%s: the cluster record still names lost %s and is not settled: %s", id, m.mi.Lost, m.where(id)))
		}
	}
	return property("lost-host", v, "%s removed for good with %d ledger rows (%d not yet published); %d records now held by a surviving host; %d not delivered",
		m.mi.Lost, rows, unpub, adopted, len(v))
}

// conflictsDetected: every call made with other arguments was answered
// idempotency_key_conflict naming the original ticket, on whichever host
// it landed.
func (m *multiChecker) conflictsDetected() Property {
	var v []string
	cross := 0
	for _, e := range m.conflicts {
		want := ticket.IDFor(e.RequestID)
		switch {
		case e.Outcome != OutConflict:
			v = append(v, fmt.Sprintf("%s: other arguments answered %s (%s%s), want idempotency_key_conflict; %s", e.RequestID, e.Outcome, e.TicketID, e.Err, m.where(e.RequestID)))
			continue
		case !strings.Contains(e.Err, want):
			v = append(v, fmt.Sprintf("%s: the conflict does not name ticket %s: %s", e.RequestID, want, e.Err))
		}
		if m.crossHost(e.RequestID) {
			cross++
		}
	}
	return property("conflicts-detected", v, "%d calls with a known request_id and other arguments answered: %d conflicts detected, %d of requests whose calls reached more than one host; %d not detected",
		len(m.conflicts), len(m.conflicts)-len(v), cross, len(v))
}

// crossHost reports whether the calls of id went to more than one host.
func (m *multiChecker) crossHost(id string) bool {
	hosts := map[string]bool{}
	for _, e := range m.routes[id] {
		hosts[e.Component] = true
	}
	return len(hosts) > 1
}

// killKey names what a kill hit: a NATS node (n1…), or a host's process
// (h1 mcp-front…).
func killKey(e Event) string {
	if e.Component == CompNATS {
		node, _, _ := strings.Cut(e.Detail, " ")
		return node
	}
	name := e.Detail
	if _, after, ok := strings.Cut(name, " "); ok && e.Cause == CauseFailpoint {
		name = after // "<failpoint> <process>"
	}
	host, _, _ := strings.Cut(name, "-")
	return host + "/" + e.Component
}

// faultCounts counts the kills and faults by what they hit.
func (m *multiChecker) faultCounts() (kills, fps, stops, cuts map[string]int, v []string) {
	kills, fps, stops, cuts = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, e := range m.in.Events {
		switch {
		case e.Kind == KindKill && (e.Cause == CauseScheduler || e.Cause == CauseDisarm || e.Cause == CauseRemoved):
			kills[killKey(e)]++
		case e.Kind == KindKill && e.Cause == CauseFailpoint:
			fp, _, _ := strings.Cut(e.Detail, " ")
			fps[fp]++
		case e.Kind == KindKill:
			v = append(v, fmt.Sprintf("%s (%s) exited on its own: %s", e.Component, e.Detail, e.Err))
		case e.Kind == KindFault && e.Cause == CauseSIGSTOP:
			stops[killKey(e)]++
		case e.Kind == KindFault && e.Cause == CausePartition:
			cuts[killKey(e)]++
		}
	}
	return kills, fps, stops, cuts, v
}

func (m *multiChecker) processes() Property {
	kills, fps, stops, cuts, v := m.faultCounts()
	for _, s := range m.in.Shutdown {
		v = append(v, "at the end: "+s)
	}
	return property("processes", v, "%d SIGKILLs %s, %d failpoint kills %s, %d SIGSTOPs %s, %d routes cut %s; %d other exits or unclean stops",
		sum(kills), brief(kills), sum(fps), brief(fps), sum(stops), brief(stops), sum(cuts), brief(cuts), len(v))
}

// longestGap is the longest time during the faults with no create call
// accepted (first call or replay), and what happened last before it.
func (m *multiChecker) longestGap() (gap time.Duration, at time.Duration, before string) {
	var start, end time.Time
	var acc []time.Time
	for _, e := range m.in.Events {
		switch {
		case e.Kind == KindPhase && e.Detail == "faults started":
			start = e.At
		case e.Kind == KindPhase && e.Detail == "fault phase over":
			end = e.At
		case e.Kind == KindCall && e.Outcome == OutAccepted && e.Mode != ModeConflict:
			acc = append(acc, e.At)
		}
	}
	if start.IsZero() || end.IsZero() {
		return 0, 0, ""
	}
	sort.Slice(acc, func(i, j int) bool { return acc[i].Before(acc[j]) })
	prev := start
	var from time.Time
	for _, t := range append(acc, end) {
		if t.Before(start) || t.After(end) {
			continue
		}
		if d := t.Sub(prev); d > gap {
			gap, from = d, prev
		}
		prev = t
	}
	// The faults from shortly before the gap to its end.
	var faults []string
	for _, e := range m.in.Events {
		if (e.Kind == KindKill || e.Kind == KindFault) && !e.At.After(from.Add(gap)) && e.At.After(from.Add(-5*time.Second)) {
			faults = append(faults, fmt.Sprintf("%+.1fs %s %s %s", e.At.Sub(from).Seconds(), e.Component, e.Cause, e.Detail))
		}
	}
	before = strings.Join(faults, ", ")
	return gap, from.Sub(start), before
}

// figures sums the run up.
func (m *multiChecker) figures() MultiFigures {
	var f MultiFigures
	for _, e := range m.in.Events {
		if e.Kind == KindCall {
			f.Calls++
			if e.Outcome == OutAccepted && e.Mode != ModeConflict {
				if e.Replayed {
					f.Replays++
				} else {
					f.FirstAcceptances++
				}
			}
		}
	}
	for _, id := range m.ids {
		if m.items(id) > 1 {
			f.Duplicates++
		}
		if m.final(id) == "uncertain" {
			f.Uncertain++
		}
	}
	lost, _ := m.lostIDs()
	f.Lost = len(lost)
	f.ConflictCalls = len(m.conflicts)
	for _, e := range m.conflicts {
		if e.Outcome == OutConflict {
			f.ConflictsDetected++
		}
	}
	f.Kills, f.FailpointKills, f.Stops, f.Cuts, _ = m.faultCounts()
	f.LostRows, f.LostUnpublished = len(m.mi.LostLedger.Rows), unpublished(m.mi.LostLedger)
	var at time.Duration
	f.LongestGap, at, f.LongestGapAfter = m.longestGap()
	f.LongestGapAfter = fmt.Sprintf("from +%s; faults around it: %s", at.Round(100*time.Millisecond), f.LongestGapAfter)
	return f
}

// noLiveHostAdopted: a host is adopted only once it was lost. The one host
// lost for good may be adopted after its dispatcher was killed; any other
// adoption is of a live host (checked in a run with node faults only,
// which has no host fault before the loss).
func (m *multiChecker) noLiveHostAdopted() Property {
	var lostAt time.Time
	for _, e := range m.in.Events {
		if e.Kind == KindKill && e.Cause == CauseRemoved && strings.HasPrefix(e.Detail, m.mi.Lost) && lostAt.IsZero() {
			lostAt = e.At
		}
		if e.Kind == KindFault && e.Cause == CauseRemoved && e.Component == m.mi.Lost && lostAt.IsZero() {
			lostAt = e.At
		}
	}
	var v []string
	seen := map[string]bool{}
	n := 0
	var adoptedAt time.Time
	for _, e := range m.in.Events {
		if e.Kind != KindHostState {
			continue
		}
		n++
		lost := e.Component == m.mi.Lost && !lostAt.IsZero() && !e.At.Before(lostAt)
		if lost && (adoptedAt.IsZero() || e.At.Before(adoptedAt)) {
			adoptedAt = e.At
		}
		if key := e.Component + e.Cause + e.Detail + e.At.String(); !lost && !seen[key] {
			seen[key] = true
			v = append(v, fmt.Sprintf("%s: host %s marked %s %s while it was live", e.At.Format("15:04:05.000"), e.Component, e.Cause, e.Detail))
		}
	}
	// The loss itself must be seen adopted, within the documented bound
	// (-host-dead-after and five heartbeat periods): else the watcher saw
	// nothing, and the property above proves nothing.
	bound := m.mi.HostDeadAfter + 5*m.mi.HostDeadAfter/6
	took := adoptedAt.Sub(lostAt)
	switch {
	case adoptedAt.IsZero():
		v = append(v, fmt.Sprintf("no adoption of the host lost for good (%s) was seen", m.mi.Lost))
	case bound > 0 && took > bound:
		v = append(v, fmt.Sprintf("the host lost for good (%s) was adopted %s after its loss, beyond the bound of %s", m.mi.Lost, took.Round(100*time.Millisecond), bound))
	}
	return property("no-live-host-adopted", v, "%d adoption marks seen; the host lost for good (%s) adopted %s after its loss (bound %s), no other",
		n, m.mi.Lost, took.Round(100*time.Millisecond), bound)
}

// noRefusalBeyondFailover: with node faults only, no live host refuses a
// create for its dispatcher, and acceptance never stops longer than the
// failover bound.
func (m *multiChecker) noRefusalBeyondFailover() Property {
	var v []string
	refused := 0
	for _, e := range m.in.Events {
		if e.Kind == KindCall && strings.Contains(e.Err, "dispatcher is not running") {
			refused++
			v = append(v, fmt.Sprintf("%s: %s refused (its host's dispatcher said not running): %s", e.At.Format("15:04:05.000"), e.RequestID, e.Err))
		}
	}
	gap, at, before := m.longestGap()
	if gap > FailoverBound {
		v = append(v, fmt.Sprintf("no create accepted for %s from +%s (bound %s); faults around it: %s", gap.Round(100*time.Millisecond),
			at.Round(100*time.Millisecond), FailoverBound, before))
	}
	return property("no-refusal-beyond-failover", v, "longest time without an acceptance %s (bound %s); %d refusals for a dispatcher not running",
		gap.Round(100*time.Millisecond), FailoverBound, refused)
}

// spans are when each request of the history may have been decided: from
// when the harness made it up to the end of its last call (calls with
// other arguments aside).
func (m *multiChecker) spans() map[string]span {
	out := map[string]span{}
	for id, at := range m.made {
		out[id] = point(at.UnixNano())
	}
	for _, e := range m.in.Events {
		if e.Kind != KindCall || e.Mode == ModeConflict {
			continue
		}
		if s, ok := out[e.RequestID]; ok {
			s.hi = max(s.hi, e.At.UnixNano())
			out[e.RequestID] = s
		}
	}
	return out
}

// oneTicketPerFingerprint across hosts: the reports of a fingerprint go
// through the round-robin proxy, so to every host, and so do the updates
// closing its tickets. The hosts' ledgers share no order: a request is
// placed by its span, and two whose spans overlap may have been decided
// in either order. A claim cut between its claim and its group decision
// is decided by whoever takes it over or adopts it (decision 0188), so
// every second ticket of an open group is a violation. An occurrence
// count one too high (0188's limit) is not checked here.
func (m *multiChecker) oneTicketPerFingerprint() Property {
	spans := m.spans()
	groups := m.groupHistories(func(id string) (span, bool) {
		s, ok := spans[id]
		return s, ok && m.in.DB.Rows[id] != nil
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
	p := m.fingerprintProperty(groups)
	p.Summary = fmt.Sprintf("%d groups reached more than one host; %s", hosts, p.Summary)
	return p
}

// updatesLast across hosts: "last" is the order in which the harness made
// the updates up. A caller updates only its own tickets, each update once
// the one before was acknowledged (or abandoned at the deadline), so that
// is the order of the acknowledgements; the hosts' ledgers share none.
func (m *multiChecker) updatesLast() Property {
	return m.updatesLastBy(func(id string) int64 { return m.made[id].UnixNano() }, m.acceptedOn)
}

// acceptedOn names the ledger that holds request id: a surviving host's,
// the lost host's, or none (the cluster record only).
func (m *multiChecker) acceptedOn(id string) string {
	for _, h := range slices.Sorted(maps.Keys(m.mi.Ledgers)) {
		if m.mi.Ledgers[h].Rows[id] != nil {
			return h
		}
	}
	if m.mi.LostLedger.Rows[id] != nil {
		return m.mi.Lost + " (lost)"
	}
	return "the cluster record only"
}
