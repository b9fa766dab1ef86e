package torture_test

import (
	"slices"
	"strings"
	"testing"

	"ticketrelay/testkit/torture"
	"ticketrelay/ticket"
)

// A fingerprint group added to goodInput's history, on Zendesk (a key,
// and a consistent comment lookup):
//   - fp1 files the ticket, fp2 joins it (an occurrence, its comment on
//     fp1's ticket), fpClose closes fp1's ticket, and fp3 files a new one.
const (
	fp1     = "trq-5eed-c03-r0001"
	fp2     = "trq-5eed-c03-r0002"
	fpClose = "trq-5eed-c03-r0003"
	fp3     = "trq-5eed-c03-r0004"
	fpName  = "fp-trq-5eed-c03-0"
)

func fingerprintInput() torture.Input {
	in := goodInput()
	at := in.Events[0].At
	kind := "zendesk"
	create := func(id string) torture.Request {
		return torture.Request{ID: id, Tool: torture.ToolFor(kind), Target: kind, Kind: kind, Keyed: true, Title: title(id), Fingerprint: fpName}
	}
	for i, r := range []torture.Request{create(fp1), create(fp2),
		{ID: fpClose, Tool: torture.UpdateTool, Action: torture.ActionUpdate, Target: kind, Kind: kind, Keyed: true,
			On: fp1, OnRequest: fp1, Set: &torture.Fields{Status: "closed"}},
		create(fp3)} {
		on := r.OnRequest
		if r.ID == fp2 {
			on = fp1
		}
		tid := ticket.IDFor(r.ID)
		if on != "" {
			tid = ticket.IDFor(on)
		}
		in.Events = append(in.Events, torture.Event{At: at, Kind: torture.KindRequest, Caller: 3, Request: &r, RequestID: r.ID},
			torture.Event{At: at, Kind: torture.KindCall, RequestID: r.ID, Attempt: 1, Mode: torture.ModeNormal, Outcome: torture.OutAccepted,
				TicketID: tid, Grouped: r.ID == fp2})
		row := &torture.Row{RequestID: r.ID, Tool: r.Tool, Target: kind, TicketID: tid, Seq: int64(20 + i), Kind: r.Action, OnRequest: on,
			HasOutbox: true, Subject: "tickets." + kind, Published: true, Delivery: &torture.DeliveryRow{Target: kind, State: "delivered", Attempts: 1}}
		switch r.ID {
		case fp1, fp3:
			row.HasTicket, row.Title, row.Delivery.ExternalID = true, r.Title, "7"+r.ID[len(r.ID)-1:]
			in.Records = append(in.Records, torture.Record{Target: kind, Kind: kind, RequestID: r.ID, ExternalID: row.Delivery.ExternalID, Applied: 1, Title: r.Title})
		case fp2:
			row.Kind = torture.ActionComment
		}
		in.DB.Rows[r.ID] = row
		in.Final[r.ID] = "delivered"
	}
	in.Beyond = torture.Beyond{
		Comments: []torture.CommentRecord{{Target: kind, RequestID: fp2, OnRequest: fp1}},
		States:   []torture.TicketState{{Target: kind, RequestID: fp1, Status: "closed", Labels: []string{}}},
	}
	return in
}

func TestCheckPassesAFingerprintGroup(t *testing.T) {
	res := torture.Check(fingerprintInput())
	if names, vs := failing(res); len(names) > 0 {
		t.Fatalf("a good history fails %v:\n%s", names, vs)
	}
	want := "2 tickets filed, 1 occurrences (comments held per occurrence (1:1)), 1 groups closed by an update; 0 violations"
	if i := slices.IndexFunc(res.Properties, func(p torture.Property) bool { return p.Name == "one-ticket-per-fp" }); i < 0 || !strings.Contains(res.Properties[i].Summary, want) {
		t.Errorf("one-ticket-per-fp does not say %q: %+v", want, res.Properties)
	}
}

// answered makes every answer to id's calls name the ticket of on, grouped
// or not.
func answered(in *torture.Input, id, on string, grouped bool) {
	for i, e := range in.Events {
		if e.RequestID == id && e.Kind == torture.KindCall {
			in.Events[i].TicketID, in.Events[i].Grouped = ticket.IDFor(on), grouped
		}
	}
}

// breakCase breaks a good history one way: the properties that must then
// fail, and what one of their violations says.
type breakCase struct {
	name   string
	break_ func(in *torture.Input)
	want   []string
	says   string
}

