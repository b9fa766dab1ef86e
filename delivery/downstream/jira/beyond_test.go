package jira_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/jira/jiratest"
)

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := jiratest.New(t, email, token, "OPS", 5*time.Second, nil)
		return downstreamtest.CommentHarness{
			Target:    newTarget(t, f.URL(), token, nil),
			Faults:    &f.CommentFaults,
			NewTicket: func() string { return f.AddIssue("Printer on fire") },
			Comments: func(ref string) []string {
				is, _ := f.Issue(ref)
				var out []string
				for _, c := range is.Comments {
					out = append(out, c.Text())
				}
				return out
			},
			Seed:     func(ref string, n int) { f.AddComments(ref, n) },
			PageSize: jiratest.MaxComments,
			Missing:  "OPS-4242",
			BadRefs:  []string{"OPS", "OPS-0", "DEV-1", "ops 1", "https://other.atlassian.net/browse/OPS-1", f.URL() + "/browse/DEV-1", "12"},
			BadAuth:  newTarget(t, f.URL(), "revoked", nil),
		}
	})
}

func readIssue(t *testing.T, f *jiratest.Fake) func(string) downstream.Update {
	return func(ref string) downstream.Update {
		is, ok := f.Issue(ref)
		if !ok {
			t.Fatalf("no issue %s", ref)
		}
		u := downstream.Update{Status: downstream.StatusOpen, Assignee: new(is.Assignee)}
		if jiratest.Statuses[is.Status] == "done" {
			u.Status = downstream.StatusClosed
		}
		for p, n := range map[string]string{"low": "Low", "normal": "Medium", "high": "High", "urgent": "Highest"} {
			if n == is.Priority {
				u.Priority = p
			}
		}
		labels := []string{}
		for _, l := range is.Labels {
			if !strings.HasPrefix(l, "ticketrelay-") {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		u.Labels = &labels
		return u
	}
}

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		f := jiratest.New(t, email, token, "OPS", 5*time.Second, nil)
		return downstreamtest.UpdateHarness{
			Target:    newTarget(t, f.URL(), token, nil),
			NewTicket: func() string { return f.AddIssue("Printer on fire", "printer") },
			Read:      readIssue(t, f),
			Sample: downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Labels: &[]string{"hardware", "floor3"},
				Assignee: new(jiratest.Users[0])},
			Missing: "OPS-4242",
			BadRefs: []string{"DEV-1", "nonsense"},
		}
	})
}

// An update keeps the key label the create put on the issue: Find needs
// it. Labels with spaces become Jira's (underscores), as on a create.
func TestUpdateKeepsKeyLabel(t *testing.T) {
	f := jiratest.New(t, email, token, "OPS", 0, nil)
	tg := newTarget(t, f.URL(), token, nil)
	ctx := context.Background()
	d := downstreamtest.NewDelivery("req-filed")
	r, err := tg.Deliver(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Update(ctx, downstream.UpdateDelivery{Key: "u", Attempt: 1, Ticket: r.URL, Set: downstream.Update{Labels: &[]string{"x y"}}}); err != nil {
		t.Fatal(err)
	}
	is, _ := f.Issue(r.ExternalID)
	if len(is.Labels) != 2 || !strings.HasPrefix(is.Labels[0], "ticketrelay-") || is.Labels[1] != "x_y" {
		t.Fatalf("labels %q; want the key label and x_y", is.Labels)
	}
	if _, found, err := tg.Find(ctx, d); err != nil || !found {
		t.Fatalf("Find after the update: %v, %v", found, err)
	}
}
