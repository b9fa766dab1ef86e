package redmine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/redmine/redminetest"
)

// A create tool's fields reach the issue as POST /issues.json takes them:
// the tracker over the target's, the assignee, custom fields by id beside
// the one holding the dedupe key.
func TestTicketFields(t *testing.T) {
	f := redminetest.New(t, apiKey, "other", 0)
	f.AddProject(redminetest.Project{ID: 2, Identifier: "support", Trackers: []int{1, 2, 3}, Fields: []int{field, 12}})
	tg := newTarget(t, f.URL(), apiKey)
	d := downstreamtest.NewDelivery("req-fields")
	d.Ticket.Fields = map[string]json.RawMessage{"tracker_id": []byte(`1`), "assigned_to_id": []byte(`5`), "custom_fields.12": []byte(`"1.4.2"`)}
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	is := f.Issues()[0]
	if is.TrackerID != 1 || is.AssigneeID != 5 || is.Custom[12] != "1.4.2" || is.Custom[field] == "" {
		t.Errorf("issue: %+v", is)
	}
	// An assignee Redmine does not know is its 422: the create fails.
	d2 := downstreamtest.NewDelivery("req-fields-2")
	d2.Ticket.Fields = map[string]json.RawMessage{"assigned_to_id": []byte(`99`)}
	if _, err := tg.Deliver(context.Background(), d2); err == nil || !strings.Contains(err.Error(), "Assignee is invalid") {
		t.Errorf("an unknown assignee: %v; want Redmine's 422", err)
	}
	if _, err := redmine.TicketFields.Type("custom_fields.12"); err != nil {
		t.Error(err)
	}
}
