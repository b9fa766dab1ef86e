package targets

import (
	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/local"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/zendesk"
)

// Beyond is what a target does beyond creates, as mcp-front sees it: its
// adapter's CommentCapabilities and UpdateFields, decided from the
// definition without its secrets (the front reads none). Where only a
// secret decides, the definition's other options stand for it: PagerDuty
// takes notes and updates with a REST API key and a `from` user, and its
// adapter (the dispatcher) refuses `from` without the key. Slack's thread replies
// need a bot token the front cannot see: it takes comments, with the
// eventual lookup they have with the token (not idempotent either way),
// and without one the dispatcher's adapter refuses each for good.
type Beyond struct {
	Comments     bool
	CommentCaps  downstream.Capabilities
	UpdateFields []downstream.Field
}

// BeyondOf is d's Beyond; the zero Beyond for a kind that takes neither.
func BeyondOf(d Def) Beyond {
	status, priority, assignee := downstream.FieldStatus, downstream.FieldPriority, downstream.FieldAssignee
	switch d.Kind {
	case "local":
		return Beyond{Comments: true, CommentCaps: local.Capabilities, UpdateFields: downstream.Fields}
	case "webhook":
		caps, _ := CapabilitiesOf(d)
		return Beyond{Comments: true, CommentCaps: caps, UpdateFields: downstream.Fields}
	case "zendesk":
		return Beyond{Comments: true, CommentCaps: zendesk.CommentCapabilities, UpdateFields: downstream.Fields}
	case "jira":
		return Beyond{Comments: true, CommentCaps: jira.CommentCapabilities, UpdateFields: downstream.Fields}
	case "github":
		return Beyond{Comments: true, CommentCaps: github.CommentCapabilities, UpdateFields: []downstream.Field{status, downstream.FieldLabels, assignee}}
	case "redmine":
		if len(d.PriorityIDs) == 0 {
			return Beyond{Comments: true, CommentCaps: redmine.CommentCapabilities, UpdateFields: []downstream.Field{status, assignee}}
		}
		return Beyond{Comments: true, CommentCaps: redmine.CommentCapabilities, UpdateFields: []downstream.Field{status, priority, assignee}}
	case "pagerduty":
		switch {
		case d.From == "":
			return Beyond{}
		case len(d.PriorityRefs) == 0:
			return Beyond{Comments: true, CommentCaps: downstream.Capabilities{Lookup: downstream.LookupConsistent}, UpdateFields: []downstream.Field{status, assignee}}
		}
		return Beyond{Comments: true, CommentCaps: downstream.Capabilities{Lookup: downstream.LookupConsistent}, UpdateFields: []downstream.Field{status, priority, assignee}}
	case "slack":
		return Beyond{Comments: true, CommentCaps: downstream.Capabilities{Lookup: downstream.LookupEventual}}
	}
	return Beyond{}
}

// Idempotent reports whether a comment on this target can be retried
// blindly: the API takes its key, or an unknown outcome is settled by a
// consistent lookup of its marker.
func (b Beyond) Idempotent() bool {
	return b.CommentCaps.DedupeKey || b.CommentCaps.Lookup == downstream.LookupConsistent
}
