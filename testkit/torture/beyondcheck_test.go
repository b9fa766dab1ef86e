package torture_test

import (
	"strings"
	"testing"

	"ticketrelay/testkit/torture"
	"ticketrelay/ticket"
)

// Comments and updates added to goodInput's history, each accepted and
// delivered:
//   - cm1: a comment on k1's ticket (webhook), one at the target
//   - cm2: a comment on the Slack thread, answer lost: uncertain, none there
//   - up1, up2: two updates of k2's ticket (Zendesk), accepted in that
//     order; the ticket shows up2's status and up1's labels (up2 sets none)
const (
	cm1 = "trq-5eed-c01-r0003"
	cm2 = "trq-5eed-c02-r0003"
	up1 = "trq-5eed-c01-r0004"
	up2 = "trq-5eed-c01-r0005"
)

func beyondInput() torture.Input {
	in := goodInput()
	at := in.Events[0].At
	labels := []string{"triaged"}
	reqs := []torture.Request{
		{ID: cm1, Tool: torture.CommentTool, Action: torture.ActionComment, Target: "webhook", Kind: "webhook", Keyed: true,
			On: ticket.IDFor(k1), OnRequest: k1, Body: "torture comment " + cm1},
		{ID: cm2, Tool: torture.CommentTool, Action: torture.ActionComment, Target: "slack", Kind: "slack",
			On: "C0123ABCD/1.000001", Body: "torture comment " + cm2},
		{ID: up1, Tool: torture.UpdateTool, Action: torture.ActionUpdate, Target: "zendesk", Kind: "zendesk", Keyed: true,
			On: k2, OnRequest: k2, Set: &torture.Fields{Status: "closed", Labels: &labels}},
		{ID: up2, Tool: torture.UpdateTool, Action: torture.ActionUpdate, Target: "zendesk", Kind: "zendesk", Keyed: true,
			On: k2, OnRequest: k2, Set: &torture.Fields{Status: "open", Priority: "urgent"}},
	}
	for i, r := range reqs {
		in.Events = append(in.Events, torture.Event{At: at, Kind: torture.KindRequest, Caller: 1, Request: &r, RequestID: r.ID},
			torture.Event{At: at, Kind: torture.KindCall, RequestID: r.ID, Attempt: 1, Mode: torture.ModeNormal, Outcome: torture.OutAccepted,
				TicketID: ticket.IDFor(r.OnRequest)})
		if r.OnRequest == "" {
			in.Events[len(in.Events)-1].TicketID = ""
		}
		state := "delivered"
		if r.ID == cm2 {
			state = "uncertain"
		}
		row := &torture.Row{RequestID: r.ID, Tool: r.Tool, Target: r.Target, Seq: int64(10 + i), Kind: r.Action, OnRequest: r.OnRequest,
			HasOutbox: true, Subject: "tickets." + r.Target, Published: true, Delivery: &torture.DeliveryRow{Target: r.Target, State: state, Attempts: 1}}
		if r.OnRequest != "" {
			row.TicketID = ticket.IDFor(r.OnRequest)
		}
		in.DB.Rows[r.ID] = row
		in.Final[r.ID] = state
	}
	in.Beyond = torture.Beyond{
		Comments: []torture.CommentRecord{{Target: "webhook", RequestID: cm1, OnRequest: k1}},
		States:   []torture.TicketState{{Target: "zendesk", RequestID: k2, Status: "open", Priority: "urgent", Labels: []string{"triaged"}}},
	}
	return in
}

func TestCheckPassesCommentsAndUpdates(t *testing.T) {
	res := torture.Check(beyondInput())
	for _, l := range res.Lines(10) {
		t.Log(l)
	}
	if names, vs := failing(res); len(names) > 0 {
		t.Fatalf("a good history fails %v:\n%s", names, vs)
	}
	if c := res.Counts; c.Requests != 8 || c.Comments != 2 || c.Updates != 2 || c.Accepted != 8 {
		t.Errorf("counts: %s", c)
	}
	var summaries []string
	for _, p := range res.Properties {
		summaries = append(summaries, p.Name+": "+p.Summary)
	}
	all := strings.Join(summaries, "\n")
	for _, s := range []string{"comments-once: 2 comments accepted (delivered:1 uncertain-0:1)", "updates-last: 2 updates of 1 tickets; 1 tickets' fields compared"} {
		if !strings.Contains(all, s) {
			t.Errorf("no summary says %q:\n%s", s, all)
		}
	}
}

