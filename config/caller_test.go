package config_test

import (
	"strings"
	"testing"

	"ticketrelay/config"
	"ticketrelay/delivery/downstream"
)

// caller: is checked at load: none is the default, footer fits every kind,
// field only a kind whose API has a field for who asked (zendesk), and a
// misspelled mode is refused at its line with the modes named.
func TestCallerOption(t *testing.T) {
	lookup := func(string) (string, bool) { return "x", true }
	f, err := config.Parse([]byte(`targets:
  - name: plain
    kind: local
  - name: hook
    kind: webhook
    endpoint: https://hooks.example.com/t
    caller: footer
  - name: support
    kind: zendesk
    endpoint: https://acme.zendesk.com
    caller: field
    options: {email: bot@acme.test, token_env: ZD_TOKEN}
tools:
  - {name: create_ticket, target: plain}
`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]downstream.CallerMode{"plain": downstream.CallerNone, "hook": downstream.CallerFooter, "support": downstream.CallerField}
	for _, d := range f.Defs() {
		if d.Caller != want[d.Name] {
			t.Errorf("target %s: caller %q, want %q", d.Name, d.Caller, want[d.Name])
		}
	}

	got := problemsOf(t, `targets:
  - name: hook
    kind: webhook
    endpoint: https://hooks.example.com/t
    caller: field
  - name: plain
    kind: local
    caller: Footer
tools:
  - {name: create_ticket, target: hook}
`, lookup)
	if len(got) != 2 {
		t.Fatalf("problems %q; want two", got)
	}
	if !strings.HasPrefix(got[0], "line 5: ") || !strings.Contains(got[0], "field is not available for this kind") || !strings.Contains(got[0], "zendesk") {
		t.Errorf("problem %q; want field refused at line 5, naming the kinds that take it", got[0])
	}
	if !strings.HasPrefix(got[1], "line 8: ") || !strings.Contains(got[1], "want none, footer or field") {
		t.Errorf("problem %q; want the misspelled mode refused at line 8", got[1])
	}
}
