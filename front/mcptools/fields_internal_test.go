package mcptools

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"ticketrelay/config"
	"ticketrelay/ticket"
)

// A field's argument may not shadow one of the create tool's own: the
// configuration refuses the names config.ReservedArguments lists, which
// must hold every argument createArgs decodes.
func TestReservedArgumentsCoverTheCreateTool(t *testing.T) {
	for _, name := range argNames(&createArgs{}) {
		if !slices.Contains(config.ReservedArguments, name) {
			t.Errorf("create argument %q is not in config.ReservedArguments: a field could take its name", name)
		}
	}
}

// A call's field arguments are split from the tool's own and checked into
// the request; a name given twice or in the wrong case is refused as the
// tool's own are.
func TestDecodeCreateFields(t *testing.T) {
	b := Binding{Tool: "report_bug", Target: "ops", Fields: []ticket.FieldMap{
		{Field: "issuetype", Fixed: json.RawMessage(`"Bug"`)},
		{Field: "customfield_10010", Argument: "team", Type: ticket.FieldString, Required: true, Wrap: "value",
			Enum: []json.RawMessage{[]byte(`"ops"`), []byte(`"web"`)}},
		{Field: "customfield_10011", Argument: "build", Type: ticket.FieldInteger},
	}}
	r, _, err := decodeCreate(b, json.RawMessage(`{"request_id":"r","title":"t","team":"ops","build":4.0}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(r.TargetFields())
	if want := `{"customfield_10010":{"value":"ops"},"customfield_10011":4,"issuetype":"Bug"}`; string(got) != want {
		t.Errorf("fields %s, want %s", got, want)
	}
	// 4.0 and 4 are one request: the same hash.
	same, _, _ := decodeCreate(b, json.RawMessage(`{"request_id":"r","title":"t","team":"ops","build":4}`))
	other, _, _ := decodeCreate(b, json.RawMessage(`{"request_id":"r","title":"t","team":"web","build":4}`))
	if same.Hash() != r.Hash() || other.Hash() == r.Hash() {
		t.Error("the hash does not follow the field arguments")
	}
	for raw, want := range map[string]string{
		`{"request_id":"r","title":"t","team":"ops","team":"web"}`: `"team": is given more than once`,
		`{"request_id":"r","title":"t","Team":"ops"}`:              `unknown argument "Team" (names are case-sensitive: "team")`,
		`{"request_id":"r","title":"t","team":"ops","build":1.5}`:  `"build": must be of type integer, got number 1.5`,
		`{"request_id":"r","title":"t","team":"ops","tags":[]}`:    `unknown argument "tags"`,
		`{"request_id":"r","title":"t","team":"ops"`:               `"arguments": unexpected EOF`,
		`{"request_id":"r","title":"t"}`:                           `"team": is required`,
		`{"request_id":"r","title":"t","team":"  "}`:               `"team": is empty`,
	} {
		if _, _, err := decodeCreate(b, json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", raw, err, want)
		}
	}
}

// The schema shows each field's argument; the tool without fields keeps
// the shared schema.
func TestInputSchemaFields(t *testing.T) {
	b := Binding{Fields: []ticket.FieldMap{{Field: "labels", Argument: "areas", Type: ticket.FieldArray, Description: "Areas.",
		Enum: []json.RawMessage{[]byte(`"api"`)}, Required: true}, {Field: "type", Fixed: []byte(`"Bug"`)}}}
	got, _ := json.Marshal(inputSchema(b))
	for _, want := range []string{`"areas":{"description":"Areas.","items":{"enum":["api"],"maxLength":1024,"minLength":1,"type":"string"},"maxItems":50,"type":"array"}`,
		`"required":["request_id","title","areas"]`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("schema %s\nlacks %s", got, want)
		}
	}
	if strings.Contains(string(got), `"type":{`) {
		t.Errorf("a fixed field is an argument: %s", got)
	}
	if plain, _ := json.Marshal(inputSchema(Binding{})); strings.Contains(string(plain), "areas") {
		t.Errorf("the shared schema was changed: %s", plain)
	}
}
