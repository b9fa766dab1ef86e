package zendesk_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"ticketrelay/delivery/downstream/zendesk/zendesktest"
)

// A create tool's fields reach the ticket as "Create Ticket" takes them:
// group, assignee, type, tags beside the labels, custom_fields by id.
func TestTicketFields(t *testing.T) {
	tg, f, _, d := setup(t)
	d.Ticket.Labels = []string{"web"}
	d.Ticket.Fixed = map[string]json.RawMessage{"group_id": []byte(`2002`), "type": []byte(`"incident"`)}
	d.Ticket.Fields = map[string]json.RawMessage{"assignee_id": []byte(`1001`), "tags": []byte(`["tier 1"]`),
		"custom_fields.360002": []byte(`"EU"`), "custom_fields.360001": []byte(`42`)}
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	tk := f.Tickets()[0]
	cf, _ := json.Marshal(tk.CustomFields)
	if *tk.GroupID != 2002 || *tk.AssigneeID != 1001 || tk.Type != "incident" || !slices.Equal(tk.Tags, []string{"web", "tier_1"}) ||
		string(cf) != `[{"id":360001,"value":42},{"id":360002,"value":"EU"}]` {
		t.Errorf("ticket: %+v, custom fields %s", tk, cf)
	}

	// A custom field Zendesk does not have is its 422.
	tg2, _, _, d2 := setup(t)
	d2.Ticket.Fields = map[string]json.RawMessage{"custom_fields.999": []byte(`"x"`)}
	if _, err := tg2.Deliver(context.Background(), d2); err == nil || slices.Contains(zendesktest.TicketFields, 999) {
		t.Errorf("an unknown custom field: %v; want the API's error", err)
	}
}
