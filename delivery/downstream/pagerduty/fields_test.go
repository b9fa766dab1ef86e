package pagerduty_test

import (
	"context"
	"encoding/json"
	"testing"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/pagerduty"
	"ticketrelay/delivery/downstream/pagerduty/pagerdutytest"
)

// A create tool's fields reach the event's payload: component, group,
// class, and custom_details keys beside ticketrelay's own.
func TestTicketFields(t *testing.T) {
	f := pagerdutytest.New(t, routingKey)
	d := downstreamtest.NewDelivery("req-fields")
	d.Ticket.Fields = map[string]json.RawMessage{"component": []byte(`"checkout"`), "group": []byte(`"shop"`), "class": []byte(`"http 500"`),
		"custom_details.runbook": []byte(`"https://runbooks.example/checkout"`)}
	if _, err := newTarget(t, f.URL(), routingKey).Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	a := f.Alerts()[0]
	if a.Component != "checkout" || a.Group != "shop" || a.Class != "http 500" ||
		string(a.CustomDetails["runbook"]) != `"https://runbooks.example/checkout"` || string(a.CustomDetails["request_id"]) != `"req-fields"` {
		t.Errorf("alert: %+v", a)
	}
	if _, err := pagerduty.TicketFields.Type("custom_details.request_id"); err == nil {
		t.Error("the catalog lets a tool overwrite custom_details.request_id")
	}
}