// TestCheckBeyondCanFail breaks comments-once and updates-last one way at
// a time: each must fail, saying why.
func TestCheckBeyondCanFail(t *testing.T) {
	checkBreaks(t, beyondInput, []breakCase{
		{
			name: "a comment twice where the key or the lookup forbids it",
			break_: func(in *torture.Input) {
				in.Beyond.Comments = append(in.Beyond.Comments, torture.CommentRecord{Target: "webhook", RequestID: cm1, OnRequest: k1})
			},
			want: []string{"comments-once"}, says: cm1 + ": webhook holds the comment 2 times",
		},
		{
			name: "a delivered comment missing at the target",
			break_: func(in *torture.Input) {
				in.Beyond.Comments = nil
			},
			want: []string{"comments-once"}, says: cm1 + " (webhook, exactly once: true): ended delivered with 0 comments",
		},
		{
			name: "uncertain on a target that takes a key",
			break_: func(in *torture.Input) {
				in.DB.Rows[cm1].Delivery.State, in.Final[cm1] = "uncertain", "uncertain"
			},
			want: []string{"comments-once"}, says: cm1 + " (webhook, exactly once: true): ended uncertain with 1 comments",
		},
		{
			name: "an uncertain Slack comment there twice",
			break_: func(in *torture.Input) {
				in.Beyond.Comments = append(in.Beyond.Comments, torture.CommentRecord{Target: "slack", RequestID: cm2, Thread: true},
					torture.CommentRecord{Target: "slack", RequestID: cm2, Thread: true})
			},
			want: []string{"comments-once"}, says: cm2 + ": slack holds the comment 2 times",
		},
		{
			name: "a comment on another ticket",
			break_: func(in *torture.Input) {
				in.Beyond.Comments[0].OnRequest = k3
			},
			want: []string{"comments-once"}, says: cm1 + ": its comment is on the ticket of " + k3 + ", want the ticket of " + k1,
		},
		{
			name: "a comment of no request",
			break_: func(in *torture.Input) {
				in.Beyond.Comments = append(in.Beyond.Comments, torture.CommentRecord{Target: "jira", RequestID: "trq-5eed-c09-r0009", OnRequest: k2})
			},
			want: []string{"comments-once"}, says: "jira holds a comment of no comment request",
		},
		{
			name: "the first update applied last",
			break_: func(in *torture.Input) {
				in.Beyond.States[0].Status = "closed"
			},
			want: []string{"updates-last"}, says: k2 + " (zendesk, 2 updates, the last " + up2 + "): status closed, want open",
		},
		{
			name: "an update's field lost",
			break_: func(in *torture.Input) {
				in.Beyond.States[0].Labels, in.Beyond.States[0].Priority = []string{}, "low"
			},
			want: []string{"updates-last"}, says: `priority "low", want urgent, labels [], want [triaged]`,
		},
		{
			name: "ledger order is what counts, not the order of the history",
			break_: func(in *torture.Input) {
				in.DB.Rows[up1].Seq, in.DB.Rows[up2].Seq = in.DB.Rows[up2].Seq, in.DB.Rows[up1].Seq
			},
			want: []string{"updates-last"}, says: "status open, want closed",
		},
		{
			name: "an update of a delivered ticket failed",
			break_: func(in *torture.Input) {
				in.DB.Rows[up2].Delivery.State, in.Final[up2] = "failed", "failed"
			},
			want: []string{"updates-last"}, says: up2 + ": an update of the ticket of " + k2 + " (create delivered) ended failed",
		},
		{
			name: "an acknowledged update the ledger lost",
			break_: func(in *torture.Input) {
				delete(in.DB.Rows, up2)
				delete(in.Final, up2)
			},
			want: []string{"updates-last"}, says: up2 + " (update_ticket): a client saw it accepted, but the ledger has no row",
		},
	})
}
