package github

import (
	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// TicketFields are the fields a create tool may set on an issue (decision
// 0185), as "Create an issue" takes them: labels (added to the ticket's
// own), assignees (logins), milestone (its number) and the issue type's
// name.
var TicketFields = downstream.Catalog{Kind: "github", Named: map[string]string{
	"labels": ticket.FieldArray, "assignees": ticket.FieldArray, "milestone": ticket.FieldInteger, "type": ticket.FieldString,
}}
