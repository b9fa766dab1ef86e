package config_test

import (
	"testing"

	"ticketrelay/config"
)

// The options comments and updates need reach each target's definition,
// and a wrong one is refused when the file loads.
func TestCommentAndUpdateOptions(t *testing.T) {
	const y = `
targets:
  - {name: rm, kind: redmine, endpoint: 'https://rm.example', options: {api_key_env: K, project: p, open_status_id: 2, closed_status_id: 6}}
  - {name: ji, kind: jira, endpoint: 'https://acme.atlassian.net', options: {email: a@b.c, token_env: K, project: OPS, priority_names: 'urgent=Blocker, low=Minor', fields: '{"components":[{"name":"Backend"}],"customfield_10010":"ops"}'}}
  - {name: zd, kind: zendesk, endpoint: 'https://acme.zendesk.com', options: {email: a@b.c, token_env: K, public_comments: true}}
  - {name: pd, kind: pagerduty, options: {routing_key_env: K, api_token_env: K, from: bot@acme.test, web_url: 'https://acme.pagerduty.com', priority_ids: 'urgent=PABC123'}}
  - {name: sl, kind: slack, options: {webhook_url_env: HOOK, bot_token_env: K, channel: C0123ABCD, workspace_url: 'https://acme.slack.com'}}
tools:
  - {name: a, target: rm}
  - {name: b, target: ji}
  - {name: c, target: zd}
  - {name: d, target: pd}
  - {name: e, target: sl}
`
	f, err := config.Parse([]byte(y), env("K", "secret-value", "HOOK", "https://hooks.slack.com/services/T/B/x"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, d := range f.Defs() {
		byName[d.Name] = i
	}
	defs := f.Defs()
	if d := defs[byName["rm"]]; d.OpenStatusID != 2 || d.ClosedStatusID != 6 {
		t.Errorf("redmine statuses: %+v", d)
	}
	if d := defs[byName["ji"]]; d.PriorityRefs["urgent"] != "Blocker" || d.PriorityRefs["low"] != "Minor" || string(d.Fields["customfield_10010"]) != `"ops"` {
		t.Errorf("jira priority_names and fields: %+v, %v", d.PriorityRefs, d.Fields)
	}
	if d := defs[byName["zd"]]; !d.PublicComments {
		t.Errorf("zendesk public_comments: %+v", d)
	}
	if d := defs[byName["pd"]]; d.From != "bot@acme.test" || d.WebURL != "https://acme.pagerduty.com" || d.PriorityRefs["urgent"] != "PABC123" {
		t.Errorf("pagerduty: %+v", d)
	}
	if d := defs[byName["sl"]]; d.BotToken.Reveal() != "secret-value" || d.Channel != "C0123ABCD" || d.WebURL != "https://acme.slack.com" {
		t.Errorf("slack: %+v", d)
	}

	for _, c := range []struct{ name, yaml, want string }{
		{"jira blank priority name", "targets:\n  - {name: j, kind: jira, endpoint: 'https://a', options: {email: a@b.c, token_env: K, project: OPS, priority_names: 'urgent='}}\n",
			`options.priority_names: "urgent=": want priority=id pairs`},
		{"jira fixed summary", "targets:\n  - {name: j, kind: jira, endpoint: 'https://a', options: {email: a@b.c, token_env: K, project: OPS, fields: '{\"summary\":\"x\"}'}}\n",
			`options.fields: field "summary" is filled from the ticket`},
		{"zendesk public_comments not a bool", "targets:\n  - {name: z, kind: zendesk, endpoint: 'https://a', options: {email: a@b.c, token_env: K, public_comments: yes-please}}\n",
			`options.public_comments: "yes-please" is not true or false`},
		{"pagerduty from without a key", "targets:\n  - {name: p, kind: pagerduty, options: {routing_key_env: K, from: bot@acme.test}}\n",
			`want the email of a PagerDuty user, with a REST API key`},
		{"slack channel name", "targets:\n  - {name: s, kind: slack, options: {webhook_url_env: HOOK, channel: '#general'}}\n",
			`want a channel id (C0123ABCD), not a name`},
		{"redmine closed status zero", "targets:\n  - {name: r, kind: redmine, endpoint: 'https://r', options: {api_key_env: K, project: p, closed_status_id: 0}}\n",
			`options.closed_status_id: "0" is not a positive integer`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml), env("K", "x", "HOOK", "https://hooks.slack.com/services/T/B/x"))
			if err == nil || !hasProblem(t, err, c.want) {
				t.Fatalf("error %v: want a problem containing %q", err, c.want)
			}
		})
	}
}
