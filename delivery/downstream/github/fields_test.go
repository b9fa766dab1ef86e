package github_test

import (
	"encoding/json"
	"slices"
	"testing"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/github/githubtest"
)

// A create tool's fields reach the issue as "Create an issue" takes them:
// labels beside the ticket's, assignees, the milestone's number, the type.
func TestTicketFields(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.Assignable = []string{"octocat"}
	d := downstreamtest.NewDelivery("req-fields")
	d.Ticket.Labels = []string{"bug"}
	d.Ticket.Fields = map[string]json.RawMessage{"labels": []byte(`["area/api","bug"]`), "assignees": []byte(`["octocat"]`),
		"milestone": []byte(`2`), "type": []byte(`"Bug"`)}
	r := deliver(t, newTarget(t, f.URL(), token), d)
	is := f.Issues()[0]
	if !slices.Contains(is.Labels, "area/api") || !slices.Contains(is.Labels, "bug") || len(is.Labels) != 3 ||
		!slices.Equal(is.Assignees, []string{"octocat"}) || is.Milestone != 2 || is.Type != "Bug" {
		t.Errorf("issue %s: %+v", r.URL, is)
	}
	for _, name := range []string{"labels", "assignees", "milestone", "type"} {
		if _, err := github.TicketFields.Type(name); err != nil {
			t.Errorf("the catalog refuses %s: %v", name, err)
		}
	}
}
