package config_test

import (
	"errors"
	"strings"
	"testing"

	"ticketrelay/config"
)

const grantsTargets = `
targets:
  - name: support
    kind: local
  - name: ops
    kind: local
tools:
  - name: create_ticket
    target: support
  - name: page_ops
    target: ops
`

// TestGrants: each grant's tools resolve to names, find_request always
// among them: all, read-only, names (one word or a list) and targets.
func TestGrants(t *testing.T) {
	f, err := config.Parse([]byte(grantsTargets+`
grants:
  - scope: tickets.write
    tools: all
  - scope: tickets.read
    tools: read-only
  - group: oncall
    tools: page_ops
  - subject: bot
    targets: [support]
  - anonymous: true
    tools: [create_ticket, read-only]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ who, tools string }{
		{"scope tickets.write", "create_ticket,find_request,page_ops,search_tickets"},
		{"scope tickets.read", "find_request,search_tickets"},
		{"group oncall", "find_request,page_ops,search_tickets"},
		{"subject bot", "create_ticket,find_request,search_tickets"},
		{"anonymous", "create_ticket,find_request,search_tickets"},
	}
	if len(f.Grants) != len(want) {
		t.Fatalf("%d grants, want %d", len(f.Grants), len(want))
	}
	for i, w := range want {
		g := f.Grants[i]
		if g.Who() != w.who || strings.Join(g.Allowed(), ",") != w.tools {
			t.Errorf("grant %d: %s %v, want %s %s", i+1, g.Who(), g.Allowed(), w.who, w.tools)
		}
	}
	// No grants key: no grants (every caller may call every tool).
	if f, err := config.Parse([]byte(grantsTargets), nil); err != nil || f.Grants != nil {
		t.Errorf("without grants: %+v %v", f.Grants, err)
	}
}

// TestGrantErrors: every mistake in grants is refused when the file is
// read, at its line, in one report.
func TestGrantErrors(t *testing.T) {
	for name, c := range map[string]struct{ grants, want string }{
		"unknown tool": {`
  - scope: x
    tools: [create_tickets]`, `line 14: grant 1 (scope x): tool "create_tickets" is not defined (tools: "create_ticket", "find_request", "page_ops", "search_tickets", or all, read-only)`},
		"unknown target": {`
  - group: g
    targets: [opps]`, `line 14: grant 1 (group g): target "opps" has no tool bound to it`},
		"two whos": {`
  - subject: a
    scope: b
    tools: all`, "line 13: grant 1: name exactly one of subject, group, scope or anonymous: true (it names 2)"},
		"no who": {`
  - tools: all`, "line 13: grant 1: name exactly one of subject, group, scope or anonymous: true (it names 0)"},
		"no what": {`
  - subject: a`, "line 13: grant 1 (subject a): say what it grants: tools: all, read-only or a list of tool names, or targets: a list of targets"},
		"misspelled key": {`
  - subject: a
    tool: all`, `line 14: unknown key "tool" in a grant (known: subject, group, scope, anonymous, tools, targets); did you mean "tools"?`},
		"empty list": {` []`, "line 12: grants: an empty list grants nothing to anyone; remove the key to let every caller call every tool"},
		"not a list": {` all`, `line 12: grants: want a list of grants, each item starting with "- subject:", "- group:", "- scope:" or "- anonymous: true"`},
		"anonymous not a bool": {`
  - anonymous: yes please
    tools: all`, `line 13: anonymous: "yes please": want true or false`},
	} {
		f, err := config.Parse([]byte(grantsTargets+"grants:"+c.grants+"\n"), nil)
		var ce *config.Error
		if !errors.As(err, &ce) || err.Error() != c.want {
			t.Errorf("%s: %v (%+v), want %q", name, err, f, c.want)
		}
	}
}

// TestGrantWordsAreNoToolNames: with grants, a tool named like one of
// their words is refused, as the grant could not say which it means.
func TestGrantWordsAreNoToolNames(t *testing.T) {
	_, err := config.Parse([]byte(`
tools:
  - name: all
    target: local
grants:
  - subject: a
    tools: all
`), nil)
	if err == nil || !strings.Contains(err.Error(), `tool "all" has the name of a grants word; rename the tool`) {
		t.Errorf("%v", err)
	}
}