// checkBreaks runs each case on a fresh good history.
func checkBreaks(t *testing.T, good func() torture.Input, cases []breakCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := good()
			tc.break_(&in)
			names, vs := failing(torture.Check(in))
			if !slices.Equal(names, tc.want) {
				t.Errorf("failing properties %v, want %v; violations:\n%s", names, tc.want, vs)
			}
			if !strings.Contains(vs, tc.says) {
				t.Errorf("no violation says %q; violations:\n%s", tc.says, vs)
			}
		})
	}
}

// TestCheckFingerprintCanFail breaks the grouping one way at a time.
func TestCheckFingerprintCanFail(t *testing.T) {
	checkBreaks(t, fingerprintInput, []breakCase{
		{
			name: "a second ticket while the group is open",
			break_: func(in *torture.Input) {
				r := in.DB.Rows[fp2]
				r.Kind, r.OnRequest, r.TicketID, r.HasTicket, r.Title, r.Delivery.ExternalID = "", "", ticket.IDFor(fp2), true, title(fp2), "72"
				in.Records = append(in.Records, torture.Record{Target: "zendesk", Kind: "zendesk", RequestID: fp2, ExternalID: "72", Applied: 1, Title: title(fp2)})
				in.Beyond.Comments = nil
				answered(in, fp2, fp2, false)
			},
			want: []string{"one-ticket-per-fp"}, says: fp2 + " (zendesk/" + fpName + "): filed a second ticket while the group's ticket of " + fp1 + " was open",
		},
		{
			name: "a report after the closing update joined the closed ticket",
			break_: func(in *torture.Input) {
				r := in.DB.Rows[fp3]
				r.Kind, r.OnRequest, r.TicketID, r.HasTicket, r.Title = torture.ActionComment, fp1, ticket.IDFor(fp1), false, ""
				in.Records = slices.DeleteFunc(in.Records, func(x torture.Record) bool { return x.RequestID == fp3 })
				in.Beyond.Comments = append(in.Beyond.Comments, torture.CommentRecord{Target: "zendesk", RequestID: fp3, OnRequest: fp1})
				answered(in, fp3, fp1, true)
			},
			want: []string{"one-ticket-per-fp"}, says: fp3 + " (zendesk/" + fpName + "): an occurrence of the ticket of " + fp1 + ", whose group the update " + fpClose + " had closed before",
		},
		{
			name:   "an occurrence answered as a ticket of its own",
			break_: func(in *torture.Input) { answered(in, fp2, fp1, false) },
			want:   []string{"one-ticket-per-fp"}, says: fp2 + ": answered ticket " + ticket.IDFor(fp1) + " grouped=false",
		},
		{
			name: "an occurrence comment held twice",
			break_: func(in *torture.Input) {
				in.Beyond.Comments = append(in.Beyond.Comments, in.Beyond.Comments[0])
			},
			want: []string{"comments-once", "one-ticket-per-fp"}, says: fp2 + " (zendesk/" + fpName + "): an occurrence ended delivered, zendesk holds its comment 2 times",
		},
		{
			name: "an occurrence filed a ticket too",
			break_: func(in *torture.Input) {
				in.Records = append(in.Records, torture.Record{Target: "zendesk", Kind: "zendesk", RequestID: fp2, ExternalID: "99", Applied: 1, Title: title(fp2)})
			},
			want: []string{"one-ticket-per-fp"}, says: fp2 + " (zendesk/" + fpName + "): an occurrence, but zendesk holds 1 tickets of it",
		},
	})
}

// TestCheckMultiFingerprint: across hosts fp3 is a second ticket of fp1's
// open group (no update closes it): a violation, with or without an
// mcp-front killed while one of the two was in flight, since adoption
// decides a cut report's group (decision 0188).
func TestCheckMultiFingerprint(t *testing.T) {
	multi := func(frontKill bool) torture.MultiInput {
		in := fingerprintInput()
		delete(in.DB.Rows, fpClose)
		in.Events = slices.DeleteFunc(in.Events, func(e torture.Event) bool {
			return e.RequestID == fpClose || !frontKill && e.Kind == torture.KindKill && e.Component == torture.CompFront
		})
		return torture.MultiInput{Input: in, Hosts: []string{"h1", "h2"}, Lost: "h3"}
	}
	for _, kill := range []bool{false, true} {
		p := propertyOf(t, multi(kill), "one-ticket-per-fp")
		if p.OK || !strings.Contains(strings.Join(p.Violations, "\n"), fp3+" (zendesk/"+fpName+"): filed a second ticket while the group's ticket of "+fp1+" was open") {
			t.Errorf("a second ticket (front killed: %v): %+v", kill, p)
		}
	}
}
