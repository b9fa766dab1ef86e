package ticket

import (
	"encoding/json"
	"testing"
)

// Fixed values are stored, not hashed; argument values are hashed; a
// request without fields hashes as before fields existed.
func TestFieldsInTheHash(t *testing.T) {
	plain := Request{RequestID: "r", Tool: "t", Target: "x", Title: "T", Priority: "normal"}
	const before = `{"request_id":"r","tool":"t","target":"x","title":"T","body":"","priority":"normal"}`
	b, _ := json.Marshal(&plain)
	if string(b) != before {
		t.Fatalf("a request without fields marshals as %s, want %s (its hash would change)", b, before)
	}
	fixed := plain
	fixed.Fixed = map[string]json.RawMessage{"issuetype": []byte(`"Bug"`)}
	if fixed.Hash() != plain.Hash() {
		t.Error("a fixed value changed the hash")
	}
	arg := plain
	arg.Fields = map[string]json.RawMessage{"customfield_1": []byte(`"ops"`)}
	if arg.Hash() == plain.Hash() {
		t.Error("an argument's value left the hash as it was")
	}
	// Stored and read back: one map of both, an update's Set untouched.
	arg.Fixed = fixed.Fixed
	var back Request
	if err := back.LoadFields(arg.StoredFields()); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(back.TargetFields())
	if string(got) != `{"customfield_1":"ops","issuetype":"Bug"}` {
		t.Errorf("read back %s", got)
	}
	up := Request{Action: Action{Kind: KindUpdate, Set: []byte(`{"status":"closed"}`)}}
	var upBack Request
	upBack.Kind = KindUpdate
	if err := upBack.LoadFields(up.StoredFields()); err != nil || string(upBack.Set) != `{"status":"closed"}` {
		t.Errorf("an update's set read back as %s (%v)", upBack.Set, err)
	}
	if plain.StoredFields() != "" {
		t.Error("a create without fields stores some")
	}
}
