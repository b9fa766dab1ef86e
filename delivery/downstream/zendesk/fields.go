package zendesk

import (
	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// TicketFields are the fields a create tool may set on a ticket (decision
// 0185), as "Create Ticket" takes them: the group, assignee, brand and
// ticket form by id, the type (problem, incident, question or task), tags
// (added to the ticket's labels) and custom fields by id
// (custom_fields.<id>: sent as {"id": <id>, "value": …}).
var TicketFields = downstream.Catalog{Kind: "zendesk",
	Named: map[string]string{
		"group_id": ticket.FieldInteger, "assignee_id": ticket.FieldInteger, "brand_id": ticket.FieldInteger,
		"ticket_form_id": ticket.FieldInteger, "type": ticket.FieldString, "tags": ticket.FieldArray,
	},
	Patterns: []downstream.FieldPattern{downstream.CustomFieldPattern},
}
