package local_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
)

// A create tool's fields are kept in the ticket's line, fixed values and
// arguments' together.
func TestTicketFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	tg := open(t, path)
	d := delivery("req-fields")
	d.Ticket.Fields = map[string]json.RawMessage{"team": []byte(`"ops"`)}
	d.Ticket.Fixed = map[string]json.RawMessage{"queue": []byte(`"triage"`)}
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	got := lines(t, path)[0].Ticket
	if string(got.Fields["team"]) != `"ops"` || string(got.Fields["queue"]) != `"triage"` || got.Fixed != nil {
		t.Errorf("the line's fields: %s, fixed %s", got.Fields, got.Fixed)
	}
}
