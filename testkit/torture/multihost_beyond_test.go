package torture_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/torture"
	"ticketrelay/ticket"
)

// Across hosts the checker orders requests by when the harness made them
// up and when their last call ended (the hosts' ledgers share no order).
// retime gives each request of spans its span: its request event at lo,
// its calls at hi, in seconds from the history's start.
func retime(in *torture.Input, spans map[string][2]float64) {
	t0 := in.Events[0].At
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for i, e := range in.Events {
		s, ok := spans[e.RequestID]
		switch {
		case !ok:
		case e.Kind == torture.KindRequest:
			in.Events[i].At = at(s[0])
		case e.Kind == torture.KindCall:
			in.Events[i].At = at(s[1])
		}
	}
}

// multiOf makes a two-host run's input of in: without its mcp-front kill
// unless frontKillAt >= 0, then one at that second.
func multiOf(in torture.Input, frontKillAt float64) torture.MultiInput {
	t0 := in.Events[0].At
	in.Events = slices.DeleteFunc(in.Events, func(e torture.Event) bool { return e.Kind == torture.KindKill && e.Component == torture.CompFront })
	if frontKillAt >= 0 {
		in.Events = append(in.Events, torture.Event{At: t0.Add(time.Duration(frontKillAt * float64(time.Second))), Kind: torture.KindKill,
			Component: torture.CompFront, Cause: torture.CauseScheduler, Detail: "h2-mcp-front-1"})
	}
	return torture.MultiInput{Input: in, Hosts: []string{"h1", "h2"}, Lost: "h3"}
}

// multiBeyond is beyondInput across hosts: up1 accepted on h2 with the
// higher ledger id, up2 on h1 with the lower one, made up (and
// acknowledged) in that order; the ticket shows up2's status.
func multiBeyond() torture.MultiInput {
	in := beyondInput()
	retime(&in, map[string][2]float64{up1: {10, 11}, up2: {12, 13}})
	in.DB.Rows[up1].Seq, in.DB.Rows[up2].Seq = 50, 3
	m := multiOf(in, -1)
	m.Ledgers = map[string]torture.Snapshot{
		"h1": {Rows: map[string]*torture.Row{up2: in.DB.Rows[up2]}},
		"h2": {Rows: map[string]*torture.Row{up1: in.DB.Rows[up1]}},
	}
	return m
}

// TestCheckMultiCommentsAndUpdates: comments-once and updates-last hold
// across hosts, "last" by the callers' acknowledgements, and fail when
// broken.
func TestCheckMultiCommentsAndUpdates(t *testing.T) {
	for _, name := range []string{"comments-once", "updates-last"} {
		if p := propertyOf(t, multiBeyond(), name); !p.OK {
			t.Errorf("%s fails a good run: %s %v", name, p.Summary, p.Violations)
		}
	}
	applied := multiBeyond()
	applied.Beyond.States[0].Status = "closed" // up1 applied after up2
	p := propertyOf(t, applied, "updates-last")
	if want := k2 + " (zendesk, 2 updates, the last " + up2 + "): status closed, want open; accepted on h2, h1"; p.OK || !strings.Contains(strings.Join(p.Violations, "\n"), want) {
		t.Errorf("updates-last of an update applied out of order across hosts: %+v, want %q", p, want)
	}
	twice := multiBeyond()
	twice.Beyond.Comments = append(twice.Beyond.Comments, twice.Beyond.Comments[0])
	if p := propertyOf(t, twice, "comments-once"); p.OK || !strings.Contains(strings.Join(p.Violations, "\n"), cm1+": webhook holds the comment 2 times") {
		t.Errorf("comments-once of a comment held twice: %+v", p)
	}
	// A comment the cluster record holds is checked as a comment.
	rec := multiBeyond()
	rec.Ledgers = nil
	rec.Cluster = map[string]*torture.ClusterRecord{cm1: {Phase: "accepted", Host: "h1", TicketID: ticket.IDFor(k1), Tool: torture.CommentTool,
		Target: "webhook", Kind: torture.ActionComment, OnRequest: k1}}
	if p := propertyOf(t, rec, "records-agree"); !p.OK {
		t.Errorf("records-agree of a comment's cluster record: %+v", p)
	}
	rec.Cluster[cm1].Kind = ""
	if p := propertyOf(t, rec, "records-agree"); p.OK || !strings.Contains(strings.Join(p.Violations, "\n"), cm1+": the cluster record shows a comment as a ticket") {
		t.Errorf("records-agree of a comment's cluster record holding a create: %+v", p)
	}
}

