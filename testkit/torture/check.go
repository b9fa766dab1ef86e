package torture

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Input is everything the checker reads: the history, what find_request
// answered after the run, what the fakes hold and the SQLite file.
type Input struct {
	Events []Event
	// Final is find_request's answer for each request id after the run
	// ("" or missing: no answer).
	Final   map[string]string
	Records []Record
	DB      Snapshot
	// Shutdown lists the processes that did not stop cleanly at the end.
	Shutdown []string
	// Beyond is what the fakes hold of comments and updates.
	Beyond Beyond
	// FakeFaults counts the faults the fakes were told to inject, by name.
	FakeFaults map[string]int
	// PowerCut is what the power-cut mode saw at its cuts (nil in the
	// other mode).
	PowerCut *PowerCutInput `json:",omitempty"`
}

// Property is the verdict on one property.
type Property struct {
	Name       string
	OK         bool
	Summary    string
	Violations []string
}

// Counts describe a run, so that it can be quoted.
type Counts struct {
	Requests, Accepted, LedgerRows                  int
	Comments, Updates                               int // requests of each kind, among Requests
	Calls, Retries, Replays, Hedges, Cuts, Timeouts int
	Finds                                           int
	Delivered, Uncertain, Failed                    int
	Kills                                           map[string]int // by component: SIGKILLs sent by the harness
	FailpointKills                                  map[string]int // by failpoint
	StreamFaults                                    map[string]int // deletions and purges of the stream done (failed ones aside)
	Crashes                                         int
	Records                                         int
	FakeFaults                                      map[string]int
}

// Result is the checker's verdict.
type Result struct {
	Properties []Property
	Counts     Counts
}

// OK reports whether every property holds.
func (r Result) OK() bool {
	for _, p := range r.Properties {
		if !p.OK {
			return false
		}
	}
	return true
}

// Lines renders one line per property (and up to maxViolations of its
// violations, indented), then the counts.
func (r Result) Lines(maxViolations int) []string {
	var out []string
	for _, p := range r.Properties {
		verdict := "PASS"
		if !p.OK {
			verdict = "FAIL"
		}
		out = append(out, fmt.Sprintf("%s %-22s %s", verdict, p.Name, p.Summary))
		for i, v := range p.Violations {
			if i == maxViolations {
				out = append(out, fmt.Sprintf("     … and %d more", len(p.Violations)-i))
				break
			}
			out = append(out, "     - "+v)
		}
	}
	return append(out, r.Counts.String())
}

