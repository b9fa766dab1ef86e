package webhook_test

import (
	"context"
	"encoding/json"
	"testing"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
)

// A create tool's fields are passed through in data.fields, as given.
func TestTicketFields(t *testing.T) {
	f := webhooktest.New(t, webhooktest.Options{SigningSecret: secret})
	d := downstreamtest.NewDelivery("req-fields")
	d.Ticket.Fields = map[string]json.RawMessage{"team": []byte(`"ops"`), "service": []byte(`{"id":"P1"}`)}
	if _, err := newTarget(t, f, f.URL(), secret, "").Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	var p struct {
		Data struct {
			Fields map[string]json.RawMessage `json:"fields"`
		} `json:"data"`
	}
	if err := json.Unmarshal(f.Deliveries()[0].Body, &p); err != nil {
		t.Fatal(err)
	}
	if string(p.Data.Fields["team"]) != `"ops"` || string(p.Data.Fields["service"]) != `{"id":"P1"}` {
		t.Errorf("data.fields: %s", p.Data.Fields)
	}
	if _, err := webhook.TicketFields.Type("needs space"); err == nil {
		t.Error("a field name with a space is accepted")
	}
}
