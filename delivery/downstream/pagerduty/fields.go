package pagerduty

import (
	"encoding/json"
	"regexp"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// CustomDetailsPrefix names one key of the event's custom_details.
const CustomDetailsPrefix = "custom_details."

// TicketFields are the fields a create tool may set on the alert (decision
// 0185), as the Events API v2 payload takes them: component, group, class,
// and keys of custom_details (custom_details.<key>) besides those
// ticketrelay fills. The service is the routing key's (a target per
// service), and the urgency follows the severity the ticket's priority
// gives, as the service's urgency rules say.
var TicketFields = downstream.Catalog{Kind: "pagerduty",
	Named: map[string]string{"component": ticket.FieldString, "group": ticket.FieldString, "class": ticket.FieldString},
	Patterns: []downstream.FieldPattern{{RE: regexp.MustCompile(`^custom_details\.(?:[A-Za-z][A-Za-z0-9_]{0,63})$`),
		Spelling: CustomDetailsPrefix + "<key>", Type: ticket.FieldAny}},
	Reserved: []string{CustomDetailsPrefix + "body", CustomDetailsPrefix + "labels", CustomDetailsPrefix + "ticket_id", CustomDetailsPrefix + "request_id"},
}

// payloadFields puts a ticket's field values where the payload takes them.
func payloadFields(p *Payload, fields map[string]json.RawMessage) {
	p.Component, _ = downstream.FieldString(fields, "component")
	p.Group, _ = downstream.FieldString(fields, "group")
	p.Class, _ = downstream.FieldString(fields, "class")
	for name, v := range fields {
		if key, ok := strings.CutPrefix(name, CustomDetailsPrefix); ok {
			if _, filled := p.CustomDetails[key]; !filled {
				p.CustomDetails[key] = v
			}
		}
	}
}
