package redmine_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/redmine/redminetest"
)

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := redminetest.New(t, apiKey, "support", field)
		return downstreamtest.CommentHarness{
			Target:    newTarget(t, f.URL(), apiKey),
			Faults:    &f.Notes,
			NewTicket: func() string { return strconv.FormatInt(f.AddIssue("Printer on fire"), 10) },
			Comments:  func(ref string) []string { return f.NotesOf(downstreamtest.ID(t, ref)) },
			Seed:      func(ref string, n int) { f.AddNotes(downstreamtest.ID(t, ref), n) },
			// Redmine lists every journal in one answer.
			PageSize: 25,
			Missing:  "4242",
			BadRefs: []string{"abc", "-1", "0", "12a", "https://redmine.example.com/issues/1", f.URL() + "/projects/support",
				f.URL() + "/issues/x", "PROJ-1"},
			BadAuth: newTarget(t, f.URL(), "revoked"),
		}
	})
}

func readState(f *redminetest.Fake, t *testing.T) func(string) downstream.Update {
	return func(ref string) downstream.Update {
		is, ok := f.Issue(downstreamtest.ID(t, ref))
		if !ok {
			t.Fatalf("no issue %s", ref)
		}
		u := downstream.Update{Status: downstream.StatusOpen, Assignee: new("")}
		if is.Closed {
			u.Status = downstream.StatusClosed
		}
		for p, id := range map[string]int{"low": 1, "normal": 2, "high": 3, "urgent": 4} {
			if id == is.PriorityID {
				u.Priority = p
			}
		}
		if is.AssigneeID != 0 {
			u.Assignee = new(strconv.Itoa(is.AssigneeID))
		}
		return u
	}
}

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		f := redminetest.New(t, apiKey, "support", field)
		return downstreamtest.UpdateHarness{
			Target: newTarget(t, f.URL(), apiKey, func(c *redmine.Config) {
				c.PriorityIDs = map[string]int{"low": 1, "normal": 2, "high": 3, "urgent": 4}
			}),
			NewTicket: func() string { return strconv.FormatInt(f.AddIssue("Printer on fire"), 10) },
			Read:      readState(f, t),
			Sample:    downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Assignee: new("5")},
			Missing:   "4242",
			BadRefs:   []string{"abc", "https://redmine.example.com/issues/1"},
		}
	})
}

func TestParseTicket(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	tg := newTarget(t, f.URL(), apiKey)
	for _, ref := range []string{"17", "#17", f.URL() + "/issues/17", " 17 "} {
		r, err := tg.ParseTicket(ref)
		if err != nil || r.ExternalID != "17" || r.URL != f.URL()+"/issues/17" {
			t.Errorf("ParseTicket(%q) = %+v, %v; want issue 17", ref, r, err)
		}
	}
	_, err := tg.ParseTicket("https://other.example/issues/17")
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), f.URL()+"/issues/123") {
		t.Fatalf("a URL of another Redmine: %v; want a permanent error showing the accepted forms", err)
	}
}

// A workflow that does not let the API user close the issue: Redmine
// answers 204 and leaves the status; the update fails, saying so.
func TestUpdateIgnoredByWorkflow(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	tg := newTarget(t, f.URL(), apiKey)
	id := f.AddIssue("Printer on fire")
	f.SetWorkflow(false)
	_, err := tg.Update(context.Background(), downstream.UpdateDelivery{Key: "k", Attempt: 1, Ticket: strconv.FormatInt(id, 10),
		Set: downstream.Update{Status: downstream.StatusClosed}})
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "workflow") {
		t.Fatalf("an update the workflow ignores: %v; want a permanent error naming the workflow", err)
	}
	if is, _ := f.Issue(id); is.Closed {
		t.Fatal("the fake closed the issue")
	}
}

// An issue already in the category keeps its status: setting "open" on an
// issue In Progress leaves it In Progress, and sends nothing.
func TestUpdateKeepsStatusInCategory(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	tg := newTarget(t, f.URL(), apiKey, func(c *redmine.Config) { c.ClosedStatusID = 6 })
	ref := strconv.FormatInt(f.AddIssue("Printer on fire"), 10)
	set := func(st downstream.Status) {
		if _, err := tg.Update(context.Background(), downstream.UpdateDelivery{Key: "k", Attempt: 1, Ticket: ref, Set: downstream.Update{Status: st}}); err != nil {
			t.Fatal(err)
		}
	}
	set(downstream.StatusOpen)
	if is, _ := f.Issue(downstreamtest.ID(t, ref)); is.StatusID != 1 || len(is.Journals) != 0 {
		t.Fatalf("setting open on a new issue: status %d, %d journals; want New, untouched", is.StatusID, len(is.Journals))
	}
	set(downstream.StatusClosed)
	if is, _ := f.Issue(downstreamtest.ID(t, ref)); is.StatusID != 6 {
		t.Fatalf("closing with closed_status_id 6: status %d", is.StatusID)
	}
}
