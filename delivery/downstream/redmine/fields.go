package redmine

import (
	"ticketrelay/delivery/downstream"
	"ticketrelay/ticket"
)

// TicketFields are the fields a create tool may set on an issue (decision
// 0185), as POST /issues.json takes them: the tracker, assignee, category,
// target version and parent issue by id, and custom fields by id
// (custom_fields.<id>: sent as {"id": <id>, "value": …}), but not the one
// that holds the dedupe key (custom_field_id).
var TicketFields = downstream.Catalog{Kind: "redmine",
	Named: map[string]string{
		"tracker_id": ticket.FieldInteger, "assigned_to_id": ticket.FieldInteger, "category_id": ticket.FieldInteger,
		"fixed_version_id": ticket.FieldInteger, "parent_issue_id": ticket.FieldInteger,
	},
	Patterns: []downstream.FieldPattern{downstream.CustomFieldPattern},
}
