package zendesk_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/zendesk"
	"ticketrelay/delivery/downstream/zendesk/zendesktest"
)

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := zendesktest.New(t, email, token, nil)
		return downstreamtest.CommentHarness{
			Target:    newTarget(t, f.URL(), token, nil),
			Faults:    &f.CommentFaults,
			NewTicket: func() string { return strconv.FormatInt(f.AddTicket("Printer on fire"), 10) },
			Comments: func(ref string) []string {
				tk, _ := f.Ticket(downstreamtest.ID(t, ref))
				var out []string
				for _, c := range tk.Comments[1:] { // the first is the description
					out = append(out, c.Body)
				}
				return out
			},
			Seed:     func(ref string, n int) { f.AddComments(downstreamtest.ID(t, ref), n) },
			PageSize: zendesktest.MaxComments,
			Missing:  "4242",
			BadRefs:  []string{"abc", "0", "https://other.zendesk.com/agent/tickets/1", f.URL() + "/agent/users/1", "OPS-1"},
			BadAuth:  newTarget(t, f.URL(), "revoked", nil),
		}
	})
}

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		f := zendesktest.New(t, email, token, nil)
		return downstreamtest.UpdateHarness{
			Target:    newTarget(t, f.URL(), token, nil),
			NewTicket: func() string { return strconv.FormatInt(f.AddTicket("Printer on fire", "printer"), 10) },
			Read: func(ref string) downstream.Update {
				tk, _ := f.Ticket(downstreamtest.ID(t, ref))
				u := downstream.Update{Status: downstream.StatusOpen, Priority: tk.Priority, Assignee: new("")}
				if tk.Status == "solved" || tk.Status == "closed" {
					u.Status = downstream.StatusClosed
				}
				tags := slices.Sorted(slices.Values(tk.Tags))
				if tags == nil {
					tags = []string{}
				}
				u.Labels = &tags
				if tk.AssigneeID != nil {
					u.Assignee = new(strconv.FormatInt(*tk.AssigneeID, 10))
				}
				return u
			},
			Sample:  downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Labels: &[]string{"hardware", "floor3"}, Assignee: new("1001")},
			Missing: "4242",
			BadRefs: []string{"abc", "https://other.zendesk.com/agent/tickets/1"},
		}
	})
}

// A closed ticket takes no update: Zendesk's 422 says so, permanently. A
// comment is an internal note unless the target makes them public.
func TestClosedTicketAndPublicComments(t *testing.T) {
	f := zendesktest.New(t, email, token, nil)
	tg := newTarget(t, f.URL(), token, nil)
	ctx := context.Background()
	id := f.AddTicket("Printer on fire")
	ref := strconv.FormatInt(id, 10)
	if _, err := tg.AddComment(ctx, downstreamtest.NewComment("c-note", ref)); err != nil {
		t.Fatal(err)
	}
	pub, err := zendesk.New(zendesk.Config{Name: "support", BaseURL: f.URL(), Email: email, Token: downstream.NewSecret(token), PublicComments: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.AddComment(ctx, downstreamtest.NewComment("c-public", ref)); err != nil {
		t.Fatal(err)
	}
	tk, _ := f.Ticket(id)
	if len(tk.Comments) != 3 || tk.Comments[1].Public || !tk.Comments[2].Public {
		t.Fatalf("comments %+v: want an internal note, then a public reply", tk.Comments)
	}
	f.SetStatus(id, "closed")
	_, err = tg.Update(ctx, downstream.UpdateDelivery{Key: "u", Attempt: 1, Ticket: ref, Set: downstream.Update{Status: downstream.StatusOpen}})
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "closed prevents ticket update") {
		t.Fatalf("reopening a closed ticket: %v; want Zendesk's permanent 422", err)
	}
}
