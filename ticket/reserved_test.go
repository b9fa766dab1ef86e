package ticket_test

import (
	"errors"
	"strings"
	"testing"

	"ticketrelay/ticket"
)

// A caller's label or title must not carry the marks by which adapters
// without a dedupe key find the item of a request (GitHub's key label,
// Redmine's subject marker): it could pass its ticket off as another
// request's delivery.
func TestReservedMarksAreRefused(t *testing.T) {
	for _, c := range []struct {
		name     string
		edit     func(r *ticket.Request)
		argument string
	}{
		{"github key label", func(r *ticket.Request) { r.Labels = []string{"ops", "ticketrelay-3ca7aa00c2f557c0119db887"} }, "labels"},
		{"key label in other case", func(r *ticket.Request) { r.Labels = []string{"TicketRelay-abc"} }, "labels"},
		{"key label after spaces", func(r *ticket.Request) { r.Labels = []string{"  ticketrelay-abc"} }, "labels"},
		{"the bare prefix", func(r *ticket.Request) { r.Labels = []string{"ticketrelay-"} }, "labels"},
		{"prefix with a Kelvin sign", func(r *ticket.Request) { r.Labels = []string{"tic\u212Aetrelay-x"} }, "labels"},
		{"redmine subject marker", func(r *ticket.Request) { r.Title = "Printer [ticketrelay:3ca7aa00c2f557c0119db887]" }, "title"},
		{"subject marker in other case", func(r *ticket.Request) { r.Title = "[TICKETRELAY:abc] at the start" }, "title"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ticket.Request{RequestID: "req-1", Tool: "create_ticket", Target: "t", Title: "Printer on fire"}
			c.edit(&r)
			err := r.Normalize()
			var ie *ticket.InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, ticket.ErrInvalid) || ie.Argument != c.argument {
				t.Fatalf("Normalize = %v; want an invalid %s", err, c.argument)
			}
			reserved := ticket.ReservedLabelPrefix
			if c.argument == "title" {
				reserved = ticket.ReservedTitleMarker
			}
			if !strings.Contains(ie.Reason, `"`+reserved+`"`) || !strings.Contains(ie.Reason, "reserved") {
				t.Errorf("the reason %q does not name the reserved %q", ie.Reason, reserved)
			}
		})
	}
}

// Near misses stay valid.
func TestNearReservedMarksAreAccepted(t *testing.T) {
	r := ticket.Request{RequestID: "req-1", Tool: "create_ticket", Target: "t",
		Title:  "ticketrelay: [ticketrelay] and ticketrelay-abc are fine in a title",
		Labels: []string{"ticketrelay", "my-ticketrelay-x", "ticketrelay_x", "[ticketrelay:x]"}}
	if err := r.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	if len(r.Labels) != 4 {
		t.Fatalf("labels %v", r.Labels)
	}
}