// multiGroup is fingerprintInput across hosts: fp1 files the ticket, fp2
// joins it, fpClose closes it, fp3 files the next; spans in seconds.
func multiGroup(spans map[string][2]float64, frontKillAt float64) torture.MultiInput {
	in := fingerprintInput()
	all := map[string][2]float64{fp1: {0, 1}, fp2: {2, 3}, fpClose: {4, 5}, fp3: {6, 7}}
	for id, s := range spans {
		all[id] = s
	}
	retime(&in, all)
	return multiOf(in, frontKillAt)
}

// TestCheckMultiFingerprintCloses: across hosts a closed group's next
// report files a new ticket; requests whose spans overlap may have been
// decided in either order, and the property fails on every order no
// overlap explains.
func TestCheckMultiFingerprintCloses(t *testing.T) {
	for name, spans := range map[string]map[string][2]float64{
		"in order": nil,
		"the next ticket filed while the close was in flight":   {fp3: {4.5, 6}},
		"an occurrence joined while the close was in flight":    {fp2: {3, 4.5}},
		"the close's answer came after the next ticket's":       {fpClose: {4, 8}},
		"an occurrence joined while the first report was filed": {fp2: {0.5, 0.8}},
	} {
		p := propertyOf(t, multiGroup(spans, -1), "one-ticket-per-fp")
		if !p.OK || !strings.Contains(p.Summary, "2 tickets filed, 1 occurrences (comments held per occurrence (1:1)), 1 groups closed by an update; 0 violations") {
			t.Errorf("%s: %+v", name, p)
		}
	}
	for _, tc := range []struct {
		name  string
		spans map[string][2]float64
		says  string
	}{
		{"the next ticket filed before the close was sent", map[string][2]float64{fp3: {2.5, 3.5}},
			fp3 + " (zendesk/" + fpName + "): filed a second ticket while the group's ticket of " + fp1 + " was open"},
		{"an occurrence joined the closed ticket", map[string][2]float64{fp2: {5.5, 5.8}},
			fp2 + " (zendesk/" + fpName + "): an occurrence of the ticket of " + fp1 + ", whose group the update " + fpClose + " had closed before"},
		{"an occurrence joined the old ticket after the next was filed", map[string][2]float64{fp2: {8, 9}, fpClose: {4, 20}},
			fp2 + " (zendesk/" + fpName + "): an occurrence of the ticket of " + fp1 + ", but the open ticket was " + fp3},
		{"an occurrence joined a ticket filed after it", map[string][2]float64{fp1: {4, 4.2}, fp2: {2, 3}, fpClose: {5, 5.5}},
			fp2 + " (zendesk/" + fpName + "): an occurrence of the ticket of " + fp1 + ", filed after it"},
	} {
		p := propertyOf(t, multiGroup(tc.spans, -1), "one-ticket-per-fp")
		if p.OK || !strings.Contains(strings.Join(p.Violations, "\n"), tc.says) {
			t.Errorf("%s: %+v, want a violation saying %q", tc.name, p, tc.says)
		}
	}
	// A second ticket while a front was killed in flight: a violation too
	// (adoption decides a cut report's group, decision 0188).
	p := propertyOf(t, multiGroup(map[string][2]float64{fp3: {2.5, 3.5}}, 3), "one-ticket-per-fp")
	if p.OK || !strings.Contains(strings.Join(p.Violations, "\n"), fp3+" (zendesk/"+fpName+"): filed a second ticket") {
		t.Errorf("a second ticket with a front killed in flight: %+v", p)
	}
}
