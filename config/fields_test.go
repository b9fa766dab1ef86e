package config_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"ticketrelay/config"
	"ticketrelay/ticket"
)

const fieldTargets = `
targets:
  - {name: ji, kind: jira, endpoint: 'https://acme.atlassian.net', options: {email: a@b.c, token_env: K, project: OPS, fields: '{"customfield_10020":"x"}'}}
  - {name: rm, kind: redmine, endpoint: 'https://rm.example', options: {api_key_env: K, project: p, custom_field_id: 7}}
  - {name: sl, kind: slack, options: {webhook_url_env: HOOK}}
`

// A tool's fields reach it checked: fixed values in the API's type,
// arguments with their type (defaulted from the field), enum and wrap.
func TestToolFields(t *testing.T) {
	y := fieldTargets + `
tools:
  - name: report_bug
    target: ji
    fields:
      - {field: issuetype, value: Bug}
      - {field: components, value: [Backend, API]}
      - field: customfield_10010
        argument: team
        enum: [ops, web]
        required: true
        wrap: value
        description: The team that owns it.
      - {field: assignee, argument: owner}
  - name: file_rm
    target: rm
    fields:
      - {field: tracker_id, value: 3}
      - {field: custom_fields.12, argument: build, type: integer}
`
	f, err := config.Parse([]byte(y), fieldEnv)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Tools[0].FieldMaps()
	if len(got) != 4 {
		t.Fatalf("report_bug fields: %+v", got)
	}
	if string(got[0].Fixed) != `"Bug"` || string(got[1].Fixed) != `["Backend","API"]` {
		t.Errorf("fixed values: %s, %s", got[0].Fixed, got[1].Fixed)
	}
	team := got[2]
	if team.Argument != "team" || team.Type != ticket.FieldString || !team.Required || team.Wrap != "value" ||
		len(team.Enum) != 2 || string(team.Enum[1]) != `"web"` || team.Description != "The team that owns it." {
		t.Errorf("team: %+v", team)
	}
	if owner := got[3]; owner.Type != ticket.FieldString || owner.Description == "" {
		t.Errorf("owner: type and description default: %+v", owner)
	}
	rm := f.Tools[1].FieldMaps()
	if string(rm[0].Fixed) != `3` || rm[1].Type != ticket.FieldInteger {
		t.Errorf("redmine fields: %+v", rm)
	}
	var r ticket.Request
	if err := r.Values(got, map[string]json.RawMessage{"team": []byte(`"ops"`)}); err != nil {
		t.Fatal(err)
	}
	if string(r.Fields["customfield_10010"]) != `{"value":"ops"}` || string(r.Fixed["issuetype"]) != `"Bug"` {
		t.Errorf("values: %s / %s", r.Fields, r.Fixed)
	}
}

// Every mistake in a tool's fields is refused when the file loads, at its
// line, saying what is wrong.
func TestToolFieldProblems(t *testing.T) {
	cases := []struct{ fields, want string }{
		{`[{field: resolution, value: Done}]`, `jira has no field "resolution" (known: assignee, components,`},
		{`[{field: customfield_0, value: x}]`, `known:`},
		{`[{field: issuetype, value: 3}]`, `value 3: must be of type string, got integer`},
		{`[{field: components, value: Backend}]`, `want a list of strings`},
		{`[{field: issuetype, argument: title}]`, `argument "title" is one of the tool's own`},
		{`[{field: issuetype, argument: Type}]`, `argument "Type": use 1-64 lower-case letters`},
		{`[{field: issuetype}]`, `give either value (fixed) or argument`},
		{`[{field: issuetype, value: Bug, argument: kind}]`, `give either value (fixed) or argument`},
		{`[{field: issuetype, value: Bug, required: true}]`, `required applies to an argument`},
		{`[{field: issuetype, argument: kind, type: integer}]`, `type "integer": the field takes a string`},
		{`[{field: issuetype, argument: kind, wrap: name}]`, `wrap applies to a field that takes any value`},
		{`[{field: customfield_10010, argument: n, type: integer, enum: [1, x]}]`, `enum: "x": must be of type integer`},
		{`[{field: customfield_10010, argument: n, type: date}]`, `type "date": want one of string, integer, number, boolean, array`},
		{`[{field: customfield_10020, value: y}]`, `customfield_10020 is also fixed by target "ji" (options.fields)`},
		{`[{field: issuetype, value: Bug}, {field: issuetype, value: Task}]`, `issuetype is set twice`},
		{`[{field: assignee, argument: who}, {field: reporter, argument: who}]`, `argument "who" is used by another field`},
		{`[{field: issuetype, value: Bug, colour: red}]`, `unknown key "colour" in a tool's field`},
		{`[{field: issuetype, value: null}]`, `null sets nothing`},
	}
	for _, c := range cases {
		y := fieldTargets + "tools:\n  - name: t\n    target: ji\n    fields: " + c.fields + "\n"
		ps := problemsOf(t, y, fieldEnv)
		if len(ps) != 1 || !strings.Contains(ps[0], c.want) || !strings.HasPrefix(ps[0], "line 9:") || !strings.Contains(ps[0], `tool "t"`) {
			t.Errorf("fields %s:\n got %q\nwant one problem at line 9 of tool \"t\" containing %q", c.fields, ps, c.want)
		}
	}
	for target, fields := range map[string]string{
		"rm": `[{field: custom_fields.7, argument: k}]`, // the dedupe key's
		"sl": `[{field: channel, value: C1}]`,
	} {
		y := fieldTargets + "tools:\n  - name: t\n    target: " + target + "\n    fields: " + fields + "\n"
		ps := problemsOf(t, y, fieldEnv)
		want := map[string]string{"rm": "holds the dedupe key", "sl": "a slack target takes no fields"}[target]
		if !slices.ContainsFunc(ps, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("%s: got %q, want %q", target, ps, want)
		}
	}
}

var fieldEnv = env("K", "s", "HOOK", "https://hooks.slack.com/services/T/B/x")
