package targets

import (
	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/pagerduty"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/zendesk"
)

// fieldCatalogs are the fields each kind's tickets take beyond
// ticketrelay's own (decision 0185); a kind not listed takes none.
var fieldCatalogs = map[string]downstream.Catalog{
	"jira": jira.TicketFields, "github": github.TicketFields, "zendesk": zendesk.TicketFields,
	"redmine": redmine.TicketFields, "pagerduty": pagerduty.TicketFields, "webhook": webhook.TicketFields,
	// The local file keeps them in each line, as a webhook passes them on.
	"local": {Kind: "local", Patterns: []downstream.FieldPattern{webhook.PassThrough}},
}

// FieldCatalog is the fields a create tool bound to a target of kind may
// set.
func FieldCatalog(kind string) downstream.Catalog {
	if c, ok := fieldCatalogs[kind]; ok {
		return c
	}
	return downstream.Catalog{Kind: kind}
}
