package torture_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/torture"
	"ticketrelay/ticket"
)

// A synthetic history: four requests, each seen accepted and settled.
//   - k1 → webhook (keyed), delivered once
//   - k2 → zendesk (keyed), delivered once
//   - k3 → pagerduty (keyed), delivered once (the first answer was lost: a
//     cut call, then a replay)
//   - u1 → slack (no key), the item arrived but the answer was lost: uncertain
const (
	k1 = "trq-5eed-c01-r0001"
	k2 = "trq-5eed-c01-r0002"
	k3 = "trq-5eed-c02-r0001"
	u1 = "trq-5eed-c02-r0002"
)

var kindOf = map[string]string{k1: "webhook", k2: "zendesk", k3: "pagerduty", u1: "slack"}

func title(id string) string { return "torture " + id + ": disk full" }

func goodInput() torture.Input {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	in := torture.Input{Final: map[string]string{}, DB: torture.Snapshot{Rows: map[string]*torture.Row{}}}
	ext := map[string]string{k1: "dlv_1", k2: "1", k3: "torture:" + k3, u1: ""}
	for _, id := range slices.Sorted(maps.Keys(kindOf)) {
		kind := kindOf[id]
		r := torture.Request{ID: id, Tool: torture.ToolFor(kind), Target: kind, Kind: kind, Keyed: kind != "slack", Title: title(id)}
		in.Events = append(in.Events, torture.Event{At: at, Kind: torture.KindRequest, Caller: 1, Request: &r, RequestID: id})
		if id == k3 {
			in.Events = append(in.Events, torture.Event{At: at, Kind: torture.KindCall, RequestID: id, Attempt: 1, Mode: torture.ModeCut,
				Outcome: torture.OutAmbiguous, Err: "connection reset by peer"})
		}
		in.Events = append(in.Events, torture.Event{At: at, Kind: torture.KindCall, RequestID: id, Attempt: 1 + btoi(id == k3),
			Mode: torture.ModeNormal, Outcome: torture.OutAccepted, TicketID: ticket.IDFor(id), Replayed: id == k3})
		state := "delivered"
		if id == u1 {
			state = "uncertain"
		}
		in.DB.Rows[id] = &torture.Row{RequestID: id, Tool: r.Tool, Target: kind, TicketID: ticket.IDFor(id), HasTicket: true, Title: r.Title,
			HasOutbox: true, Subject: "tickets." + kind, Published: true,
			Delivery: &torture.DeliveryRow{Target: kind, State: state, Attempts: 1, ExternalID: ext[id]}}
		in.Final[id] = state
		in.Records = append(in.Records, torture.Record{Target: kind, Kind: kind, RequestID: id, ExternalID: ext[id], Applied: 1, Title: title(id)})
	}
	in.Events = append(in.Events,
		torture.Event{At: at, Kind: torture.KindKill, Component: torture.CompDispatcher, Cause: torture.CauseScheduler},
		torture.Event{At: at, Kind: torture.KindKill, Component: torture.CompFront, Cause: torture.CauseFailpoint, Detail: "front.after-commit"})
	return in
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// failing returns the names of the properties that do not hold, and all
// their violations in one string.
func failing(res torture.Result) ([]string, string) {
	var names, vs []string
	for _, p := range res.Properties {
		if !p.OK {
			names = append(names, p.Name)
			vs = append(vs, p.Violations...)
		}
	}
	return names, strings.Join(vs, "\n")
}

func TestCheckPassesAGoodHistory(t *testing.T) {
	res := torture.Check(goodInput())
	for _, l := range res.Lines(10) {
		t.Log(l)
	}
	if names, vs := failing(res); len(names) > 0 {
		t.Fatalf("a good history fails %v:\n%s", names, vs)
	}
	if len(res.Properties) != 11 {
		t.Errorf("%d properties, want 11", len(res.Properties))
	}
	c := res.Counts
	if c.Requests != 4 || c.Accepted != 4 || c.Replays != 1 || c.Retries != 1 || c.Cuts != 1 || c.Delivered != 3 || c.Uncertain != 1 ||
		c.Kills[torture.CompDispatcher] != 1 || c.FailpointKills["front.after-commit"] != 1 {
		t.Errorf("counts: %s", c)
	}
}

// A deletion or a purge of the stream lets each request sent before it be
// published again once; a failed attempt counts too (it may have happened).
func TestCheckAllowsARepublishPerStreamFault(t *testing.T) {
	in := goodInput()
	at := in.Events[0].At
	in.Events = append(in.Events,
		torture.Event{At: at.Add(-time.Second), Kind: torture.KindStream, Detail: torture.StreamDelete},
		torture.Event{At: at.Add(time.Second), Kind: torture.KindStream, Detail: torture.StreamPurge},
		torture.Event{At: at.Add(2 * time.Second), Kind: torture.KindStream, Detail: torture.StreamDelete, Err: "nats: timeout"})
	in.DB.Rows[k1].Generation = 2
	res := torture.Check(in)
	if names, vs := failing(res); len(names) > 0 {
		t.Fatalf("a history with a republish per fault fails %v:\n%s", names, vs)
	}
	if got := res.Counts.StreamFaults; got[torture.StreamPurge] != 1 || got[torture.StreamDelete] != 1 {
		t.Errorf("stream faults counted %v, want one purge and one deletion (the failed one aside)", got)
	}
}

// TestCheckCanFail feeds the checker histories that break one property
// each, and one (the example) that breaks two at once.
func TestCheckCanFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(in *torture.Input)
		want   []string // the failing properties
		says   []string // words the violations must contain
	}{
		{
			name: "duplicate keyed delivery and lost accepted request",
			break_: func(in *torture.Input) {
				in.Records = append(in.Records, torture.Record{Target: "webhook", Kind: "webhook", RequestID: k1, ExternalID: "dlv_2", Applied: 1, Title: title(k1)})
				delete(in.DB.Rows, k2)
				delete(in.Final, k2)
				in.Records = slices.DeleteFunc(in.Records, func(r torture.Record) bool { return r.RequestID == k2 })
			},
			want: []string{"accepted-delivered", "keyed-exactly-once"},
			says: []string{k1 + ": webhook received it 2 times", k2 + " (ticket_zendesk): a client saw it accepted, but the ledger has no row"},
		},
		{
			name: "unkeyed target received it twice",
			break_: func(in *torture.Input) {
				in.Records = append(in.Records, torture.Record{Target: "slack", Kind: "slack", RequestID: u1, Applied: 1, Title: title(u1)})
			},
			want: []string{"unkeyed-at-most-once"},
			says: []string{u1 + ": slack received it 2 times"},
		},
		{
			name: "ambiguous attempt reported failed, not uncertain",
			break_: func(in *torture.Input) {
				in.DB.Rows[u1].Delivery.State = "failed"
				in.Final[u1] = "failed"
			},
			want: []string{"accepted-delivered", "ambiguous-uncertain"},
			says: []string{u1 + ": slack holds the item but find_request says failed, want uncertain"},
		},
		{
			name: "request stuck in the outbox",
			break_: func(in *torture.Input) {
				row := in.DB.Rows[k3]
				row.Published, row.Delivery = false, nil
				in.Final[k3] = "queued"
				in.Records = slices.DeleteFunc(in.Records, func(r torture.Record) bool { return r.RequestID == k3 })
			},
			want: []string{"accepted-delivered", "keyed-exactly-once", "settled"},
			says: []string{k3 + ": find_request says queued after the faults stopped; published=false, no delivery record"},
		},
		{
			name: "two first acceptances and a foreign ticket id",
			break_: func(in *torture.Input) {
				in.Events = append(in.Events,
					torture.Event{Kind: torture.KindCall, RequestID: k1, Attempt: 2, Outcome: torture.OutAccepted, TicketID: ticket.IDFor(k1)},
					torture.Event{Kind: torture.KindCall, RequestID: k2, Attempt: 2, Outcome: torture.OutAccepted, TicketID: "tkt-other", Replayed: true})
			},
			want: []string{"answers-agree"},
			says: []string{k1 + ": accepted as new 2 times", k2 + ": answered ticket tkt-other"},
		},
		{
			name: "conflict on a faithful repeat",
			break_: func(in *torture.Input) {
				in.Events = append(in.Events, torture.Event{Kind: torture.KindCall, RequestID: k1, Attempt: 2, Outcome: torture.OutConflict, Err: "idempotency_key_conflict: …"})
			},
			want: []string{"answers-agree"},
			says: []string{k1 + ": conflict to a repeat with the same arguments"},
		},
		{
			name: "records disagree",
			break_: func(in *torture.Input) {
				in.Records = append(in.Records, torture.Record{Target: "jira", Kind: "jira", ExternalID: "TRT-9", Applied: 1, Title: "who filed this?"})
				in.DB.Rows[k2].Delivery.ExternalID = "77"
				in.DB.Rows[k1].Title = "torture " + k1 + ": something else"
				in.DB.Orphans = append(in.DB.Orphans, "outbox row of request trq-5eed-c09-r0009")
				in.DB.Rows[k2].Generation = 1
			},
			want: []string{"records-agree"},
			says: []string{"jira holds an item of no request", k2 + ": delivered as 77, but zendesk holds no item with that id",
				k1 + ": ticket title", "orphan: outbox row", k2 + ": published again 1 times"},
		},
		{
			name: "published again more often than the stream was deleted or purged after it was sent",
			break_: func(in *torture.Input) {
				at := in.Events[0].At
				in.Events = append(in.Events,
					torture.Event{At: at.Add(-time.Second), Kind: torture.KindStream, Detail: torture.StreamDelete},
					torture.Event{At: at.Add(time.Second), Kind: torture.KindStream, Detail: torture.StreamPurge})
				in.DB.Rows[k1].Generation = 1
				in.DB.Rows[k2].Generation = 2
			},
			want: []string{"records-agree"},
			says: []string{k2 + ": published again 2 times, though the stream was deleted or purged 1 times after it was sent"},
		},
		{
			name: "process crashed on its own",
			break_: func(in *torture.Input) {
				in.Events = append(in.Events, torture.Event{Kind: torture.KindKill, Component: torture.CompDispatcher, Cause: torture.CauseCrash, Detail: "dispatcher-3", Err: "exit status 1"})
				in.Shutdown = []string{"mcp-front-4 did not shut down cleanly on SIGINT: exit status 1"}
			},
			want: []string{"processes"},
			says: []string{"dispatcher (dispatcher-3) exited on its own: exit status 1", "at the end: mcp-front-4"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := goodInput()
			tc.break_(&in)
			res := torture.Check(in)
			names, vs := failing(res)
			if !slices.Equal(names, tc.want) {
				t.Errorf("failing properties %v, want %v; violations:\n%s", names, tc.want, vs)
			}
			for _, s := range tc.says {
				if !strings.Contains(vs, s) {
					t.Errorf("no violation says %q; violations:\n%s", s, vs)
				}
			}
			if res.OK() {
				t.Error("Result.OK() is true")
			}
			lines := strings.Join(res.Lines(10), "\n")
			for _, n := range tc.want {
				if !strings.Contains(lines, "FAIL "+n) {
					t.Errorf("the report has no FAIL line for %s:\n%s", n, lines)
				}
			}
		})
	}
}