func (c Counts) String() string {
	return fmt.Sprintf("counts: requests=%d (comments=%d updates=%d) accepted=%d ledger=%d calls=%d retries=%d replays=%d hedges=%d cuts=%d timeouts=%d finds=%d "+
		"delivered=%d uncertain=%d failed=%d kills=%d %s failpoint-kills=%d %s stream-faults=%d %s crashes=%d fake-faults=%d %s",
		c.Requests, c.Comments, c.Updates, c.Accepted, c.LedgerRows, c.Calls, c.Retries, c.Replays, c.Hedges, c.Cuts, c.Timeouts, c.Finds,
		c.Delivered, c.Uncertain, c.Failed, sum(c.Kills), brief(c.Kills), sum(c.FailpointKills), brief(c.FailpointKills),
		sum(c.StreamFaults), brief(c.StreamFaults), c.Crashes, sum(c.FakeFaults), brief(c.FakeFaults))
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func brief(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// checker holds the indexes the properties share.
type checker struct {
	in       Input
	reqs     map[string]Request
	ids      []string             // every request id sent, sorted
	answers  map[string][]Event   // accepted create answers
	known    map[string]bool      // find_request said known
	bad      map[string][]Event   // conflicts and refusals
	recs     map[string][]Record  // fake items by request id
	phantoms []Record             // fake items of no request
	made     map[string]time.Time // when the harness made each request up
	faults   []time.Time          // when it deleted or purged the stream (or tried to)
	// Comments by request id, the comments of no comment request, and
	// the tickets' fields by kind/create request id.
	comments      map[string][]CommentRecord
	strayComments []CommentRecord
	states        map[string]TicketState
	// occurrence: fingerprinted creates the ledger stored as occurrence
	// comments (fingerprint.go); c.reqs holds them as those comments.
	occurrence map[string]bool
}

// newChecker indexes in's events and records. other, if not nil, sees
// every event first and keeps those it answers true for out of the
// indexes.
func newChecker(in Input, other func(Event) bool) *checker {
	c := &checker{in: in, reqs: map[string]Request{}, answers: map[string][]Event{}, known: map[string]bool{},
		bad: map[string][]Event{}, recs: map[string][]Record{}, made: map[string]time.Time{}}
	for _, e := range in.Events {
		if other != nil && other(e) {
			continue
		}
		switch {
		case e.Kind == KindRequest && e.Request != nil:
			c.reqs[e.Request.ID] = *e.Request
			c.made[e.Request.ID] = e.At
		case e.Kind == KindStream:
			c.faults = append(c.faults, e.At)
		case e.Kind == KindCall && e.Outcome == OutAccepted:
			c.answers[e.RequestID] = append(c.answers[e.RequestID], e)
		case e.Kind == KindCall && (e.Outcome == OutConflict || e.Outcome == OutInvalid):
			c.bad[e.RequestID] = append(c.bad[e.RequestID], e)
		case e.Kind == KindFind && e.Outcome == OutKnown:
			c.known[e.RequestID] = true
		}
	}
	c.ids = slices.Sorted(maps.Keys(c.reqs))
	for _, r := range in.Records {
		if _, ok := c.reqs[r.RequestID]; !ok {
			c.phantoms = append(c.phantoms, r)
			continue
		}
		c.recs[r.RequestID] = append(c.recs[r.RequestID], r)
	}
	c.occurrences()
	c.comments, c.states = map[string][]CommentRecord{}, map[string]TicketState{}
	for _, x := range in.Beyond.Comments {
		if c.reqs[x.RequestID].Action != ActionComment {
			c.strayComments = append(c.strayComments, x)
			continue
		}
		c.comments[x.RequestID] = append(c.comments[x.RequestID], x)
	}
	for _, st := range in.Beyond.States {
		c.states[st.Target+"/"+st.RequestID] = st
	}
	return c
}

// Check evaluates every property.
func Check(in Input) Result {
	c := newChecker(in, nil)
	props := []Property{
		c.answersAgree(), c.acceptedDelivered(), c.keyedExactlyOnce(), c.unkeyedAtMostOnce(),
		c.ambiguousUncertain(), c.settled(), c.recordsAgree(), c.processes(),
		c.commentsOnce(), c.updatesLast(), c.oneTicketPerFingerprint(),
	}
	if in.PowerCut != nil {
		props = append(props, c.powerCut()...)
	}
	return Result{Properties: props, Counts: c.counts()}
}

// seenAccepted reports whether any client saw id accepted: a create
// result, or find_request knowing it.
func (c *checker) seenAccepted(id string) bool { return len(c.answers[id]) > 0 || c.known[id] }

// accepted are the requests the system accepted: seen accepted by a
// client, or committed to the ledger.
func (c *checker) accepted() []string {
	var out []string
	for _, id := range c.ids {
		if c.seenAccepted(id) || c.in.DB.Rows[id] != nil {
			out = append(out, id)
		}
	}
	return out
}

// final is find_request's last answer about id (or, without one, what the
// ledger says).
func (c *checker) final(id string) string {
	if s := c.in.Final[id]; s != "" {
		return s
	}
	if r := c.in.DB.Rows[id]; r != nil {
		return r.status()
	}
	return "unknown"
}

func (c *checker) counts() Counts {
	n := Counts{Requests: len(c.reqs), LedgerRows: len(c.in.DB.Rows), Records: len(c.in.Records),
		Kills: map[string]int{}, FailpointKills: map[string]int{}, StreamFaults: map[string]int{}, FakeFaults: c.in.FakeFaults}
	lastAttempt := map[string]int{}
	for _, e := range c.in.Events {
		switch e.Kind {
		case KindCall:
			n.Calls++
			switch e.Mode {
			case ModeHedge:
				n.Hedges++
			case ModeCut:
				n.Cuts++
			case ModeTimeout:
				n.Timeouts++
			}
			if e.Outcome == OutAccepted && e.Replayed {
				n.Replays++
			}
			if e.Mode != ModeReplay {
				lastAttempt[e.RequestID] = max(lastAttempt[e.RequestID], e.Attempt)
			}
		case KindFind:
			n.Finds++
		case KindStream:
			if e.Err == "" {
				n.StreamFaults[e.Detail]++
			}
		case KindKill:
			switch e.Cause {
			case CauseScheduler, CauseDisarm, CausePowerCut:
				n.Kills[e.Component]++
			case CauseFailpoint:
				n.FailpointKills[e.Detail]++
			default:
				n.Crashes++
			}
		}
	}
	for _, a := range lastAttempt {
		n.Retries += a - 1
	}
	for _, id := range c.ids {
		if c.seenAccepted(id) {
			n.Accepted++
		}
		switch c.reqs[id].Action {
		case ActionComment:
			n.Comments++
		case ActionUpdate:
			n.Updates++
		}
	}
	for id := range c.in.DB.Rows {
		switch c.final(id) {
		case "delivered":
			n.Delivered++
		case "uncertain":
			n.Uncertain++
		case "failed":
			n.Failed++
		}
	}
	return n
}
