package webhook

import (
	"regexp"

	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// TicketFields: a create tool's fields are passed through, any name and
// value, in the event's data.fields (decision 0185).
var TicketFields = downstream.Catalog{Kind: "webhook", Patterns: []downstream.FieldPattern{PassThrough}}

// PassThrough is the pattern of the fields a kind passes on as they are
// (webhook, local): a name as a JSON key a receiver can read plainly.
var PassThrough = downstream.FieldPattern{RE: regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`),
	Spelling: "any name of letters, digits, _ . - (at most 64)", Type: ticket.FieldAny}
