package jira_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/jira/jiratest"
)

func TestParseFields(t *testing.T) {
	m, err := jira.ParseFields(`{"components":[{"name":"Backend"}],"customfield_10010":"ops","assignee":{"accountId":"abc"}}`)
	if err != nil || len(m) != 3 || string(m["customfield_10010"]) != `"ops"` {
		t.Fatalf("ParseFields = %v, %v", m, err)
	}
	for in, want := range map[string]string{
		`not json`:                           "want a JSON object",
		`{"summary":"x"}`:                    "filled from the ticket",
		`{"labels":["x"]}`:                   "filled from the ticket",
		`{"customfield_abc":1}`:              "want customfield_N",
		`{"colour":"red"}`:                   "want customfield_N",
		`{"components":"Backend"}`:           `want a list of {"name"`,
		`{"components":[{}]}`:                `want a list of {"name"`,
		`{"assignee":"jane"}`:                `want {"accountId"`,
		`{"customfield_10010":null}`:         "null sets nothing",
		`{"customfield_10010":1} {"more":2}`: "want a JSON object",
	} {
		if _, err := jira.ParseFields(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFields(%s) = %v; want an error containing %q", in, err, want)
		}
	}
}

// Fixed fields go with every create; a field Jira refuses fails the
// create permanently with Jira's words, and nothing is created.
func TestFixedFieldsOnCreate(t *testing.T) {
	f := jiratest.New(t, email, token, "OPS", 0, nil)
	open := func(fields string) *jira.Target {
		m, err := jira.ParseFields(fields)
		if err != nil {
			t.Fatal(err)
		}
		tg, err := jira.New(jira.Config{Name: "ops", BaseURL: f.URL(), Email: email, Token: downstream.NewSecret(token), Project: "OPS", Fields: m})
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	ctx := context.Background()
	r, err := open(`{"components":[{"name":"Backend"}],"customfield_10010":"ops"}`).Deliver(ctx, downstreamtest.NewDelivery("req-fields"))
	if err != nil {
		t.Fatal(err)
	}
	is, _ := f.Issue(r.ExternalID)
	var comps []struct{ Name string }
	if json.Unmarshal(is.Extra["components"], &comps) != nil || len(comps) != 1 || comps[0].Name != "Backend" || string(is.Extra["customfield_10010"]) != `"ops"` {
		t.Fatalf("issue fields %v; want the component and the custom field", is.Extra)
	}
	_, err = open(`{"customfield_99999":"x"}`).Deliver(ctx, downstreamtest.NewDelivery("req-bad-field"))
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "customfield_99999") {
		t.Fatalf("a field not on the screen: %v; want a permanent error naming it", err)
	}
	if n := f.Count(); n != 1 {
		t.Fatalf("%d issues, want 1", n)
	}
	if _, err := jira.New(jira.Config{Name: "ops", BaseURL: f.URL(), Email: email, Token: downstream.NewSecret(token), Project: "OPS",
		Fields: map[string]json.RawMessage{"summary": json.RawMessage(`"x"`)}}); err == nil {
		t.Fatal("a fixed summary was accepted")
	}
}
